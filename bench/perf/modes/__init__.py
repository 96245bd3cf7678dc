"""One module per way of running the pipeline: sequential, Ray Data, reelsense streaming."""

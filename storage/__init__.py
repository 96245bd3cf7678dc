"""Object stores (a local folder, S3) that the checkpoints and the sinks both write through."""

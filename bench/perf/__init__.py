"""Throughput, latency and cost: the pipeline in each way of running it, its stages, its
checkpoints, backfill, host scaling and Lance upkeep."""

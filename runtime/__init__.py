"""The streaming runtime: orchestration, executors, stage pools, result writer, service, metrics."""

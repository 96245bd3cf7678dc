"""Record-level checkpoints: one record per video, advanced atomically and fenced by epoch."""

"""Tests of the checkpoint store against a real redis-server."""

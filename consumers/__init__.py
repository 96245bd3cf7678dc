"""Kafka consumer-group members that turn upload events into videos to process."""

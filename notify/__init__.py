"""Notifications to business systems: signed webhooks (Standard Webhooks) and a Kafka status
topic, fed from the checkpoint store's outbox."""

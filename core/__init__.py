"""Shared contracts of reelsense: errors, records and configuration."""

"""Wiring of reelsense: runtime, notifier, API, CLI and the embedded stack."""

"""The `reelsense` command and its operator client."""

"""Pipeline stages: plain classes that run the same under every runner."""

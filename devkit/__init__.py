"""The embedded stack for one machine, samples, a webhook receiver and the demo: dev tooling."""

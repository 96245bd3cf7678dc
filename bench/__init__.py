"""Benchmarks, run on demand, never in tests, by family: ``perf`` (throughput, latency and
cost), ``soak`` (crashes and long runs), ``quality`` (what the pipeline finds against known
truth) and ``search`` (how well and how fast search finds it)."""

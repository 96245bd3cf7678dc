"""Stage pools on Ray Serve, and the executor that drives them.

Each stage runs as a Serve deployment with its own resources and replica bounds: Serve gives
per-replica resources, autoscaling on queue depth, health checks, replacement of failed
replicas and request backpressure. The ingest pool (``ingest``) fetches, probes and decodes a
video in one replica (so the downloaded file is local to the decoder) and streams chunk tickets
back; the pixels stay in the object store (``ray.put`` in the decoder, ``ray.get`` in the image
stage), so they never pass through the orchestrating process. Model pools (``model``) batch
requests across videos with ``@serve.batch``, each item keeping its own outcome. The pools
application is built in ``application``; ``executor`` drives it for the orchestration.
"""

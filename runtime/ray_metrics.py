"""The pipeline's metrics on a Ray cluster: mirrored into Ray's metrics agent.

On one machine the service serves its Prometheus registry itself (``runtime.metrics_port``).
Inside a RayService that cannot work: the orchestration runs in consumer replicas (Serve
actors) on worker pods, an endpoint of theirs on 127.0.0.1 is out of reach, and several
replicas on one pod would want the same port. Every Ray node already runs a metrics agent that
serves what the processes of its node record through ``ray.util.metrics`` on the node's
metrics export port (``--metrics-export-port``, 8080 under KubeRay), the port a PodMonitor
scrapes (``deploy/kuberay/monitoring.yaml``). So each replica mirrors its registry there.

Why a mirror of the registry rather than recording everything twice: the code that records
stays free of Ray (one machine, the tests, the sequential runner), and Ray's ``Gauge`` only
has ``set``, so gauges moved with ``inc``/``dec`` could not be recorded twice without reading
prometheus_client's internals. The mirror reads the registry's public ``collect()`` once per
metrics round (``runtime.metrics_interval_s``):

- a counter becomes a Ray ``Counter`` increased by what it grew since the last round;
- a gauge becomes a Ray ``Gauge``, set;
- a histogram becomes its ``_bucket`` (with ``le``), ``_sum`` and ``_count`` series, each a
  Ray ``Gauge`` of the cumulative value: Ray's ``Histogram`` takes single observations, and
  these series are exactly what ``rate()`` and ``histogram_quantile()`` read.

What a scrape then finds: Ray's exporter puts ``ray_`` before every name
(``reelsense_videos_total`` -> ``ray_reelsense_videos_total``) and adds labels of its own
(``NodeAddress``, ``WorkerId``, ``SessionName``, ...); each series also carries ``replica``,
the name of the process that recorded it. Every consumer replica reads the activity of every
pool replica and the lag of the whole group, so those series (``reelsense_stage_busy_*``,
``reelsense_stage_replicas``, ``reelsense_stage_cpu_seconds_total``,
``reelsense_consumer_lag``) come once per consumer: aggregate them with ``max``, not ``sum``.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics_core import Metric

from core.config import ServiceConfig
from runtime.activity import replica_name

log = logging.getLogger(__name__)

PREFIX = "reelsense_"  # only the service's own metrics, not the process or GC collectors
RAY_PREFIX = "ray_"  # what Ray's exporter puts before every name
_HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")


@dataclass(frozen=True)
class Series:
    """One sample of the registry as it is mirrored: a counter's running total or a value."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    counter: bool
    documentation: str = ""


def exported_names(registry: CollectorRegistry = REGISTRY) -> set[str]:
    """The series names the registry's ``reelsense_*`` metrics are scraped under (without
    Ray's ``ray_``), labelled or not, recorded yet or not."""
    names: set[str] = set()
    for family in _families(registry):
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names.update(family.name + part for part in _HISTOGRAM_PARTS)
        else:
            names.add(family.name)
    return names


def mirrored_series(registry: CollectorRegistry = REGISTRY) -> Iterator[Series]:
    """The samples the mirror copies: counters' totals, gauges, histograms' buckets, sums
    and counts (not the ``_created`` timestamps)."""
    for family in _families(registry):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = tuple(sorted(sample.labels.items()))
            counter = family.type == "counter" and sample.name.endswith("_total")
            yield Series(sample.name, labels, float(sample.value), counter, family.documentation)


def _families(registry: CollectorRegistry) -> Iterable[Metric]:
    return (family for family in registry.collect() if family.name.startswith(PREFIX))


class RayMetricsMirror:
    """Copies ``reelsense_*`` series of a registry into ``ray.util.metrics``, tagged with
    ``replica``. Call ``mirror()`` from one thread (the metrics poller's round)."""

    def __init__(self, replica: str, registry: CollectorRegistry = REGISTRY) -> None:
        self.replica = replica
        self._registry = registry
        self._metrics: dict[str, Any] = {}  # series name -> its ray.util.metrics object
        self._totals: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def mirror(self) -> int:
        """One pass over the registry; how many series were written."""
        written = 0
        for series in mirrored_series(self._registry):
            tags = dict(series.labels)
            if series.counter:
                key = (series.name, series.labels)
                grown = series.value - self._totals.get(key, 0.0)
                self._totals[key] = series.value
                if grown <= 0:  # Ray's Counter takes only increments
                    continue
                self._metric(series, tags).inc(grown, tags=tags)
            else:
                self._metric(series, tags).set(series.value, tags=tags)
            written += 1
        return written

    def _metric(self, series: Series, tags: dict[str, str]) -> Any:
        metric = self._metrics.get(series.name)
        if metric is None:
            from ray.util.metrics import Counter, Gauge

            kind = Counter if series.counter else Gauge
            tag_keys = (*sorted(tags), "replica")
            metric = kind(series.name, series.documentation or series.name, tag_keys=tag_keys)
            metric.set_default_tags({"replica": self.replica})
            self._metrics[series.name] = metric
        return metric


def ray_metrics_mirror(config: ServiceConfig) -> Callable[[], object] | None:
    """The mirror's round for a service on a Ray cluster (``ray.address`` set), None
    elsewhere: one machine serves its registry itself, and a process joined through Ray
    Client has no metrics agent of its own (it keeps ``runtime.metrics_port``). Its series
    are tagged with the Serve replica's id, or ``runtime.instance_id``, or the host name."""
    if config.ray.address is None or config.runtime.executor != "ray":
        return None
    import ray
    from ray.util.client import ray as client_ray

    if client_ray.is_connected():
        log.info("metrics: joined through Ray Client; serve them with runtime.metrics_port")
        return None
    if not ray.is_initialized():
        return None
    replica = replica_name(config.runtime.instance_id or socket.gethostname())
    return RayMetricsMirror(replica).mirror

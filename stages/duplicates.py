"""Re-uploads: the videos of the library a video copies, each with a score and its spans.

The ``duplicates`` video stage takes the video's fingerprint (the ``fingerprint`` frames
stage's hashes, one a second, flat pictures left out: ``sinks.fingerprints``), finds the
library videos that share close hashes with it (``sinks.fingerprint_library``: its tenant's,
or every tenant's where ``across_tenants`` is set), and aligns each found with at least
``min_hits`` samples against the video (``stages.duplicate_match``), once as it is and once
mirrored. The result holds ``duplicates: [{video_id, tenant, score, mirrored, speed,
spans}]``, the best first. The video's own hashes join the library when the sinks write it,
so it is never its own copy, and of two copies analysed at the same moment only the later
one written finds the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from core.config import DuplicateSettings, ServiceConfig, StorageSettings
from core.outputs import VideoOutput
from core.records import VideoResult
from core.stage_names import DUPLICATES, FINGERPRINT
from sinks.fingerprint_library import FingerprintLibrary, Probe
from sinks.fingerprints import TABLE, Sampled, fingerprint_of
from sinks.lance_table import LanceTable
from stages.base import VideoStage
from stages.duplicate_match import Alignment, Rules, align

# Bump when the lookup or the alignment changes what is found.
MATCH_REVISION = 1


class DuplicatesStage(VideoStage):
    """Looks each video up among the fingerprints of those before it."""

    name = DUPLICATES
    reads = (FINGERPRINT,)

    def __init__(
        self,
        settings: DuplicateSettings,
        storage: StorageSettings,
        *,
        library: FingerprintLibrary | None = None,
    ) -> None:
        """``library``: the one to look videos up in (a benchmark's); None: the table's."""
        self._settings = settings
        self._storage = storage
        self._rules = Rules(
            max_distance=settings.max_distance,
            min_samples=settings.min_samples,
            min_span_s=settings.min_span_s,
            min_distinct=settings.min_distinct,
        )
        self._library = library

    @classmethod
    def build(cls, config: ServiceConfig) -> DuplicatesStage | None:
        duplicates = config.stages.duplicates
        return cls(duplicates, config.storage) if duplicates.enabled else None

    def version_params(self) -> Mapping[str, object]:
        return {**self._settings.model_dump(mode="json"), "match": MATCH_REVISION}

    def setup(self) -> None:
        self.library.refresh()  # the whole table is read once, at start

    @property
    def library(self) -> FingerprintLibrary:
        if self._library is None:
            self._library = FingerprintLibrary(LanceTable.from_settings(self._storage, TABLE))
        return self._library

    def analyse(self, result: VideoResult) -> VideoOutput:
        samples = fingerprint_of(result.frames)
        self.library.refresh()
        found = self.lookup(samples, tenant=result.ref.tenant, exclude=result.ref.video_id)
        return VideoOutput({"fingerprint_samples": len(samples), DUPLICATES: found})

    def lookup(
        self, samples: Sequence[Sampled], *, tenant: str, exclude: str
    ) -> list[dict[str, Any]]:
        """The library videos ``samples`` copy, as the result lists them, the best first."""
        settings = self._settings
        best: dict[str, tuple[Alignment, bool, str]] = {}
        times = np.asarray([s.time_s for s in samples], dtype=np.float64)
        for mirrored in (False, True):
            probes = [
                Probe(s.hash.mirror, s.hash.mirror_weak)
                if mirrored
                else Probe(s.hash.value, s.hash.weak)
                for s in samples
            ]
            hits = self.library.hits(
                probes,
                max_distance=min(settings.hit_distance, settings.max_distance),
                tenant=None if settings.across_tenants else tenant,
                exclude=exclude,
            )
            found = sorted(
                (v for v, by in hits.items() if len(by) >= settings.min_hits),
                key=lambda v: -len(hits[v]),
            )[: settings.max_candidates]
            hashes = np.asarray([p.value for p in probes], dtype=np.uint64)
            for video in found:
                other = self.library.sequence(video)
                alignment = align(times, hashes, other.times, other.hashes, self._rules)
                held = best.get(other.video_id)
                if alignment is not None and (held is None or alignment.score > held[0].score):
                    best[other.video_id] = (alignment, mirrored, other.tenant)
        ranked = sorted(best.items(), key=lambda item: (-item[1][0].score, item[0]))
        return [
            {
                "video_id": video_id,
                "tenant": tenant_of,
                "score": round(alignment.score, 4),
                "mirrored": mirrored,
                "speed": round(alignment.speed, 2),
                "spans": [span.to_json() for span in alignment.spans],
            }
            for video_id, (alignment, mirrored, tenant_of) in ranked[: settings.max_duplicates]
        ]

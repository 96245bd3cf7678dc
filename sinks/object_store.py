"""The result documents written into the object store.

A result document's key is derived from the video and the pipeline version, and its bytes from
the result alone (sorted keys, no write time), so writing the same result twice leaves the same
object. The thumbnails' keys are made in ``sinks.views``, beside the shots that name them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any
from urllib.parse import quote, unquote

from core.config import StorageSettings
from core.outputs import outputs_from_json
from core.records import EarlierResult, Frame, ProbeInfo, VideoRef, VideoResult
from core.speech import Speech
from sinks.base import Sink
from sinks.views import decode_version, thumbnail_key, views_of
from storage.base import ObjectStore
from storage.uri import object_store_from_uri

DOCUMENT_SCHEMA = 1


def document_key(tenant: str, video_id: str, pipeline_version: str) -> str:
    """``results/{tenant}/{video_id}/{pipeline_version}.json``, each part percent-encoded."""
    parts = (quote(part, safe="") for part in (tenant, video_id, pipeline_version))
    tenant_part, video_part, version_part = parts
    return f"results/{tenant_part}/{video_part}/{version_part}.json"


def video_prefixes(tenant: str, video_id: str) -> tuple[str, str]:
    """Where a video's documents and thumbnails are, every version of them."""
    document = document_key(tenant, video_id, "x").rsplit("/", 1)[0] + "/"
    thumbnails = thumbnail_key(tenant, video_id, "x", 0).rsplit("/", 2)[0] + "/"
    return document, thumbnails


def result_document(result: VideoResult) -> dict[str, Any]:
    """The JSON-ready document of one result: everything but pixels and embeddings, the
    on-screen text merged into spans over time and the shots (``sinks.views``), and the speech
    (``core.speech``; None when it is not recognised)."""
    ref, views = result.ref, views_of(result)
    return {
        "schema": DOCUMENT_SCHEMA,
        "video": {
            "video_id": ref.video_id,
            "tenant": ref.tenant,
            "uri": ref.uri,
            "metadata": ref.metadata,
        },
        "pipeline_version": result.pipeline_version,
        "stage_versions": dict(result.stage_versions),
        "completed_at": result.completed_at.isoformat(),
        "probe": asdict(result.probe),
        "frames": [
            {
                **frame.to_json(),
                "ocr_text": frame.ocr_text,
                "has_embedding": frame.embedding is not None,
            }
            for frame in sorted(result.frames, key=lambda f: (f.timestamp_s, f.index))
        ],
        "text": result.text.split("\n") if result.text else [],
        "text_spans": [span.to_json() for span in views.text_spans],
        "shots": list(views.shots),
        "speech": result.speech.to_json() if result.speech is not None else None,
        "outputs": {name: output.to_json() for name, output in result.outputs.items()},
        "timings": {stage: float(seconds) for stage, seconds in result.timings.items()},
    }


def earlier_result(document: dict[str, Any], frame_count: int) -> EarlierResult:
    """A stored document read back as what a later run of the video may reuse."""
    return EarlierResult(
        pipeline_version=str(document["pipeline_version"]),
        frame_count=frame_count,
        uri=str(document["video"]["uri"]),
        probe=ProbeInfo(**document["probe"]),
        stage_versions=dict(document.get("stage_versions") or {}),
        frames=[Frame.from_json(raw) for raw in document["frames"]],
        speech=Speech.from_json(document["speech"]) if document.get("speech") else None,
        outputs=outputs_from_json(document.get("outputs")),
    )


def encode_document(document: dict[str, Any]) -> bytes:
    """Canonical bytes: sorted keys, no insignificant whitespace, UTF-8."""
    text = json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    return text.encode("utf-8")


class ResultDocumentSink(Sink):
    """One JSON document per video and pipeline version in the object store."""

    name = "result_documents"

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    @classmethod
    def from_settings(cls, storage: StorageSettings) -> ResultDocumentSink:
        return cls(object_store_from_uri(storage.object_store_uri, storage))

    def write(self, results: Sequence[VideoResult]) -> None:
        latest = {result.ref.video_id: result for result in results}  # the last one wins
        for result in latest.values():
            self._write_thumbnails(result)
            key = document_key(result.ref.tenant, result.ref.video_id, result.pipeline_version)
            data = encode_document(result_document(result))
            self.store.put_bytes(key, data, content_type="application/json")

    def _write_thumbnails(self, result: VideoResult) -> None:
        """Before the document that names them; frames read back from an earlier result carry
        no bytes (b""): theirs are stored already."""
        ref, version = result.ref, decode_version(result)
        for frame in result.frames:
            if frame.thumbnail:
                key = thumbnail_key(ref.tenant, ref.video_id, version, frame.index)
                self.store.put_bytes(key, frame.thumbnail, content_type="image/jpeg")

    def forget(self, videos: Sequence[VideoRef]) -> None:
        """Every document and thumbnail of ``videos``, every version, removed."""
        for video in videos:
            for prefix in video_prefixes(video.tenant, video.video_id):
                for key in self.store.list(prefix):
                    self.store.delete(key)

    def read(self, tenant: str, video_id: str, pipeline_version: str) -> dict[str, Any] | None:
        """The stored document, or None if that video was not written under that version."""
        data = self.store.get_bytes(document_key(tenant, video_id, pipeline_version))
        return None if data is None else dict(json.loads(data))

    def versions(self, tenant: str, video_id: str) -> list[str]:
        """Pipeline versions with a document for the video."""
        prefix, _ = video_prefixes(tenant, video_id)
        return [unquote(key[len(prefix) : -len(".json")]) for key in self.store.list(prefix)]

    def close(self) -> None:
        self.store.close()

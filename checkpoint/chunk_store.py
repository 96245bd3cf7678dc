"""Persisted chunk outputs: what the stages found in one chunk, kept until the video is done.

A chunk's outputs are written here before the checkpoint records the chunk as done, so an
attempt that resumes a video takes finished chunks from here instead of recomputing them; the
objects alone are enough (a chunk object exists only once complete), so chunks finished before
Redis lost its state are found too.
Keys are deterministic: ``chunks/{video_id}/{pipeline_version}/{index:06d}.json``. The
transcripts of the audio track's windows are kept the same way, beside them
(``speech-{index:06d}.json``, and ``speech-end.json`` once the track is read to its end).

Each object is stamped with the video's origin, its tenant and source (``chunk_origin``), and
read back only for the same origin: after Redis lost a record, the next claimant of the id may
be another tenant, or the same tenant with another file, and neither is given what was found
in someone else's video.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import numpy as np

from core.records import Chunk, Frame, Vector, VideoRef
from core.speech import SpeechEnd, SpeechItem, SpeechPart
from core.urls import redact_url
from storage.base import ObjectStore

PREFIX = "chunks"


def chunk_origin(ref: VideoRef) -> str:
    """The stamp of ``ref``'s persisted chunks: a digest of its tenant and its source as shown
    (a re-signed presigned URL is the same source; nothing secret is kept)."""
    origin = f"{ref.tenant}\n{redact_url(ref.uri)}".encode()
    return hashlib.sha256(origin).hexdigest()[:32]


class ChunkStore:
    """Chunk outputs (no pixels) in an object store."""

    def __init__(self, objects: ObjectStore) -> None:
        self._objects = objects

    @staticmethod
    def prefix(video_id: str, pipeline_version: str) -> str:
        return f"{PREFIX}/{video_id}/{pipeline_version}/"

    @classmethod
    def key(cls, video_id: str, pipeline_version: str, index: int) -> str:
        return f"{cls.prefix(video_id, pipeline_version)}{index:06d}.json"

    def put(self, pipeline_version: str, chunk: Chunk, origin: str) -> None:
        key = self.key(chunk.video_id, pipeline_version, chunk.index)
        data = encode_chunk(chunk, origin=origin)
        self._objects.put_bytes(key, data, content_type="application/json")

    def get(self, video_id: str, pipeline_version: str, index: int, origin: str) -> Chunk | None:
        """The chunk as persisted for ``origin``; None if none was, or for another origin."""
        data = self._objects.get_bytes(self.key(video_id, pipeline_version, index))
        if data is None:
            return None
        raw = json.loads(data)
        return _chunk_of(raw) if raw.get("origin") == origin else None

    def indexes(self, video_id: str, pipeline_version: str) -> set[int]:
        """Indexes of the chunks of the video persisted under the version."""
        prefix = self.prefix(video_id, pipeline_version)
        found: set[int] = set()
        for key in self._objects.list(prefix):
            name = key[len(prefix) :].removesuffix(".json")
            if name.isdigit():
                found.add(int(name))
        return found

    def put_speech(self, pipeline_version: str, item: SpeechItem, origin: str) -> None:
        name = "speech-end" if isinstance(item, SpeechEnd) else f"speech-{item.index:06d}"
        key = f"{self.prefix(item.video_id, pipeline_version)}{name}.json"
        raw = {**item.to_json(), "origin": origin}
        data = json.dumps(raw, ensure_ascii=False, separators=(",", ":")).encode()
        self._objects.put_bytes(key, data, content_type="application/json")

    def speech(
        self, video_id: str, pipeline_version: str, origin: str
    ) -> tuple[dict[int, SpeechPart], SpeechEnd | None]:
        """The video's window transcripts persisted for ``origin`` by index, and the track's
        end if reached."""
        prefix = f"{self.prefix(video_id, pipeline_version)}speech-"
        parts: dict[int, SpeechPart] = {}
        end: SpeechEnd | None = None
        for key in self._objects.list(prefix):
            data = self._objects.get_bytes(key)
            if data is None:  # removed since it was listed
                continue
            raw = json.loads(data)
            if raw.pop("origin", None) != origin:
                continue
            if key.endswith("speech-end.json"):
                end = SpeechEnd.from_json(raw)
            else:
                part = SpeechPart.from_json(raw)
                parts[part.index] = part
        return parts, end

    def left(self) -> dict[tuple[str, str], float]:
        """Every (video, pipeline version) with persisted chunks or speech, with when the newest
        of them was written (seconds since the epoch)."""
        found: dict[tuple[str, str], float] = {}
        for key, at in self._objects.modified(f"{PREFIX}/").items():
            parts = key.split("/")
            if len(parts) == 4:
                group = (parts[1], parts[2])
                found[group] = max(at, found.get(group, 0.0))
        return found

    def delete_all(self, video_id: str) -> int:
        """Remove every persisted chunk of the video, of every version; how many there were."""
        keys = self._objects.list(f"{PREFIX}/{video_id}/")
        for key in keys:
            self._objects.delete(key)
        return len(keys)

    def delete_video(self, video_id: str, pipeline_version: str) -> int:
        """Remove every persisted chunk of the video; returns how many there were."""
        keys = self._objects.list(self.prefix(video_id, pipeline_version))
        for key in keys:
            self._objects.delete(key)
        return len(keys)


def encode_chunk(chunk: Chunk, *, origin: str = "") -> bytes:
    return json.dumps(
        {
            "origin": origin,
            "video_id": chunk.video_id,
            "index": chunk.index,
            "last": chunk.last,
            "frames": [_encode_frame(frame) for frame in chunk.frames],
        },
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode()


def decode_chunk(data: bytes) -> Chunk:
    return _chunk_of(json.loads(data))


def _chunk_of(raw: dict[str, Any]) -> Chunk:
    return Chunk(
        video_id=raw["video_id"],
        index=int(raw["index"]),
        frames=[_decode_frame(frame) for frame in raw["frames"]],
        last=bool(raw["last"]),
    )


def _encode_frame(frame: Frame) -> dict[str, Any]:
    thumbnail = base64.b64encode(frame.thumbnail).decode() if frame.thumbnail else None
    return {
        **frame.to_json(),
        "embedding": _encode_vector(frame.embedding),
        "image_embedding": _encode_vector(frame.image_embedding),
        "thumbnail_jpeg": thumbnail,
    }


def _decode_frame(raw: dict[str, Any]) -> Frame:
    frame = Frame.from_json(
        raw,
        embedding=_decode_vector(raw["embedding"]),
        # Absent from chunks persisted before image embeddings existed.
        image_embedding=_decode_vector(raw.get("image_embedding")),
    )
    if raw.get("thumbnail_jpeg"):
        frame.thumbnail = base64.b64decode(raw["thumbnail_jpeg"])
    return frame


def _encode_vector(vector: Vector | None) -> str | None:
    """Little-endian float32 bytes in base64: exact, and a third of the size of a JSON list."""
    if vector is None:
        return None
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()


def _decode_vector(encoded: str | None) -> Vector | None:
    if encoded is None:
        return None
    return np.frombuffer(base64.b64decode(encoded), dtype="<f4").astype(np.float32)

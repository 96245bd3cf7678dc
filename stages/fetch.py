"""Fetch + probe: bring a video to local disk and check it against the limits.

Sources: ``file://`` (only below ``limits.file_roots``), ``s3://bucket/key`` (a presigned GET)
and ``http(s)://``, both downloaded under a byte cap and a total deadline that holds however
slowly the server sends. Every HTTP hop (the URL, then each redirect) is checked by
:mod:`core.netguard` and connected to the address it checked. The probe opens the
file with PyAV restricted to the allowed demuxers and to the ``file`` protocol, so a playlist or
concat list can never make FFmpeg open other files or URLs.

A ``LocalVideo`` path is local to the worker that fetched it; ``release()`` it there when done.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import av
import boto3
from av.container import InputContainer
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from core.config import LimitSettings, ServiceConfig, StorageSettings
from core.records import LocalVideo, ProbeInfo, VideoRef
from core.stage_names import FETCH
from core.urls import redact_url
from stages.base import Resources, Stage, StageKind
from stages.download import download
from stages.errors import (
    FetchFailed,
    FetchRefused,
    InvalidVideo,
    LimitExceeded,
    SourceNotFound,
    SourceTooLarge,
    UnsupportedMedia,
)

log = logging.getLogger(__name__)

_PLAYLIST_MAGIC = (b"#EXTM3U", b"ffconcat", b"<?xml", b"<MPD")


def check_dimensions(width: int, height: int, limits: LimitSettings) -> None:
    """``LimitExceeded`` (``limit_dimensions``) for a frame size above the limits, whichever
    way round: a portrait 2160x3840 video fits a 7680x4320 limit."""
    if max(width, height) > max(limits.max_width, limits.max_height) or min(width, height) > min(
        limits.max_width, limits.max_height
    ):
        raise LimitExceeded(
            f"{width}x{height} is above the {limits.max_width}x{limits.max_height} limit",
            code="limit_dimensions",
        )


def open_container(path: str | Path, limits: LimitSettings) -> InputContainer:
    """Open ``path`` with only the allowed demuxers and local-file I/O.

    The demuxer whitelist refuses HLS, DASH, concat lists and image sequences before they
    read a header (they could open further files or URLs); ``protocol_whitelist=file`` stops
    any nested open from leaving the local file system.
    """
    demuxers = ",".join(dict.fromkeys(n for c in limits.containers for n in c.split(",")))
    options = {"format_whitelist": demuxers, "protocol_whitelist": "file"}
    try:
        return av.open(str(path), mode="r", options=options)
    except av.error.FileNotFoundError as exc:
        raise SourceNotFound(f"{path}: no such file", code="source_not_found") from exc
    except av.error.ArgumentError as exc:
        # The only EINVAL at open time is a demuxer outside the whitelist.
        raise UnsupportedMedia(
            f"container not allowed (allowed: {'; '.join(limits.containers)})",
            code="unsupported_container",
        ) from exc
    except (av.error.FFmpegError, OSError) as exc:
        raise InvalidVideo(f"not a readable video: {exc}", code="invalid_video") from exc


def main_video_stream(container: InputContainer) -> av.VideoStream | None:
    """The first video stream that is not cover art."""
    attached = av.stream.Disposition.attached_pic
    for stream in container.streams.video:
        if not stream.disposition & attached:
            return stream
    return None


def probe_video(path: str | Path, limits: LimitSettings) -> ProbeInfo:
    """Read the container header and enforce every limit; raises with a stable reason code."""
    file = Path(path)
    size = file.stat().st_size
    if size == 0:
        raise InvalidVideo("the file is empty", code="empty_file")
    if size > limits.max_bytes:
        raise SourceTooLarge(
            f"{size} bytes is above the {limits.max_bytes} byte limit", code="limit_bytes"
        )
    with file.open("rb") as head:
        if head.read(16).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(_PLAYLIST_MAGIC):
            raise UnsupportedMedia(
                "playlists and concat lists (HLS, DASH, ffconcat) are not accepted",
                code="unsupported_container",
            )
    with open_container(file, limits) as container:
        return _describe(container, size, limits)


def _describe(container: InputContainer, size: int, limits: LimitSettings) -> ProbeInfo:
    fmt = container.format.name
    if not set(fmt.split(",")) & {n for c in limits.containers for n in c.split(",")}:
        raise UnsupportedMedia(f"container {fmt!r} is not allowed", code="unsupported_container")
    stream = main_video_stream(container)
    if stream is None:
        raise UnsupportedMedia("the file has no video stream", code="no_video_stream")
    streams = len(container.streams)
    if streams > limits.max_streams:
        raise LimitExceeded(
            f"{streams} streams, the limit is {limits.max_streams}", code="limit_streams"
        )
    codec = stream.codec_context.codec.canonical_name
    if codec not in limits.codecs:
        raise UnsupportedMedia(
            f"video codec {codec!r} is not allowed (allowed: {', '.join(limits.codecs)})",
            code="unsupported_codec",
        )
    width, height = stream.codec_context.width, stream.codec_context.height
    if width <= 0 or height <= 0:
        raise InvalidVideo("the video stream has no frame size", code="invalid_video")
    check_dimensions(width, height, limits)
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate
    fps = float(rate) if rate else 0.0
    if fps > limits.max_fps:
        raise LimitExceeded(f"{fps:.2f} fps is above the {limits.max_fps} limit", code="limit_fps")
    duration = _duration_s(container, stream)
    if duration > limits.max_duration_s:
        raise LimitExceeded(
            f"{duration:.1f} s is above the {limits.max_duration_s} s limit", code="limit_duration"
        )
    return ProbeInfo(
        container=fmt,
        codec=codec,
        width=width,
        height=height,
        fps=fps,
        duration_s=duration,
        video_streams=len(container.streams.video),
        audio_streams=len(container.streams.audio),
        size_bytes=size,
    )


def _duration_s(container: InputContainer, stream: av.VideoStream) -> float:
    if container.duration is not None and container.duration > 0:
        return container.duration / av.time_base
    if stream.duration is not None and stream.time_base is not None:
        return max(0.0, float(stream.duration * stream.time_base))
    return 0.0


class FetchProbeStage(Stage[VideoRef, LocalVideo]):
    """VideoRef -> LocalVideo: fetch to local disk if needed, then probe under the limits."""

    name = FETCH
    kind = StageKind.INGEST
    resources = Resources(cpus=0.1)

    @classmethod
    def build(cls, config: ServiceConfig) -> FetchProbeStage:
        return cls(config.limits, config.storage, str(Path(config.runtime.workdir)))

    def __init__(self, limits: LimitSettings, storage: StorageSettings, workdir: str) -> None:
        self._limits = limits
        self._storage = storage
        self._downloads = Path(workdir) / "downloads"
        self._s3: Any = None
        self._lock = threading.Lock()

    def setup(self) -> None:
        self._downloads.mkdir(parents=True, exist_ok=True)
        removed = remove_orphan_downloads(self._downloads)
        if removed:
            log.info("removed %d downloads of workers that are gone", removed)

    def _s3_client(self) -> Any:
        # Built on first use, not in setup(): without configured keys botocore looks for
        # credentials (instance metadata at 169.254.169.254 included), which only a worker that
        # actually reads from S3 should do.
        with self._lock:
            if self._s3 is None:
                storage, limits = self._storage, self._limits
                self._s3 = boto3.session.Session().client(
                    "s3",
                    endpoint_url=storage.s3_endpoint_url,
                    region_name=storage.s3_region,
                    aws_access_key_id=_secret(storage.s3_access_key_id),
                    aws_secret_access_key=_secret(storage.s3_secret_access_key),
                    config=Config(
                        connect_timeout=limits.connect_timeout_s,
                        read_timeout=limits.read_timeout_s,
                        # Retries belong to the video's retry budget, not to the client.
                        retries={"max_attempts": 1, "mode": "standard"},
                    ),
                )
            return self._s3

    def teardown(self) -> None:
        with self._lock:
            if self._s3 is not None:
                self._s3.close()
                self._s3 = None

    def process_batch(self, items: Sequence[VideoRef]) -> list[LocalVideo]:
        return [self.open(ref) for ref in items]

    def open(self, ref: VideoRef) -> LocalVideo:
        """Fetch and probe one video. Raises a ``stages.errors`` error with a reason code."""
        path, temporary = self._materialize(ref)
        try:
            probe = probe_video(path, self._limits)
        except BaseException:
            if temporary:
                path.unlink(missing_ok=True)
            raise
        return LocalVideo(ref=ref, path=str(path), probe=probe, temporary=temporary)

    def release(self, video: LocalVideo) -> None:
        """Remove the download behind ``video``, if it is one of ours; idempotent."""
        if not video.temporary:
            return
        path = Path(video.path)
        if path.parent.resolve() == self._downloads.resolve():
            path.unlink(missing_ok=True)

    def _materialize(self, ref: VideoRef) -> tuple[Path, bool]:
        scheme = urlsplit(ref.uri).scheme.lower()
        if scheme == "file":
            return self._local_file(ref.uri), False
        if scheme in ("s3", "http", "https"):
            self._downloads.mkdir(parents=True, exist_ok=True)
            # The worker's pid first: a download whose worker was killed is found by it.
            name = f"{os.getpid()}-{_safe_name(ref.video_id)}-{uuid.uuid4().hex[:12]}"
            dest = self._downloads / name
            if scheme == "s3":
                self._download_s3(ref.uri, dest, ref.tenant)
            else:
                download(ref.uri, dest, self._limits)
            return dest, True
        raise FetchRefused(f"URI scheme {scheme!r} is not supported", code="fetch_refused")

    def _local_file(self, uri: str) -> Path:
        parts = urlsplit(uri)
        if parts.netloc not in ("", "localhost"):
            raise FetchRefused("file URIs must not name a host", code="fetch_refused")
        if not self._limits.file_roots:
            raise FetchRefused(
                "file URIs are disabled: no limits.file_roots configured", code="fetch_refused"
            )
        raw = unquote(parts.path)
        if "\x00" in raw or not raw.startswith("/"):
            raise FetchRefused("file URI path must be absolute", code="fetch_refused")
        # resolve() follows symlinks and removes "..", so the root check sees the real target.
        try:
            path = Path(raw).resolve()
        except (RuntimeError, OSError) as exc:  # a symlink loop (RuntimeError before 3.13)
            raise FetchRefused(f"{raw} cannot be resolved: {exc}", code="fetch_refused") from exc
        roots = [Path(root).resolve() for root in self._limits.file_roots]
        if not any(path.is_relative_to(root) for root in roots):
            raise FetchRefused(f"{raw} is outside the allowed file roots", code="fetch_refused")
        try:
            mode = path.stat().st_mode
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise SourceNotFound(f"{raw} does not exist", code="source_not_found") from exc
        except OSError as exc:
            # A name that is too long or loops can never be read: retrying cannot help.
            if exc.errno in (errno.ENAMETOOLONG, errno.ELOOP):
                raise SourceNotFound(f"{raw}: {exc.strerror}", code="source_not_found") from exc
            raise FetchFailed(f"cannot read {raw}: {exc}", code="fetch_failed") from exc
        if not stat.S_ISREG(mode):
            raise FetchRefused(f"{raw} is not a regular file", code="fetch_refused")
        return path

    def _download_s3(self, uri: str, dest: Path, tenant: str) -> None:
        """A presigned GET through ``download``: the same byte cap, total deadline and reason
        codes as any HTTP source. The endpoint is the operator's (``storage.s3_endpoint_url``,
        may be private) or AWS's; the URI only picks the bucket and key, within what
        ``limits.s3_sources`` lets ``tenant`` read."""
        parts = urlsplit(uri)
        bucket, key = parts.netloc, parts.path.lstrip("/")
        shown = redact_url(uri)
        if not bucket or not key:
            raise FetchRefused(f"{shown}: expected s3://bucket/key", code="fetch_refused")
        if not _plain_key(key):
            # S3 keys are literal, but a path through "." or ".." may be read as another one
            # on the way (``acme/../globex/x``): such a key is never fetched.
            raise FetchRefused(
                f"{shown}: a key with an empty, '.' or '..' segment is not fetched",
                code="fetch_refused",
            )
        prefixes = s3_prefixes(self._limits.s3_sources, tenant)
        if not any(f"{bucket}/{key}".startswith(prefix) for prefix in prefixes):
            raise FetchRefused(
                f"{shown} is outside the s3 sources tenant {tenant!r} may read (limits.s3_sources)",
                code="fetch_refused",
            )
        limits = self._limits
        deadline = time.monotonic() + limits.total_timeout_s  # signing counts against it too
        try:
            url = self._s3_client().generate_presigned_url(
                "get_object",
                Params={"Bucket": bucket, "Key": key},
                ExpiresIn=int(limits.total_timeout_s) + 60,
            )
        except (BotoCoreError, ClientError, ValueError) as exc:  # no credentials, bad bucket name
            raise FetchFailed(
                f"{shown}: cannot sign the request: {exc}", code="fetch_failed"
            ) from exc
        if self._storage.s3_endpoint_url is not None:
            limits = limits.model_copy(update={"allow_private": True, "max_redirects": 0})
        download(url, dest, limits, name=shown, deadline=deadline)


def s3_prefixes(sources: Mapping[str, Sequence[str]], tenant: str) -> tuple[str, ...]:
    """The ``bucket/prefix`` entries of ``limits.s3_sources`` that ``tenant`` may read: its
    own and those of ``"*"``, with ``{tenant}`` in an entry standing for the tenant's name (so
    ``"*": ["uploads/{tenant}/"]`` gives each tenant its own folder). A bare bucket name is the
    whole bucket, never another bucket whose name starts with it."""
    entries = (*sources.get(tenant, ()), *sources.get("*", ()))
    expanded = (entry.replace("{tenant}", tenant) for entry in entries)
    return tuple(entry if "/" in entry else f"{entry}/" for entry in expanded)


def _plain_key(key: str) -> bool:
    return all(part not in ("", ".", "..") for part in key.split("/"))


def _secret(value: Any) -> str | None:
    return None if value is None else str(value.get_secret_value())


def remove_orphan_downloads(folder: Path) -> int:
    """Remove the downloads (up to 2 GiB each) of workers that are no longer running on this
    host: a worker killed mid-video never released its file. Names start with the worker's
    pid; one whose pid is gone (or that names none) is an orphan. Returns how many went."""
    removed = 0
    for path in folder.iterdir() if folder.is_dir() else ():
        pid, _, _ = path.name.partition("-")
        if not path.is_file() or (pid.isdigit() and _running(int(pid))):
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed += 1
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True


def _safe_name(video_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", video_id)[:64] or "video"

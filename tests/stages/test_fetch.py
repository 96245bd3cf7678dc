"""FetchProbeStage and HTTP downloads: sources, probe limits, reason codes, SSRF refusals.

Every test runs under a guard that fails it on any connection to a non-loopback address and on
any attempt to resolve a name through a connection, so a refusal is proven to happen before
anything leaves the machine. A local http.server on 127.0.0.1 serves the allowed downloads;
"public" hosts are stub-resolved to public addresses that the test transport's route reaches on
that server, so redirects and pinning are exercised end to end. (The guard itself, its range
table and its transports are tested in tests/core/test_netguard.py.)
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import boto3
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import SecretStr

from core import netguard, pinning
from core.config import LimitSettings, ServiceConfig, StorageSettings
from core.errors import PermanentError
from core.records import VideoRef
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
from stages.fetch import FetchProbeStage
from tests.stages import media

PUBLIC_IP = "93.184.216.34"
CDN_IP = "151.101.1.69"


# --- guard -------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def connections(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Addresses connected to during the test; anything but loopback fails the test."""
    attempts: list[str] = []
    real_connect = socket.socket.connect

    def check(host: str) -> None:
        attempts.append(host)
        try:
            address = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            pytest.fail(f"connection by name attempted: {host}")
        if not address.is_loopback:
            pytest.fail(f"connection attempted to {host}")

    def guarded_connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            check(str(address[0]))
        real_connect(self, address)

    real_create = socket.create_connection

    def guarded_create(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        check(str(address[0]))
        return real_create(address, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket, "create_connection", guarded_create)
    return attempts


# --- local HTTP server -------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    root: ClassVar[Path]
    hosts: ClassVar[list[str]]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        type(self).hosts.append(self.headers.get("Host", ""))
        parts = urlsplit(self.path)
        kind, _, rest = parts.path.lstrip("/").partition("/")
        if kind == "files" and (self.root / rest).is_file():
            body = (self.root / rest).read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "video/mp4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif kind == "stream" and (self.root / rest).is_file():
            # No Content-Length: the body ends when the connection closes.
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            self.wfile.write((self.root / rest).read_bytes())
        elif kind == "redirect":
            self._redirect(parse_qs(parts.query)["to"][0])
        elif kind == "loop":
            self._redirect("/loop")
        elif kind == "status":
            self.send_response(int(rest))
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("videos")
    media.write_clip(folder / "clip.mp4", 4.0)
    media.write_with_audio(folder / "audio_video.mp4")
    return folder


@pytest.fixture(scope="module")
def server(videos: Path) -> Iterator[tuple[int, list[str]]]:
    hosts: list[str] = []
    handler = type("Handler", (_Handler,), {"root": videos, "hosts": hosts})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1], hosts
    httpd.shutdown()
    httpd.server_close()
    thread.join()


@pytest.fixture
def port(server: tuple[int, list[str]]) -> int:
    return server[0]


class _ToLocal(pinning.PinnedTransport):
    """Reaches the stub public addresses on the local server; records requests and routes."""

    def __init__(self, port: int, verify: ssl.SSLContext | bool = True) -> None:
        super().__init__(verify=verify, route=self._route)
        self.port = port
        self.requests: list[httpx.Request] = []
        self.routed: list[str] = []  # the checked addresses connections were opened for

    def _route(self, address: pinning.IPAddress, port: int) -> tuple[str, int]:
        self.routed.append(str(address))
        return (
            ("127.0.0.1", self.port)
            if str(address) in (PUBLIC_IP, CDN_IP)
            else (str(address), port)
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return super().handle_request(request)


LIMITS = LimitSettings(max_bytes=10**8)


def stub_resolver(table: dict[str, list[str]]) -> tuple[netguard.Resolver, list[str]]:
    asked: list[str] = []

    def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        if host not in table:
            raise FetchFailed(f"unknown test host {host}", code="dns_failed")
        return table[host]

    return resolve, asked


NAMES = {
    "videos.example": [PUBLIC_IP],
    "cdn.example": [CDN_IP],
    "metadata.internal": ["169.254.169.254"],
    "intranet.example": ["10.0.0.1"],
    "mixed.example": [PUBLIC_IP, "10.1.2.3"],
    "v6private.example": ["fd00::1"],
    "mapped.example": ["::ffff:127.0.0.1"],
    # Called global by ipaddress.is_global on Python 3.11.7:
    "ietf.example": ["192.0.0.192"],
    "sitelocal.example": [CDN_IP, "fec0::1"],
    "nat64local.example": ["64:ff9b:1::7f00:1"],
}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- stage helpers -----------------------------------------------------------------------------


def make_stage(
    tmp_path: Path, *, storage: StorageSettings | None = None, **limits: Any
) -> FetchProbeStage:
    stage = FetchProbeStage(
        LimitSettings.model_validate(limits), storage or StorageSettings(), str(tmp_path / "work")
    )
    stage.setup()
    return stage


def fetch_error(
    stage: FetchProbeStage, uri: str, *, tenant: str = "default"
) -> PermanentError | FetchFailed:
    with pytest.raises((PermanentError, FetchFailed)) as caught:
        stage.open(VideoRef("v1", uri, tenant=tenant))
    error = caught.value
    assert isinstance(error, PermanentError | FetchFailed)
    return error


def downloads(tmp_path: Path) -> list[Path]:
    folder = tmp_path / "work" / "downloads"
    return sorted(folder.iterdir()) if folder.exists() else []


# --- probe -------------------------------------------------------------------------------------


def test_probe_of_a_local_file(tmp_path: Path, videos: Path) -> None:
    stage = make_stage(tmp_path, file_roots=(str(videos),))
    video = stage.open(VideoRef("v1", (videos / "audio_video.mp4").as_uri()))
    probe = video.probe
    assert video.path == str(videos / "audio_video.mp4")
    assert not video.temporary
    assert probe.container == "mov,mp4,m4a,3gp,3g2,mj2"
    assert probe.codec == "h264"
    assert (probe.width, probe.height) == (320, 180)
    assert probe.fps == pytest.approx(25.0)
    assert probe.duration_s == pytest.approx(2.0, abs=0.1)
    assert (probe.video_streams, probe.audio_streams) == (1, 1)
    assert probe.size_bytes == (videos / "audio_video.mp4").stat().st_size
    stage.release(video)
    assert Path(video.path).exists()  # a file:// source is never deleted
    assert stage.process_batch([VideoRef("v2", (videos / "clip.mp4").as_uri())])[0].probe


BAD_INPUTS: list[tuple[str, Callable[[Path], Any], type[Exception], str]] = [
    ("empty.mp4", lambda p: p.write_bytes(b""), InvalidVideo, "empty_file"),
    ("random.mp4", media.write_random_bytes, InvalidVideo, "invalid_video"),
    ("image.mp4", media.write_image_as_mp4, UnsupportedMedia, "unsupported_container"),
    ("audio.mp4", media.write_audio_only, UnsupportedMedia, "no_video_stream"),
    (
        "cut.mp4",  # the index (moov) is at the end and is gone
        lambda p: media.truncate(media.write_clip(p, 2.0), 0.5),
        InvalidVideo,
        "invalid_video",
    ),
    (
        "list.m3u8",
        lambda p: p.write_text("#EXTM3U\n#EXTINF:10,\nhttp://169.254.169.254/a.ts\n"),
        UnsupportedMedia,
        "unsupported_container",
    ),
    (
        "list.mp4",
        lambda p: p.write_text("ffconcat version 1.0\nfile /etc/passwd\n"),
        UnsupportedMedia,
        "unsupported_container",
    ),
]


@pytest.mark.parametrize(("name", "build", "error", "code"), BAD_INPUTS)
def test_bad_input_reason_codes(
    tmp_path: Path, name: str, build: Callable[[Path], Any], error: type[Exception], code: str
) -> None:
    build(tmp_path / name)
    stage = make_stage(tmp_path, file_roots=(str(tmp_path),))
    caught = fetch_error(stage, (tmp_path / name).as_uri())
    assert isinstance(caught, error)
    assert caught.code == code


LIMIT_CASES: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"max_duration_s": 2.0}, LimitExceeded, "limit_duration"),
    ({"max_width": 160, "max_height": 90}, LimitExceeded, "limit_dimensions"),
    ({"max_fps": 20.0}, LimitExceeded, "limit_fps"),
    ({"max_bytes": 1000}, SourceTooLarge, "limit_bytes"),
    ({"codecs": ("hevc", "av1")}, UnsupportedMedia, "unsupported_codec"),
    ({"containers": ("matroska,webm",)}, UnsupportedMedia, "unsupported_container"),
]


@pytest.mark.parametrize(("limits", "error", "code"), LIMIT_CASES)
def test_limits(
    tmp_path: Path, videos: Path, limits: dict[str, Any], error: type[Exception], code: str
) -> None:
    stage = make_stage(tmp_path, file_roots=(str(videos),), **limits)
    caught = fetch_error(stage, (videos / "clip.mp4").as_uri())
    assert isinstance(caught, error)
    assert caught.code == code


def test_stream_limit_and_portrait_dimensions(tmp_path: Path, videos: Path) -> None:
    stage = make_stage(tmp_path, file_roots=(str(videos),), max_streams=1)
    assert fetch_error(stage, (videos / "audio_video.mp4").as_uri()).code == "limit_streams"
    # 320x180 stored, checked against a 180x320 portrait limit: orientation does not matter.
    stage = make_stage(tmp_path, file_roots=(str(videos),), max_width=180, max_height=320)
    assert stage.open(VideoRef("v1", (videos / "clip.mp4").as_uri())).probe.width == 320


# --- file roots --------------------------------------------------------------------------------


def test_file_uris_need_roots(tmp_path: Path, videos: Path) -> None:
    stage = make_stage(tmp_path)
    error = fetch_error(stage, (videos / "clip.mp4").as_uri())
    assert isinstance(error, FetchRefused)
    assert error.code == "fetch_refused"


def test_file_roots_refuse_escapes(tmp_path: Path, videos: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    outside = tmp_path / "outside.mp4"
    shutil.copy(videos / "clip.mp4", outside)
    shutil.copy(videos / "clip.mp4", root / "sub" / "ok.mp4")
    (root / "link.mp4").symlink_to(outside)
    (root / "dirlink").symlink_to(tmp_path)
    stage = make_stage(tmp_path, file_roots=(str(root),))

    assert stage.open(VideoRef("v1", f"file://{root}/sub/ok.mp4")).probe.codec == "h264"
    assert stage.open(VideoRef("v1", f"file://localhost{root}/sub/../sub/ok.mp4")).probe
    refused = [
        outside.as_uri(),
        f"file://{root}/../outside.mp4",
        f"file://{root}/sub/%2e%2e/%2e%2e/outside.mp4",
        f"file://{root}/link.mp4",  # symlink out of the root
        f"file://{root}/dirlink/outside.mp4",
        f"file://{root}/sub",  # a folder, not a file
        f"file://{root}x/clip.mp4",  # shares the prefix, not the folder
        f"file://evil.example{root}/sub/ok.mp4",
        "file:///dev/zero",
        "ftp://example.com/clip.mp4",
        "clip.mp4",
    ]
    for uri in refused:
        error = fetch_error(stage, uri)
        assert isinstance(error, FetchRefused), uri
        assert error.code == "fetch_refused", uri
    missing = fetch_error(stage, f"file://{root}/sub/missing.mp4")
    assert isinstance(missing, SourceNotFound)
    assert missing.code == "source_not_found"


# --- S3 ----------------------------------------------------------------------------------------


@pytest.fixture
def bucket(s3_endpoint: str, unique: str, videos: Path) -> str:
    name = f"uploads-{unique}"
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=name)
    client.upload_file(str(videos / "clip.mp4"), name, "in/clip.mp4")
    client.put_object(Bucket=name, Key="in/random.mp4", Body=b"\x00not a video" * 100)
    return name


def test_s3_fetch(tmp_path: Path, s3_endpoint: str, bucket: str, videos: Path) -> None:
    storage = StorageSettings(s3_endpoint_url=s3_endpoint)
    stage = make_stage(tmp_path, storage=storage, s3_sources={"*": (bucket,)})
    video = stage.open(VideoRef("v/1", f"s3://{bucket}/in/clip.mp4"))
    assert video.temporary
    assert Path(video.path).read_bytes() == (videos / "clip.mp4").read_bytes()
    assert video.probe.codec == "h264"
    assert Path(video.path).parent == tmp_path / "work" / "downloads"
    stage.release(video)
    stage.release(video)  # idempotent
    assert downloads(tmp_path) == []


def test_s3_failures(tmp_path: Path, s3_endpoint: str, bucket: str, videos: Path) -> None:
    size = (videos / "clip.mp4").stat().st_size
    storage = StorageSettings(s3_endpoint_url=s3_endpoint)
    sources = {"*": (bucket, f"no-such-bucket-{bucket}")}
    stage = make_stage(tmp_path, storage=storage, s3_sources=sources)
    for uri in (f"s3://{bucket}/in/missing.mp4", f"s3://no-such-bucket-{bucket}/in/clip.mp4"):
        error = fetch_error(stage, uri)
        assert isinstance(error, SourceNotFound), uri
        assert error.code == "source_not_found"
    invalid = fetch_error(stage, f"s3://{bucket}/in/random.mp4")
    assert isinstance(invalid, InvalidVideo)
    assert fetch_error(stage, f"s3://{bucket}").code == "fetch_refused"
    capped = make_stage(tmp_path, storage=storage, max_bytes=size - 1, s3_sources=sources)
    too_large = fetch_error(capped, f"s3://{bucket}/in/clip.mp4")
    assert isinstance(too_large, SourceTooLarge)
    assert too_large.code == "limit_bytes"
    assert downloads(tmp_path) == []  # nothing left behind by any failure


def test_s3_sources_are_allowed_per_tenant(
    tmp_path: Path, s3_endpoint: str, bucket: str, connections: list[str]
) -> None:
    """The service reads s3:// with its own credentials: only what limits.s3_sources lets
    the video's tenant name is fetched; anything else is refused before any request."""
    storage = StorageSettings(s3_endpoint_url=s3_endpoint)
    sources = {"acme": (f"{bucket}/in/",), "*": (f"{bucket}/shared/",)}
    stage = make_stage(tmp_path, storage=storage, s3_sources=sources)
    video = stage.open(VideoRef("v1", f"s3://{bucket}/in/clip.mp4", tenant="acme"))
    stage.release(video)
    before = len(connections)
    for uri, tenant in (
        (f"s3://{bucket}/in/clip.mp4", "globex"),  # acme's prefix, another tenant
        (f"s3://{bucket}-other/in/clip.mp4", "acme"),  # another bucket
        (f"s3://{bucket}/elsewhere/clip.mp4", "acme"),
    ):
        with pytest.raises(FetchRefused) as refused:
            stage.open(VideoRef("v2", uri, tenant=tenant))
        assert refused.value.code == "fetch_refused"
        assert "limits.s3_sources" in str(refused.value)
    assert len(connections) == before  # refused before any connection
    shared = fetch_error(stage, f"s3://{bucket}/shared/none.mp4")  # "*": any tenant may ask
    assert shared.code == "source_not_found"
    nothing = make_stage(tmp_path, storage=storage)  # no s3_sources: no s3:// source at all
    assert fetch_error(nothing, f"s3://{bucket}/in/clip.mp4").code == "fetch_refused"


def test_s3_sources_give_each_tenant_its_own_folder(
    tmp_path: Path, s3_endpoint: str, bucket: str, connections: list[str]
) -> None:
    """``{tenant}`` in an entry is the video's tenant: acme reads acme/, never globex/ (the
    shipped production config); a key through "." or ".." is refused whatever it names, before
    the prefix is checked and before any request."""
    storage = StorageSettings(s3_endpoint_url=s3_endpoint)
    stage = make_stage(tmp_path, storage=storage, s3_sources={"*": (f"{bucket}/{{tenant}}/",)})
    assert fetch_error(stage, f"s3://{bucket}/acme/none.mp4", tenant="acme").code == (
        "source_not_found"  # allowed: fetched, and not there
    )
    before = len(connections)
    for key in (
        "globex/clip.mp4",  # another tenant's folder
        "acme/../globex/clip.mp4",  # out of its folder by ".."
        "acme/./clip.mp4",
        "acme//clip.mp4",
        "acmex/clip.mp4",  # a folder whose name starts with the tenant's
    ):
        refused = fetch_error(stage, f"s3://{bucket}/{key}", tenant="acme")
        assert refused.code == "fetch_refused", key
    assert len(connections) == before
    deploy = Path(__file__).resolve().parents[2] / "deploy"
    production = ServiceConfig.load(deploy / "config" / "production.yaml")
    [entry] = production.limits.s3_sources["*"]
    assert entry.endswith("/{tenant}/")


def test_s3_endpoint_down(tmp_path: Path) -> None:
    storage = StorageSettings(
        s3_endpoint_url=f"http://127.0.0.1:{closed_port()}",
        s3_access_key_id=SecretStr("testing"),
        s3_secret_access_key=SecretStr("testing"),
    )
    stage = make_stage(
        tmp_path, storage=storage, connect_timeout_s=1.0, s3_sources={"*": ("uploads",)}
    )
    error = fetch_error(stage, "s3://uploads/in/clip.mp4")
    assert isinstance(error, FetchFailed)
    assert error.code == "fetch_failed"
    assert downloads(tmp_path) == []


# --- HTTP: allowed downloads -------------------------------------------------------------------


def test_http_fetch(tmp_path: Path, port: int, videos: Path) -> None:
    stage = make_stage(tmp_path, allow_private=True)
    for path in ("files", "stream"):
        video = stage.open(VideoRef("v1", f"http://127.0.0.1:{port}/{path}/clip.mp4"))
        assert video.temporary
        assert Path(video.path).read_bytes() == (videos / "clip.mp4").read_bytes()
        assert video.probe.duration_s == pytest.approx(4.0, abs=0.1)
        stage.release(video)
    assert downloads(tmp_path) == []


def test_http_byte_cap(tmp_path: Path, port: int, videos: Path) -> None:
    size = (videos / "clip.mp4").stat().st_size
    stage = make_stage(tmp_path, allow_private=True, max_bytes=size - 1)
    for path in ("files", "stream"):  # declared length, and a body that just keeps coming
        error = fetch_error(stage, f"http://127.0.0.1:{port}/{path}/clip.mp4")
        assert isinstance(error, SourceTooLarge)
        assert error.code == "limit_bytes"
    assert downloads(tmp_path) == []


def test_http_status_codes(tmp_path: Path, port: int) -> None:
    stage = make_stage(tmp_path, allow_private=True, max_redirects=3)
    base = f"http://127.0.0.1:{port}"
    cases = [
        ("/files/missing.mp4", SourceNotFound, "source_not_found"),
        ("/status/503", FetchFailed, "fetch_failed"),
        ("/status/403", FetchRefused, "source_forbidden"),
        ("/status/400", FetchRefused, "http_error"),
        ("/loop", FetchRefused, "too_many_redirects"),
    ]
    for path, error, code in cases:
        caught = fetch_error(stage, base + path)
        assert isinstance(caught, error), path
        assert caught.code == code, path
    assert downloads(tmp_path) == []


def test_http_endpoint_down_and_timeout(tmp_path: Path) -> None:
    stage = make_stage(tmp_path, allow_private=True, read_timeout_s=0.3)
    down = fetch_error(stage, f"http://127.0.0.1:{closed_port()}/clip.mp4")
    assert isinstance(down, FetchFailed)
    assert down.code == "fetch_failed"
    with socket.socket() as silent:  # accepts connections (backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        slow = fetch_error(stage, f"http://127.0.0.1:{silent.getsockname()[1]}/clip.mp4")
    assert isinstance(slow, FetchFailed)
    assert slow.code == "fetch_timeout"


class _Drip:
    """A server on 127.0.0.1 that answers every connection one byte every ``gap_s``: the
    status line and headers (``phase="headers"``), or quick headers announcing a large body
    and then the body (``phase="body"``). It gives up after ``for_s``, so code that never
    stops waiting fails its test instead of hanging it."""

    HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: video/mp4\r\nContent-Length: 100000\r\n\r\n"

    def __init__(self, phase: str, gap_s: float = 0.2, for_s: float = 12.0) -> None:
        self.phase, self.gap_s, self.for_s = phase, gap_s, for_s
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = int(self.sock.getsockname()[1])
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with suppress(OSError):
            while not self._stop.is_set():
                conn, _ = self.sock.accept()
                threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        with conn, suppress(OSError):
            conn.recv(65536)  # the request
            if self.phase == "body":
                conn.sendall(self.HEAD)
            payload = self.HEAD if self.phase == "headers" else b"\x00" * 100000
            ends = time.monotonic() + self.for_s
            for byte in payload:
                if self._stop.is_set() or time.monotonic() > ends:
                    return
                conn.sendall(bytes([byte]))
                time.sleep(self.gap_s)

    def close(self) -> None:
        self._stop.set()
        with suppress(OSError):  # wakes the accept() under way (closing alone would not)
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


@pytest.mark.parametrize("phase", ["headers", "body"])
def test_a_dripping_source_ends_at_the_total_deadline(tmp_path: Path, phase: str) -> None:
    """A byte every 0.2 s never trips the 30 s read timeout; the 2 s total deadline still holds,
    for HTTP and for S3 alike (signing the S3 request included)."""
    drip = _Drip(phase)
    try:
        limits = {
            "allow_private": True,
            "read_timeout_s": 30.0,
            "total_timeout_s": 2.0,
            "s3_sources": {"default": ("uploads/in/",)},
        }
        storage = StorageSettings(
            s3_endpoint_url=f"http://127.0.0.1:{drip.port}",
            s3_access_key_id=SecretStr("testing"),
            s3_secret_access_key=SecretStr("testing"),
        )
        stage = make_stage(tmp_path, storage=storage, **limits)
        for uri in (f"http://127.0.0.1:{drip.port}/clip.mp4", "s3://uploads/in/clip.mp4"):
            started = time.monotonic()
            error = fetch_error(stage, uri)
            took = time.monotonic() - started
            assert isinstance(error, FetchFailed), uri
            assert error.code == "fetch_timeout", (uri, error)
            assert "at most 2.0 s in all" in str(error)
            # The deadline itself holds to a few ms; the slack is for a loaded machine.
            assert took < 2.0 + 1.5, (uri, took)
        assert downloads(tmp_path) == []
    finally:
        drip.close()


def test_connection_is_pinned_to_the_checked_address(
    tmp_path: Path, port: int, server: tuple[int, list[str]], videos: Path
) -> None:
    answers = iter([[PUBLIC_IP], ["10.0.0.1"], ["169.254.169.254"]])  # rebinding after the check
    asked: list[str] = []

    def rebinding(host: str, port: int) -> list[str]:
        asked.append(host)
        return next(answers)

    transport = _ToLocal(port)
    dest = tmp_path / "pinned.mp4"
    got = download(
        "http://videos.example/files/clip.mp4",
        dest,
        LIMITS,
        resolver=rebinding,
        transport=transport,
    )
    assert got.size_bytes == (videos / "clip.mp4").stat().st_size
    assert got.content_type == "video/mp4"
    assert asked == ["videos.example"]  # resolved once, never again
    assert transport.routed == [PUBLIC_IP]  # the checked address, never the second answer
    assert [r.url.host for r in transport.requests] == ["videos.example"]
    assert server[1][-1] == "videos.example"  # the name travels in the Host header


def test_public_redirect_is_followed(tmp_path: Path, port: int) -> None:
    resolver, asked = stub_resolver(NAMES)
    got = download(
        "http://videos.example/redirect?to=http://cdn.example/files/clip.mp4",
        tmp_path / "redirected.mp4",
        LIMITS,
        resolver=resolver,
        transport=_ToLocal(port),
    )
    assert got.final_url == "http://cdn.example/files/clip.mp4"
    assert asked == ["videos.example", "cdn.example"]  # every hop checked


def _self_signed(folder: Path, name: str) -> tuple[Path, Path]:
    """A certificate for ``name`` (and its key), made with cryptography (a moto dependency)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / f"{name}.crt", folder / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture
def https_port(tmp_path: Path, videos: Path) -> Iterator[tuple[int, Path]]:
    """An HTTPS server on 127.0.0.1 whose certificate names videos.example only."""
    cert, key = _self_signed(tmp_path, "videos.example")
    handler = type("Handler", (_Handler,), {"root": videos, "hosts": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1], cert
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_https_presents_and_verifies_the_name(
    tmp_path: Path, https_port: tuple[int, Path], videos: Path
) -> None:
    port, cert = https_port
    trust = ssl.create_default_context(cafile=str(cert))
    resolver, _ = stub_resolver(NAMES | {"other.example": [PUBLIC_IP]})
    policy = LIMITS
    got = download(
        "https://videos.example/files/clip.mp4",
        tmp_path / "tls.mp4",
        policy,
        resolver=resolver,
        transport=_ToLocal(port, verify=trust),
    )
    # Connected to the IP, yet SNI and certificate checks used the name.
    assert got.size_bytes == (videos / "clip.mp4").stat().st_size
    with pytest.raises(FetchFailed):  # same server, a name its certificate does not cover
        download(
            "https://other.example/files/clip.mp4",
            tmp_path / "wrong.mp4",
            policy,
            resolver=resolver,
            transport=_ToLocal(port, verify=trust),
        )
    assert not (tmp_path / "wrong.mp4").exists()


def test_upper_case_schemes_are_fetched_like_lower_case_ones(
    tmp_path: Path, port: int, https_port: tuple[int, Path], videos: Path
) -> None:
    size = (videos / "clip.mp4").stat().st_size
    stage = make_stage(tmp_path, allow_private=True)
    video = stage.open(VideoRef("v1", f"HTTP://127.0.0.1:{port}/files/clip.mp4"))
    assert Path(video.path).stat().st_size == size
    stage.release(video)
    tls_port, cert = https_port
    resolver, _ = stub_resolver(NAMES)
    got = download(  # SNI and the certificate check still use the name
        "HTTPS://videos.example/files/clip.mp4",
        tmp_path / "upper.mp4",
        LIMITS,
        resolver=resolver,
        transport=_ToLocal(tls_port, verify=ssl.create_default_context(cafile=str(cert))),
    )
    assert got.size_bytes == size


def test_errors_name_the_source_without_its_secrets(tmp_path: Path, port: int) -> None:
    stage = make_stage(tmp_path, allow_private=True, read_timeout_s=0.3)
    secrets = "user:pa55word@{host}{path}?X-Amz-Signature=0ddc0ffee&X-Amz-Credential=AKIDEXAMPLE"
    for host, path in [
        (f"127.0.0.1:{port}", "/files/missing.mp4"),  # 404
        (f"127.0.0.1:{port}", "/status/503"),
        (f"127.0.0.1:{port}", "/status/403"),
        (f"127.0.0.1:{closed_port()}", "/clip.mp4"),  # connection refused
    ]:
        error = fetch_error(stage, "http://" + secrets.format(host=host, path=path))
        shown = str(error)
        assert f"http://***@{host}{path}?***" in shown, shown
        for secret in ("pa55word", "0ddc0ffee", "AKIDEXAMPLE", "user:"):
            assert secret not in shown, shown


# --- HTTP: refusals before any connection ------------------------------------------------------


REFUSED_URLS = [
    "http://127.0.0.1:{port}/files/clip.mp4",
    "http://localhost:{port}/files/clip.mp4",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::1]:{port}/files/clip.mp4",
    "http://10.0.0.1/clip.mp4",
    "http://192.168.1.20/clip.mp4",
    "http://2130706433:{port}/files/clip.mp4",  # 127.0.0.1 as one decimal number
    "http://0x7f000001:{port}/files/clip.mp4",  # ... in hex
    "http://0177.0.0.1:{port}/files/clip.mp4",  # ... in octal
    "http://127.1:{port}/files/clip.mp4",
    "http://0.0.0.0:{port}/files/clip.mp4",
    "http://[::ffff:169.254.169.254]/latest/meta-data/",
    "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/",  # NAT64 spelling of the same
    "http://[fe80::1]/clip.mp4",
    "http://100.64.0.1/clip.mp4",
    "https://[fd00::1]/clip.mp4",
    "gopher://example.com/clip.mp4",
    # Called global by ipaddress.is_global on Python 3.11.7:
    "http://192.0.0.192/clip.mp4",
    "http://[::ffff:0:7f00:1]:{port}/files/clip.mp4",  # IPv4-translated 127.0.0.1
    "http://[::7f00:1]:{port}/files/clip.mp4",  # IPv4-compatible 127.0.0.1
    "http://[64:ff9b:1::7f00:1]:{port}/files/clip.mp4",  # local-use NAT64 of 127.0.0.1
    "http://[fec0::1]/clip.mp4",
    "http://[2002:7f00:1::]:{port}/files/clip.mp4",  # 6to4 of 127.0.0.1
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]:{port}/files/clip.mp4",  # Teredo, 127.0.0.1
]


@pytest.mark.parametrize("template", REFUSED_URLS)
def test_ssrf_refused_before_any_connection(
    tmp_path: Path,
    template: str,
    port: int,
    server: tuple[int, list[str]],
    connections: list[str],
) -> None:
    seen = len(server[1])
    stage = make_stage(tmp_path)  # allow_private is off by default
    error = fetch_error(stage, template.format(port=port))
    assert isinstance(error, FetchRefused)
    assert error.code == "fetch_refused"
    assert connections == []
    assert len(server[1]) == seen


@pytest.mark.parametrize(
    "host",
    [
        "metadata.internal",
        "intranet.example",
        "mixed.example",
        "v6private.example",
        "ietf.example",
        "sitelocal.example",
        "nat64local.example",
    ],
)
def test_resolved_private_names_refused(
    tmp_path: Path, host: str, port: int, connections: list[str]
) -> None:
    resolver, asked = stub_resolver(NAMES)
    transport = _ToLocal(port)
    with pytest.raises(FetchRefused) as caught:
        download(
            f"http://{host}/clip.mp4",
            tmp_path / "x.mp4",
            LIMITS,
            resolver=resolver,
            transport=transport,
        )
    assert caught.value.code == "fetch_refused"
    assert asked == [host]
    assert transport.requests == []
    assert connections == []


@pytest.mark.parametrize(
    "target",
    [
        "http://169.254.169.254/latest/meta-data/iam/",
        "http://127.0.0.1:{port}/files/clip.mp4",
        "http://intranet.example/clip.mp4",
        "http://mapped.example/clip.mp4",
        "http://[::1]:{port}/files/clip.mp4",
        "http://[2002:a9fe:a9fe::]/latest/meta-data/",  # 6to4 of 169.254.169.254
        "http://sitelocal.example/clip.mp4",
        "file:///etc/passwd",
    ],
)
def test_redirect_to_internal_refused(
    tmp_path: Path, target: str, port: int, connections: list[str]
) -> None:
    resolver, _ = stub_resolver(NAMES)
    transport = _ToLocal(port)
    dest = tmp_path / "x.mp4"
    with pytest.raises(FetchRefused) as caught:
        download(
            f"http://videos.example/redirect?to={target.format(port=port)}",
            dest,
            LIMITS,
            resolver=resolver,
            transport=transport,
        )
    assert caught.value.code == "fetch_refused"
    assert len(transport.requests) == 1  # the first hop only
    assert set(connections) == {"127.0.0.1"}  # the local server standing in for PUBLIC_IP
    assert not dest.exists()


def test_downloads_of_workers_that_are_gone_are_removed_at_setup(tmp_path: Path) -> None:
    """A worker killed mid-video leaves its download (up to 2 GiB): the next fetch stage on
    the host removes the files of workers no longer running, never a live worker's."""
    downloads = tmp_path / "work" / "downloads"
    downloads.mkdir(parents=True)
    gone = subprocess.Popen(["true"])
    gone.wait()
    files = {
        "dead": downloads / f"{gone.pid}-v1-0123456789ab",
        "live": downloads / f"{os.getpid()}-v2-0123456789ab",
        "unnamed": downloads / "v3-0123456789ab",  # no pid: written before pids were
    }
    for path in files.values():
        path.write_bytes(b"x" * 1024)
    make_stage(tmp_path)
    assert sorted(p.name for p in downloads.iterdir()) == [files["live"].name]

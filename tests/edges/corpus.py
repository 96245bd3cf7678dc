"""The bad-input corpus: hostile and broken uploads, each with the reason code it must end with.

Three kinds of case:

- ``MediaCase``: a file written under the file root (or a URI built from it) and submitted as a
  valid upload event; the video must end failed with ``code``.
- ``EventCase``: raw Kafka record bytes that are not a valid upload event; the record must be
  dead-lettered with ``code`` and, when a video id can be read (``status_id``), that video must
  end failed with ``code``.
- the network cases that need a stub resolver (a test host name mapped to an internal
  address) run against ``stages.download.download`` in the test process: see ``test_corpus.py``.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.stages import media

# The limits the corpus service runs with: low enough that a few seconds of tiny video can
# cross each of them, high enough for the valid videos.
LIMITS: dict[str, object] = {
    "allow_private": False,
    "max_bytes": 8 * 1024 * 1024,
    "max_duration_s": 120.0,
    "max_width": 1920,
    "max_height": 1080,
    "max_fps": 120.0,
    "max_streams": 4,
    "max_frames": 60,
}
TINY = (64, 64)


@dataclass(frozen=True)
class Context:
    """What a case needs to build its input."""

    root: Path  # the configured file root
    outside: Path  # a folder beside the root, not below it
    trap_port: int  # a loopback HTTP server that counts connections; nothing may reach it


@dataclass(frozen=True)
class MediaCase:
    name: str
    code: str
    build: Callable[[Context], str]  # returns the upload URI
    stage: str | None = "fetch"  # the stage the failure is reported at
    known_bug: str | None = None  # set: the case fails today for this reason (strict xfail)


@dataclass(frozen=True)
class EventCase:
    name: str
    code: str
    key: bytes | None
    value: Callable[[Context], bytes | None]
    status_id: str | None = None  # the video that gets a failed status, if one is readable
    headers: list[tuple[str, bytes]] = field(default_factory=list)


# -- media builders --------------------------------------------------------------------------


def _clip(ctx: Context, name: str, seconds: float = 3.0, **kwargs: object) -> Path:
    """A small valid clip under the root (cached: several cases derive from the same one)."""
    path = ctx.root / "base" / f"{name}.mp4"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        media.write_clip(path, seconds, **kwargs)  # type: ignore[arg-type]
    return path


def _derived(ctx: Context, name: str, data: bytes, suffix: str = ".mp4") -> str:
    path = ctx.root / f"{name}{suffix}"
    path.write_bytes(data)
    return path.as_uri()


def _truncated(fraction: float, *, faststart: bool) -> Callable[[Context], str]:
    def build(ctx: Context) -> str:
        source = _faststart(ctx) if faststart else _clip(ctx, "plain", 6.0)
        data = source.read_bytes()
        kind = "faststart" if faststart else "plain"
        return _derived(
            ctx, f"truncated-{kind}-{int(fraction * 100)}", data[: int(len(data) * fraction)]
        )

    return build


def _faststart(ctx: Context) -> Path:
    """An mp4 with its index (moov) before the data, as streaming uploads are written."""
    path = ctx.root / "base" / "faststart.mp4"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    media.write_plain(
        path, seconds=6.0, fps=25, size=(320, 180), options={"movflags": "+faststart"}
    )
    return path


def _encoded(name: str, suffix: str = ".mp4", **kwargs: object) -> Callable[[Context], str]:
    def build(ctx: Context) -> str:
        return media.write_plain(ctx.root / f"{name}{suffix}", **kwargs).as_uri()  # type: ignore[arg-type]

    return build


def _patched_box(
    box: bytes, patch: Callable[[bytearray, int], None], source: Callable[[Context], Path]
) -> Callable[[Context], str]:
    """The base clip with the first ``box`` header rewritten by ``patch(data, box_offset)``."""

    def build(ctx: Context) -> str:
        data = bytearray(source(ctx).read_bytes())
        at = data.index(box)
        patch(data, at)
        return _derived(ctx, f"patched-{box.decode()}-{patch.__name__}", bytes(data))

    return build


def header_8k_square(data: bytearray, at: int) -> None:
    """Rewrite the H.264 sequence parameter set in ``avcC`` to claim 8192x8192 pixels.

    Container boxes (``tkhd``, ``avc1``) may say anything: FFmpeg takes the frame size from
    the SPS, so that is the header a hostile file has to forge. The new SPS is longer; every
    box around it grows with it (the index sits after the media data, so no offset moves).
    """
    length = struct.unpack(">H", data[at + 10 : at + 12])[0]
    old = bytes(data[at + 12 : at + 12 + length])
    new = _resized_sps(old, width_mbs=512, height_mbs=512)
    data[at + 10 : at + 12 + length] = struct.pack(">H", len(new)) + new
    for box in (b"avcC", b"avc1", b"stsd", b"stbl", b"minf", b"mdia", b"trak", b"moov"):
        where = data.index(box)
        size = struct.unpack(">I", data[where - 4 : where])[0]
        data[where - 4 : where] = struct.pack(">I", size + len(new) - len(old))


def _resized_sps(nal: bytes, *, width_mbs: int, height_mbs: int) -> bytes:
    rbsp = nal[1:].replace(b"\x00\x00\x03", b"\x00\x00")  # emulation prevention out
    bits = "".join(f"{byte:08b}" for byte in rbsp)
    pos = 0

    def u(n: int) -> int:
        nonlocal pos
        pos += n
        return int(bits[pos - n : pos], 2) if n else 0

    def ue() -> int:
        zeros = bits.index("1", pos) - pos
        u(zeros)
        return u(zeros + 1) - 1

    profile = u(8)
    u(16)
    ue()
    if profile in (100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135):
        if ue() == 3:
            u(1)
        ue(), ue(), u(1)
        assert u(1) == 0, "scaling matrices are not handled"
    ue()
    poc_type = ue()
    assert poc_type in (0, 2), "picture order count type 1 is not handled"
    if poc_type == 0:
        ue()
    ue(), u(1)
    start = pos
    ue(), ue()

    def ue_code(value: int) -> str:
        code = f"{value + 1:b}"
        return "0" * (len(code) - 1) + code

    out = bits[:start] + ue_code(width_mbs - 1) + ue_code(height_mbs - 1) + bits[pos:]
    out = out.rstrip("0")  # the old byte alignment; the stop bit stays
    out += "0" * (-len(out) % 8)
    raw = int(out, 2).to_bytes(len(out) // 8, "big")
    escaped = bytearray()
    for byte in raw:  # emulation prevention back in
        if len(escaped) >= 2 and escaped[-2:] == b"\x00\x00" and byte <= 3:
            escaped.append(3)
        escaped.append(byte)
    return nal[:1] + bytes(escaped)


def long_timescales(data: bytearray, at: int) -> None:
    """Movie and media time scales of 1 tick per second: the header claims 6000+ seconds.

    (Durations alone are not enough: FFmpeg takes them from the sample tables and edit list.)
    """
    data[at + 16 : at + 20] = struct.pack(">I", 1)
    media_header = data.index(b"mdhd")
    data[media_header + 16 : media_header + 20] = struct.pack(">I", 1)


def _tiny(ctx: Context) -> Path:
    path = ctx.root / "base" / "tiny.mp4"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        media.write_plain(path, seconds=1, fps=5)
    return path


def _plain(ctx: Context) -> Path:
    return _clip(ctx, "plain", 6.0)


def _text_file(name: str, text: str, suffix: str) -> Callable[[Context], str]:
    def build(ctx: Context) -> str:
        return _derived(ctx, name, text.encode(), suffix)

    return build


def _with(
    builder: Callable[[Path], Path], name: str, suffix: str = ".mp4"
) -> Callable[[Context], str]:
    def build(ctx: Context) -> str:
        return builder(ctx.root / f"{name}{suffix}").as_uri()

    return build


def _corrupt(ctx: Context) -> str:
    source = _clip(ctx, "grainy", 4.0, grain=8.0)
    target = ctx.root / "corrupt-middle.mp4"
    target.write_bytes(source.read_bytes())
    return media.corrupt_middle(target, length=40_000).as_uri()


def _sparse(ctx: Context) -> str:
    path = ctx.root / "oversized.mp4"
    with path.open("wb") as out:
        out.truncate(int(LIMITS["max_bytes"]) + 1)  # type: ignore[call-overload]
    return path.as_uri()


def _symlink(ctx: Context) -> str:
    link = ctx.root / "passwd-link.mp4"
    if not link.is_symlink():
        os.symlink("/etc/passwd", link)
    return link.as_uri()


def _symlink_loop(ctx: Context) -> str:
    loop = ctx.root / "loop.mp4"
    if not loop.is_symlink():
        os.symlink(loop, loop)
    return loop.as_uri()


def _outside(ctx: Context) -> str:
    return _clip(ctx, "plain", 6.0).as_uri().replace(str(ctx.root), str(ctx.outside), 1)


def _uri(template: str) -> Callable[[Context], str]:
    def build(ctx: Context) -> str:
        return template.format(root=ctx.root.as_posix(), port=ctx.trap_port)

    return build


MEDIA_CASES: tuple[MediaCase, ...] = (
    # broken bytes
    MediaCase("zero-length", "empty_file", _text_file("empty", "", ".mp4")),
    MediaCase("random-bytes", "invalid_video", _with(media.write_random_bytes, "random")),
    MediaCase("truncated-10", "invalid_video", _truncated(0.10, faststart=False)),
    MediaCase("truncated-50", "invalid_video", _truncated(0.50, faststart=False)),
    MediaCase("truncated-90", "invalid_video", _truncated(0.90, faststart=False)),
    # An index up front, data cut short: the probe passes, decoding runs out of data.
    *(
        MediaCase(
            f"faststart-truncated-{int(f * 100)}",
            "video_truncated",
            _truncated(f, faststart=True),
            "decode",
        )
        for f in (0.10, 0.50, 0.90)
    ),
    MediaCase("corrupt-middle", "decode_error", _corrupt, "decode"),
    # not a video
    MediaCase("audio-only", "no_video_stream", _with(media.write_audio_only, "audio-only")),
    MediaCase("image-renamed", "unsupported_container", _with(media.write_image_as_mp4, "image")),
    MediaCase(
        "hls-playlist",
        "unsupported_container",
        _text_file(
            "playlist",
            "#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\nhttp://127.0.0.1/a.ts\n",
            ".m3u8",
        ),
    ),
    MediaCase(
        "hls-renamed-mp4",
        "unsupported_container",
        _text_file("playlist-renamed", "\n#EXTM3U\n#EXTINF:10,\n/etc/passwd\n", ".mp4"),
    ),
    MediaCase(
        "ffconcat",
        "unsupported_container",
        _text_file("concat", "ffconcat version 1.0\nfile '/etc/passwd'\n", ".mp4"),
    ),
    # valid video, outside the limits
    MediaCase(
        "unsupported-codec",
        "unsupported_codec",
        _encoded("mpeg2", ".ts", seconds=1, fps=10, codec="mpeg2video"),
    ),
    MediaCase(
        "header-8k-square", "limit_dimensions", _patched_box(b"avcC", header_8k_square, _tiny)
    ),
    MediaCase("too-wide", "limit_dimensions", _encoded("wide", seconds=1, fps=5, size=(1936, 64))),
    MediaCase(
        "header-long-duration", "limit_duration", _patched_box(b"mvhd", long_timescales, _plain)
    ),
    MediaCase("too-long", "limit_duration", _encoded("long", seconds=130, fps=1)),
    MediaCase(
        "too-many-frames", "limit_frames", _encoded("many-frames", seconds=90, fps=1), "decode"
    ),
    MediaCase("too-fast", "limit_fps", _encoded("fast", seconds=0.2, fps=240)),
    MediaCase(
        "too-many-streams",
        "limit_streams",
        _encoded("streams", ".mkv", seconds=1, fps=5, audio_streams=4),
    ),
    MediaCase("too-large", "limit_bytes", _sparse),
    # where the bytes may come from
    MediaCase("ssrf-loopback", "fetch_refused", _uri("http://127.0.0.1:{port}/x.mp4")),
    MediaCase("ssrf-metadata", "fetch_refused", _uri("http://169.254.169.254/latest/meta-data/")),
    MediaCase("ssrf-metadata-https", "fetch_refused", _uri("https://169.254.169.254/latest/")),
    MediaCase("ssrf-ipv6-loopback", "fetch_refused", _uri("http://[::1]:{port}/x.mp4")),
    MediaCase("ssrf-private", "fetch_refused", _uri("http://10.0.0.1/x.mp4")),
    MediaCase("ssrf-decimal", "fetch_refused", _uri("http://2130706433:{port}/x.mp4")),
    MediaCase("ssrf-hex", "fetch_refused", _uri("http://0x7f000001:{port}/x.mp4")),
    MediaCase("ssrf-octal", "fetch_refused", _uri("http://0177.0.0.1:{port}/x.mp4")),
    MediaCase("ssrf-mapped-v6", "fetch_refused", _uri("http://[::ffff:127.0.0.1]:{port}/x.mp4")),
    MediaCase("ssrf-localhost-name", "fetch_refused", _uri("http://localhost:{port}/x.mp4")),
    MediaCase("ssrf-unspecified", "fetch_refused", _uri("http://0.0.0.0:{port}/x.mp4")),
    MediaCase("file-etc-passwd", "fetch_refused", _uri("file:///etc/passwd")),
    MediaCase("file-with-host", "fetch_refused", _uri("file://evil.example{root}/base/plain.mp4")),
    MediaCase("traversal-dots", "fetch_refused", _uri("file://{root}/../../../../etc/passwd")),
    MediaCase(
        "traversal-encoded", "fetch_refused", _uri("file://{root}/%2e%2e/%2e%2e/%2e%2e/etc/passwd")
    ),
    MediaCase("traversal-nul", "fetch_refused", _uri("file://{root}/plain.mp4%00.txt")),
    MediaCase(
        "traversal-double-encoded", "source_not_found", _uri("file://{root}/%252e%252e/etc/passwd")
    ),
    MediaCase("outside-root", "fetch_refused", _outside),
    MediaCase("symlink-escape", "fetch_refused", _symlink),
    MediaCase("directory", "fetch_refused", _uri("file://{root}/base")),
    MediaCase("file-as-directory", "source_not_found", _uri("file://{root}/base/plain.mp4/x")),
    MediaCase("symlink-loop", "fetch_refused", _symlink_loop),
    MediaCase("name-too-long", "source_not_found", _uri("file://{root}/" + "x" * 300 + ".mp4")),
    MediaCase("missing-file", "source_not_found", _uri("file://{root}/nothing-here.mp4")),
)


# -- event cases -----------------------------------------------------------------------------


def _body(**fields: object) -> Callable[[Context], bytes]:
    def build(ctx: Context) -> bytes:
        return json.dumps(fields).encode()

    return build


def _raw(data: bytes | None) -> Callable[[Context], bytes | None]:
    return lambda ctx: data


def _oversized(ctx: Context) -> bytes:
    return json.dumps(
        {"video_id": "ev-oversized", "uri": "file:///x.mp4", "metadata": {"blob": "x" * 80_000}}
    ).encode()


LONG_ID = "v" * 300
EVENT_CASES: tuple[EventCase, ...] = (
    EventCase(
        "not-json", "event_not_json", b"ev-not-json", _raw(b"{video_id: nope"), "ev-not-json"
    ),
    EventCase(
        "not-utf8", "event_not_json", b"ev-not-utf8", _raw(b"\xff\xfe\x00garbage"), "ev-not-utf8"
    ),
    EventCase("nan-constant", "event_not_json", b"ev-nan", _raw(b'{"video_id": NaN}'), "ev-nan"),
    EventCase("json-array", "event_invalid", b"ev-array", _raw(b'["ev-array"]'), "ev-array"),
    EventCase(
        "missing-uri", "event_invalid", b"ev-no-uri", _body(video_id="ev-no-uri"), "ev-no-uri"
    ),
    EventCase(
        "missing-video-id", "event_invalid", b"ev-no-id", _body(uri="file:///x.mp4"), "ev-no-id"
    ),
    EventCase(
        "uri-wrong-type",
        "event_invalid",
        b"ev-uri-int",
        _body(video_id="ev-uri-int", uri=42),
        "ev-uri-int",
    ),
    EventCase(
        "metadata-wrong-type",
        "event_invalid",
        b"ev-meta-list",
        _body(video_id="ev-meta-list", uri="file:///x.mp4", metadata=[1, 2]),
        "ev-meta-list",
    ),
    EventCase(
        "unknown-schema",
        "event_invalid",
        b"ev-schema-2",
        _body(schema_version=2, video_id="ev-schema-2", uri="file:///x.mp4"),
        "ev-schema-2",
    ),
    EventCase(
        "unknown-field",
        "event_invalid",
        b"ev-extra",
        _body(video_id="ev-extra", uri="file:///x.mp4", priority="high"),
        "ev-extra",
    ),
    EventCase(
        "ftp-scheme",
        "event_invalid",
        b"ev-ftp",
        _body(video_id="ev-ftp", uri="ftp://127.0.0.1/x.mp4"),
        "ev-ftp",
    ),
    EventCase(
        "gopher-scheme",
        "event_invalid",
        b"ev-gopher",
        _body(video_id="ev-gopher", uri="gopher://127.0.0.1:70/_x"),
        "ev-gopher",
    ),
    EventCase(
        "callback-not-http",
        "event_invalid",
        b"ev-callback",
        _body(video_id="ev-callback", uri="file:///x.mp4", callback_url="file:///etc/passwd"),
        "ev-callback",
    ),
    EventCase(
        "bad-tenant",
        "event_invalid",
        b"ev-tenant",
        _body(video_id="ev-tenant", uri="file:///x.mp4", tenant="../other"),
        "ev-tenant",
    ),
    EventCase("oversized", "event_too_large", b"ev-oversized", _oversized, "ev-oversized"),
    EventCase("tombstone", "event_empty", b"ev-tombstone", _raw(None), "ev-tombstone"),
    EventCase(
        "key-mismatch",
        "event_key_mismatch",
        b"ev-key-a",
        _body(video_id="ev-key-b", uri="file:///x.mp4"),
        "ev-key-b",
    ),
    # Ids outside the safe alphabet never become a record: under the key's id if it is safe…
    EventCase(
        "id-traversal-safe-key",
        "event_invalid",
        b"ev-safe-key",
        _body(video_id="../../etc/passwd", uri="file:///x.mp4"),
        "ev-safe-key",
    ),
    # …else only as a dead letter.
    EventCase(
        "id-unicode",
        "event_invalid",
        "vidéo-ü".encode(),
        _body(video_id="vidéo-ü", uri="file:///x.mp4"),
    ),
    EventCase(
        "id-very-long",
        "event_invalid",
        LONG_ID.encode(),
        _body(video_id=LONG_ID, uri="file:///x.mp4"),
    ),
    EventCase("id-slash", "event_invalid", b"a/b", _body(video_id="a/b", uri="file:///x.mp4")),
    EventCase("id-dotdot", "event_invalid", b"..", _body(video_id="..", uri="file:///x.mp4")),
    # Whitespace around the body's id is stripped; the key still has it.
    EventCase(
        "id-newline",
        "event_key_mismatch",
        b"ev-nl\n",
        _body(video_id="ev-nl\n", uri="file:///x.mp4"),
        "ev-nl",
    ),
    EventCase("no-key-not-json", "event_not_json", None, _raw(b"\x00\x01\x02")),
)


# -- network cases that need a stub resolver (run in the test process) ------------------------

PUBLIC_IP = "93.184.216.34"  # where the stub resolver puts the allowed test host
STUB_NAMES: dict[str, list[str]] = {
    "videos.example": [PUBLIC_IP],
    "intranet.example": ["10.20.30.40"],
    "metadata.example": ["169.254.169.254"],
    "loopback.example": ["127.0.0.1"],
    "mixed.example": [PUBLIC_IP, "10.0.0.7"],
    "ula.example": ["fd00::5"],
    "mapped.example": ["::ffff:10.0.0.1"],
    "nat64.example": ["64:ff9b::a9fe:a9fe"],
}


@dataclass(frozen=True)
class StubCase:
    name: str
    code: str
    url: str  # template: {trap} is the port of the loopback trap
    first_hop_served: bool = False  # the allowed host answered (with a redirect) first


def _via(target: str) -> str:
    return f"http://videos.example/redirect?to={target}"


STUB_CASES: tuple[StubCase, ...] = (
    StubCase("redirect-to-metadata", "fetch_refused", _via("http://169.254.169.254/latest/"), True),
    StubCase("redirect-to-loopback", "fetch_refused", _via("http://127.0.0.1:{trap}/x.mp4"), True),
    StubCase("redirect-to-ipv6-loopback", "fetch_refused", _via("http://[::1]:{trap}/x"), True),
    StubCase("redirect-to-decimal-ip", "fetch_refused", _via("http://2130706433:{trap}/x"), True),
    StubCase("redirect-to-internal-name", "fetch_refused", _via("http://intranet.example/x"), True),
    StubCase("redirect-to-file", "fetch_refused", _via("file:///etc/passwd"), True),
    StubCase("redirect-loop", "too_many_redirects", "http://videos.example/loop", True),
    StubCase("name-to-private", "fetch_refused", "http://intranet.example/x.mp4"),
    StubCase("name-to-metadata", "fetch_refused", "http://metadata.example/latest/meta-data/"),
    StubCase("name-to-loopback", "fetch_refused", "http://loopback.example:{trap}/x.mp4"),
    StubCase("name-to-public-and-private", "fetch_refused", "http://mixed.example/x.mp4"),
    StubCase("name-to-ipv6-ula", "fetch_refused", "http://ula.example/x.mp4"),
    StubCase("name-to-mapped-ipv4", "fetch_refused", "http://mapped.example/x.mp4"),
    StubCase("name-to-nat64-metadata", "fetch_refused", "http://nat64.example/x.mp4"),
    StubCase("hls-over-http", "unsupported_container", "http://videos.example/playlist.m3u8", True),
)

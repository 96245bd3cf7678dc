"""Upload URIs fuzzed with hypothesis: the SSRF check and the file-root check.

(Event parsing itself is fuzzed in tests/consumers/test_events.py.)

- ``core.netguard.check_url`` on any string, with a stub resolver answering any addresses: it
  either refuses (``OutboundRefused``/``OutboundUnresolvable``) or returns a target over http
  or https whose every address is outside the refused ranges. Nothing else may escape it, and
  it never connects.
- ``FetchProbeStage.open`` on ``file://`` URIs built from traversal pieces (``..``, encoded
  dots and slashes, NUL, symlinks out of the root): it either refuses with a reason code or
  opens a file that really lies under the root.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import netguard
from core.config import LimitSettings, StorageSettings
from core.errors import ReelsenseError
from core.records import VideoRef
from stages.fetch import FetchProbeStage
from tests.core.test_netguard import ONCE_GLOBAL
from tests.edges.corpus import TINY
from tests.stages import media

_V4 = st.ip_addresses(v=4).map(str)
_V6 = st.ip_addresses(v=6).map(str)
_SPECIAL = st.sampled_from(
    [
        "127.0.0.1",
        "10.0.0.1",
        "169.254.169.254",
        "::1",
        "fd00::1",
        "::ffff:10.0.0.1",
        "64:ff9b::a9fe:a9fe",
        "0.0.0.0",
        "93.184.216.34",
        "2606:4700::1111",
        "fe80::1%eth0",
        "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
        "64:ff9b::808:808",  # NAT64 of 8.8.8.8: allowed
        *ONCE_GLOBAL,
    ]
)
_HOSTS = st.one_of(
    st.sampled_from(
        [
            "videos.example",
            "2130706433",
            "0x7f000001",
            "0177.0.0.1",
            "127.1",
            "[::1]",
            "[::ffff:127.0.0.1]",
            "localhost",
            "xn--bcher-kva.example",
            "bücher.example",
            "",
            "%31%32%37.0.0.1",
            "[fe80::1%25eth0]",
        ]
    ),
    _V4,
    _V6.map(lambda ip: f"[{ip}]"),
    st.text(max_size=30),
)
_URLS = st.one_of(
    st.builds(
        lambda scheme, userinfo, host, port, path: f"{scheme}://{userinfo}{host}{port}{path}",
        st.sampled_from(["http", "https", "HTTP", "ftp", "file", "gopher", ""]),
        st.sampled_from(["", "user:pass@", "a@b@", "@"]),
        _HOSTS,
        st.sampled_from(["", ":80", ":0", ":65536", ":-1", ":x", ":8080"]),
        st.sampled_from(["", "/", "/x.mp4", "/../../etc/passwd", "?a=b#c", "\\\\evil"]),
    ),
    st.text(max_size=80),
)


@pytest.fixture(autouse=True)
def no_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a URI check opened a connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(url=_URLS, answers=st.lists(st.one_of(_V4, _V6, _SPECIAL), min_size=0, max_size=3))
def test_check_url_refuses_or_returns_a_public_target(url: str, answers: list[str]) -> None:
    def resolver(host: str, port: int) -> list[str]:
        return answers

    try:
        target = netguard.check_url(url, resolver=resolver)
    except (netguard.OutboundRefused, netguard.OutboundUnresolvable):
        return
    assert target.url.lower().startswith(("http://", "https://"))
    assert target.addresses
    assert all(netguard.refusal(a) is None for a in target.addresses)
    literal = netguard.literal_address(target.host)
    checked = (
        [literal]
        if literal is not None
        else [ipaddress.ip_address(a.split("%")[0]) for a in answers]
    )
    assert all(netguard.refusal(a) is None for a in checked)
    assert 0 < target.port < 65536


_PIECES = st.sampled_from(
    [
        "..",
        ".",
        "%2e%2e",
        "%2E%2e",
        ".%2e",
        "%2f",
        "%2F..",
        "//",
        "a",
        "clip.mp4",
        "link",
        "dirlink",
        "sub",
        "%00",
        "etc",
        "passwd",
        "~",
        "%252e%252e",
        "...",
        " ",
        "%5c..",
    ]
)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("fuzz-root")
    inside = base / "root"
    (inside / "sub").mkdir(parents=True)
    outside = base / "outside"
    outside.mkdir()
    media.write_plain(inside / "clip.mp4", seconds=1, fps=5, size=TINY)
    media.write_plain(inside / "sub" / "clip.mp4", seconds=1, fps=5, size=TINY)
    media.write_plain(outside / "clip.mp4", seconds=1, fps=5, size=TINY)
    os.symlink(outside / "clip.mp4", inside / "link")
    os.symlink(outside, inside / "dirlink")
    os.symlink(inside / "loop", inside / "loop")
    return inside


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    prefix=st.sampled_from(["{root}/", "{root}", "/", "//", "localhost{root}/", "{root}/sub/"]),
    pieces=st.lists(_PIECES, max_size=6),
)
def test_file_uris_never_leave_the_root(root: Path, prefix: str, pieces: list[str]) -> None:
    stage = FetchProbeStage(
        LimitSettings(file_roots=(str(root),)), StorageSettings(), str(root.parent / "work")
    )
    uri = "file://" + prefix.format(root=root.as_posix()) + "/".join(pieces)
    try:
        video = stage.open(VideoRef("fuzz", uri))
    except ReelsenseError as error:
        refused = error
    else:
        assert Path(video.path).resolve().is_relative_to(root.resolve()), uri
        return
    # Permanent reasons only: none of these inputs can start to work on a retry.
    assert refused.code in {"fetch_refused", "source_not_found"}, (uri, refused)

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from consumers.errors import InvalidEvent
from consumers.events import VIDEO_ID_PATTERN, VideoDeleted, VideoUploaded, parse_event

LIMIT = 64 * 1024


def _event(**fields: Any) -> bytes:
    body = {"video_id": "v-1", "uri": "s3://bucket/v-1.mp4", **fields}
    return json.dumps(body).encode()


def _invalid(key: bytes | None, value: bytes | None, max_bytes: int = LIMIT) -> InvalidEvent:
    with pytest.raises(InvalidEvent) as caught:
        parse_event(key, value, max_bytes=max_bytes)
    return caught.value


def test_a_valid_event_round_trips() -> None:
    event = parse_event(b"v-1", _event(tenant="acme", metadata={"title": "猫"}), max_bytes=LIMIT)
    assert event.video_id == "v-1"
    assert event.to_ref().tenant == "acme"
    assert parse_event(b"v-1", event.to_bytes(), max_bytes=LIMIT) == event


@pytest.mark.parametrize(
    ("key", "value", "code", "video_id"),
    [
        (b"v-1", None, "event_empty", "v-1"),
        (b"v-1", b"\xff\xfe\x00garbage", "event_not_json", "v-1"),
        (None, b"[1, 2]", "event_invalid", None),
        (b"v-1", _event(uri="ftp://x/y"), "event_invalid", "v-1"),
        (b"v-2", _event(), "event_key_mismatch", "v-1"),
        (b"bad key!", _event(video_id="also bad"), "event_invalid", None),
        (None, _event(video_id="v-9", schema_version=2), "event_invalid", "v-9"),
        (
            b"v-1",
            b'{"video_id": "v-1", "uri": "file:///a", "metadata": {"x": NaN}}',
            "event_not_json",
            "v-1",
        ),
        (b"v-1", b"[" * 50_000, "event_not_json", "v-1"),
        (b"v-1", b'{"video_id": "v-1", "n": ' + b"9" * 5000 + b"}", "event_not_json", "v-1"),
    ],
)
def test_invalid_events_carry_a_reason_and_the_readable_id(
    key: bytes | None, value: bytes | None, code: str, video_id: str | None
) -> None:
    error = _invalid(key, value)
    assert error.code == code
    assert error.video_id == video_id


def test_invalid_events_carry_the_tenant_their_body_names() -> None:
    """So a rejection is shown to the tenant that sent it, and only a tenant a valid event
    could name is taken from the body."""
    assert _invalid(b"v-1", _event(uri="ftp://x/y", tenant="acme")).tenant == "acme"
    assert _invalid(b"v-2", _event(tenant="acme")).tenant == "acme"  # key mismatch
    assert _invalid(b"v-1", _event(uri="ftp://x/y")).tenant is None
    assert _invalid(b"v-1", _event(uri="ftp://x/y", tenant="no such tenant!")).tenant is None
    assert _invalid(b"v-1", _event(uri="ftp://x/y", tenant="acme\n")).tenant is None
    assert _invalid(b"v-1", b"not json").tenant is None


def test_a_deletion_event_parses_as_one() -> None:
    body = {"type": "video.deleted", "video_id": "v-1", "tenant": "acme"}
    deleted = parse_event(b"v-1", json.dumps(body).encode(), max_bytes=LIMIT)
    assert isinstance(deleted, VideoDeleted)
    assert (deleted.video_id, deleted.tenant) == ("v-1", "acme")
    assert _invalid(b"v-2", json.dumps(body).encode()).code == "event_key_mismatch"
    assert _invalid(b"v-1", json.dumps({**body, "x": 1}).encode()).code == "event_invalid"


def test_an_oversized_event_is_refused_before_parsing() -> None:
    error = _invalid(b"v-1", b"{" + b" " * 2000 + b"}", max_bytes=1024)
    assert (error.code, error.video_id) == ("event_too_large", "v-1")


def test_an_id_with_a_trailing_newline_is_not_readable() -> None:
    # "$" in a Python pattern also matches before a final newline.
    error = _invalid(b"v-1\n", _event(video_id="v-1\n", uri="nope"))
    assert error.video_id is None
    assert _invalid(b"v-1\n", _event()).code == "event_key_mismatch"


def test_metadata_that_cannot_be_written_out_is_refused() -> None:
    error = _invalid(
        b"v-1", b'{"video_id": "v-1", "uri": "file:///a", "metadata": {"x": "\\ud800"}}'
    )
    assert error.code == "event_invalid"
    assert error.video_id == "v-1"
    str(error).encode()  # the message itself is printable


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)
_ids = st.from_regex(VIDEO_ID_PATTERN, fullmatch=True) | st.text(max_size=20)
_bodies = st.fixed_dictionaries(
    {},
    optional={
        "schema_version": st.sampled_from([1, 2, "1", None]),
        "video_id": _ids,
        "uri": st.sampled_from(["file:///a.mp4", "s3://b/k", "https://h/v", "ftp://x", ""])
        | st.text(),
        "tenant": st.sampled_from(["default", "acme", "bad tenant"]) | st.text(max_size=5),
        "callback_url": st.none() | st.sampled_from(["https://hook", "mailto:x"]) | st.text(),
        "metadata": _json,
        "submitted_at": st.sampled_from(["2024-01-01T00:00:00Z", "yesterday", 12]) | _json,
        "extra": _json,
    },
)
_keys = st.none() | st.binary(max_size=40) | _ids.map(lambda s: s.encode("utf-8", "surrogatepass"))


def _check(key: bytes | None, value: bytes | None) -> None:
    error: InvalidEvent | None = None
    try:
        event = parse_event(key, value, max_bytes=LIMIT)
    except InvalidEvent as invalid:
        error = invalid
    if error is not None:
        assert error.code.startswith("event_")
        if error.video_id is not None:
            assert VIDEO_ID_PATTERN.fullmatch(error.video_id)
        str(error).encode()
        return
    assert isinstance(event, VideoUploaded)
    assert parse_event(key, event.to_bytes(), max_bytes=LIMIT) == event


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_keys, st.none() | st.binary(max_size=300))
def test_arbitrary_bytes_raise_nothing_but_invalid_event(
    key: bytes | None, value: bytes | None
) -> None:
    _check(key, value)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_keys, _json | _bodies)
def test_arbitrary_json_raises_nothing_but_invalid_event(key: bytes | None, body: Any) -> None:
    _check(key, json.dumps(body).encode())

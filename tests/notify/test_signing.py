"""Standard Webhooks signatures, checked against the reference library."""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from notify.errors import InvalidSecret, SignatureInvalid
from notify.signing import decode_secret, generate_secret, sign, signed_headers, verify

OLD = "whsec_" + base64.b64encode(b"old-key-of-some-length-32-bytes!").decode()
NEW = generate_secret()


def test_signature_verifies_with_the_reference_library() -> None:
    body = b'{"type":"video.done","timestamp":"2026-01-01T00:00:00Z","data":{"video_id":"v1"}}'
    headers = signed_headers("msg_1", body, [SecretStr(NEW)])
    assert set(headers) == {"webhook-id", "webhook-timestamp", "webhook-signature"}
    assert headers["webhook-timestamp"].isdigit()
    assert Webhook(NEW).verify(body, headers) == {
        "type": "video.done",
        "timestamp": "2026-01-01T00:00:00Z",
        "data": {"video_id": "v1"},
    }


def test_rotation_each_secret_verifies() -> None:
    body = b'{"a":1}'
    headers = signed_headers("msg_rot", body, [OLD, NEW])
    parts = headers["webhook-signature"].split(" ")
    assert len(parts) == 2
    assert all(p.startswith("v1,") for p in parts)
    Webhook(OLD).verify(body, headers)
    Webhook(NEW).verify(body, headers)
    assert verify(body, headers, [OLD]) == "msg_rot"
    assert verify(body, headers, [NEW]) == "msg_rot"
    with pytest.raises(WebhookVerificationError):
        Webhook(generate_secret()).verify(body, headers)


def test_sign_matches_the_reference_signature() -> None:
    ts = 1_700_000_000
    ours = sign("msg_x", ts, b"hello", [NEW])
    theirs = Webhook(NEW).sign("msg_x", datetime.fromtimestamp(ts, UTC), "hello")
    assert ours == theirs


@settings(max_examples=50, deadline=None)
@given(
    msg_id=st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1),
    body=st.text(),
    key=st.binary(min_size=1, max_size=64),
)
def test_any_message_verifies_with_the_reference_library(
    msg_id: str, body: str, key: bytes
) -> None:
    secret = "whsec_" + base64.b64encode(key).decode()
    data = body.encode()
    headers = signed_headers(msg_id, data, [secret])
    Webhook(secret).verify(data, headers, json_parse=False)
    assert verify(data, headers, [secret]) == msg_id


def test_tampered_body_or_id_is_rejected() -> None:
    headers = signed_headers("msg_1", b'{"a":1}', [NEW])
    with pytest.raises(SignatureInvalid):
        verify(b'{"a":2}', headers, [NEW])
    with pytest.raises(SignatureInvalid):
        verify(b'{"a":1}', {**headers, "webhook-id": "msg_2"}, [NEW])
    with pytest.raises(SignatureInvalid):
        verify(b'{"a":1}', {**headers, "webhook-signature": "v1,ünïcode"}, [NEW])
    with pytest.raises(SignatureInvalid):
        verify(b'{"a":1}', {**headers, "webhook-signature": "v2,abc"}, [NEW])


def test_timestamp_outside_tolerance_is_rejected() -> None:
    old = int(time.time()) - 3600
    headers = signed_headers("msg_1", b"{}", [NEW], timestamp=old)
    with pytest.raises(SignatureInvalid, match="tolerance"):
        verify(b"{}", headers, [NEW])
    assert verify(b"{}", headers, [NEW], now=old + 10) == "msg_1"


def test_missing_headers_are_rejected() -> None:
    headers = signed_headers("msg_1", b"{}", [NEW])
    del headers["webhook-signature"]
    with pytest.raises(SignatureInvalid, match="missing"):
        verify(b"{}", headers, [NEW])


def test_no_secret_means_no_signature_header() -> None:
    headers = signed_headers("msg_1", b"{}", [])
    assert "webhook-signature" not in headers
    with pytest.raises(InvalidSecret):
        sign("msg_1", 1, b"{}", [])


@pytest.mark.parametrize("bad", ["", "whsec_", "abc", "whsec_!!!notbase64", "key_AAAA"])
def test_malformed_secrets_are_refused(bad: str) -> None:
    with pytest.raises(InvalidSecret):
        decode_secret(bad)


def test_unpadded_secret_is_accepted_like_the_reference() -> None:
    key = b"0123456789"
    unpadded = "whsec_" + base64.b64encode(key).decode().rstrip("=")
    assert decode_secret(unpadded) == key
    headers = signed_headers("m", b"{}", [unpadded])
    Webhook(unpadded).verify(b"{}", headers)

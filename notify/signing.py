"""Standard Webhooks signatures (https://www.standardwebhooks.com).

A secret is ``whsec_`` + base64 of the key bytes. The signed content is
``f"{webhook-id}.{webhook-timestamp}.{body}"``; the signature is HMAC-SHA256 of it, written
``v1,<base64>``. During a key rotation each secret signs, and the header carries every
signature separated by spaces, so receivers holding either key accept the message.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets as secrets_module
import time
from collections.abc import Iterable, Mapping, Sequence

from pydantic import SecretStr

from notify.errors import InvalidSecret, SignatureInvalid

SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
HEADER_ID = "webhook-id"
HEADER_TIMESTAMP = "webhook-timestamp"
HEADER_SIGNATURE = "webhook-signature"
DEFAULT_TOLERANCE_S = 300  # what the reference libraries accept either side of now


def decode_secret(secret: str | SecretStr) -> bytes:
    """The key bytes of a ``whsec_...`` secret."""
    raw = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
    if not raw.startswith(SECRET_PREFIX):
        raise InvalidSecret(f"a webhook secret must start with {SECRET_PREFIX!r}")
    encoded = raw[len(SECRET_PREFIX) :]
    try:
        # The reference libraries accept unpadded base64; so do we.
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidSecret("a webhook secret must be whsec_ followed by base64") from None
    if not key:
        raise InvalidSecret("a webhook secret may not be empty")
    return key


def generate_secret(nbytes: int = 24) -> str:
    """A fresh random secret in the ``whsec_`` form."""
    return SECRET_PREFIX + base64.b64encode(secrets_module.token_bytes(nbytes)).decode()


def _signature(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def sign(msg_id: str, timestamp: int, body: bytes, secrets: Sequence[str | SecretStr]) -> str:
    """The ``webhook-signature`` value: one ``v1,<base64>`` per secret, space-separated."""
    if not secrets:
        raise InvalidSecret("no webhook secret to sign with")
    return " ".join(_signature(decode_secret(s), msg_id, timestamp, body) for s in secrets)


def signed_headers(
    msg_id: str, body: bytes, secrets: Sequence[str | SecretStr], *, timestamp: int | None = None
) -> dict[str, str]:
    """The three Standard Webhooks headers for one attempt, stamped now unless told.

    Without secrets the message goes unsigned (id and timestamp only), which only makes
    sense for a local demo.
    """
    ts = int(time.time()) if timestamp is None else timestamp
    headers = {HEADER_ID: msg_id, HEADER_TIMESTAMP: str(ts)}
    if secrets:
        headers[HEADER_SIGNATURE] = sign(msg_id, ts, body, secrets)
    return headers


def verify(
    body: bytes,
    headers: Mapping[str, str],
    secrets: Iterable[str | SecretStr],
    *,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> str:
    """Check a received message against any of ``secrets``; returns its ``webhook-id``.

    Raises ``SignatureInvalid`` on missing headers, a timestamp outside the tolerance or no
    matching ``v1`` signature. Comparisons are constant-time.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    msg_id = lowered.get(HEADER_ID)
    ts_text = lowered.get(HEADER_TIMESTAMP)
    header = lowered.get(HEADER_SIGNATURE)
    if not (msg_id and ts_text and header):
        raise SignatureInvalid("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        ts = int(ts_text)
    except ValueError:
        raise SignatureInvalid("webhook-timestamp is not integer seconds") from None
    current = time.time() if now is None else now
    if abs(current - ts) > tolerance_s:
        raise SignatureInvalid("webhook-timestamp outside the tolerance")
    offered = []
    for part in header.split(" "):
        version, _, value = part.partition(",")
        if version == "v1" and value:
            offered.append(value)
    for secret in secrets:
        expected = _signature(decode_secret(secret), msg_id, ts, body).partition(",")[2]
        # Bytes, not str: compare_digest refuses non-ASCII text a sender could put there.
        if any(hmac.compare_digest(expected.encode(), value.encode()) for value in offered):
            return msg_id
    raise SignatureInvalid("no matching signature")

"""Standard Webhooks signatures (https://www.standardwebhooks.com), as Stripe-style receivers
check them: pure functions, no I/O.

Each request carries ``webhook-id`` (the batch's idempotency key, the same on every retry),
``webhook-timestamp`` (Unix seconds of this attempt) and ``webhook-signature``:
``v1,<base64 of HMAC-SHA256(key, "{id}.{timestamp}.{body}")>``. Signing the id as well as the
timestamp and body (Stripe signs ``"{timestamp}.{body}"``) keeps a captured signature from being
replayed under another id. ``Idempotency-Key`` repeats the id for receivers that look there.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
IDEMPOTENCY_HEADER = "idempotency-key"
RESERVED_HEADERS = frozenset(
    {ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER, IDEMPOTENCY_HEADER, "content-type"}
)
PREFIX = "whsec_"
MIN_SECRET = 16


def signing_key(secret: str) -> bytes:
    """The HMAC key of ``secret``: a ``whsec_`` secret's base64 decoded, else its UTF-8 bytes.

    Raises:
        ValueError: not base64 after ``whsec_``, or too short to resist guessing (the message
            never quotes the secret).
    """
    if secret.startswith(PREFIX):
        try:
            key = base64.b64decode(secret[len(PREFIX) :], validate=True)
        except binascii.Error:
            raise ValueError("a whsec_ secret must be base64 after its prefix") from None
    else:
        key = secret.encode()
    if len(key) < MIN_SECRET:
        raise ValueError(f"must hold at least {MIN_SECRET} bytes: a short key can be guessed")
    return key


def sign(key: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value of ``body`` sent as ``message_id`` at ``timestamp``."""
    signed = b"%s.%d.%s" % (message_id.encode(), timestamp, body)
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def headers(key: bytes, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The signature headers of one attempt."""
    return {
        ID_HEADER: message_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(key, message_id, timestamp, body),
        IDEMPOTENCY_HEADER: message_id,
    }

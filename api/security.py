"""HMAC request signing for writes (API.md: X-Key-Id, X-Signature: t=...,v1=...)."""

from __future__ import annotations

import hashlib
import hmac
import time

from api.errors import Unauthorized


def sign(secret: bytes, body: bytes, timestamp: int | None = None) -> str:
    """The X-Signature header value for ``body`` (used by clients, tests and bench)."""
    t = int(time.time()) if timestamp is None else timestamp
    mac = hmac.new(secret, f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def verify(
    keys: dict[str, bytes],
    key_id: str | None,
    signature: str | None,
    body: bytes,
    window_seconds: int,
    now: float | None = None,
) -> str:
    """Return the key id when the signature is valid; raise Unauthorized otherwise."""
    if not key_id or not signature:
        raise Unauthorized("X-Key-Id and X-Signature are required")
    secret = keys.get(key_id)
    if secret is None:
        raise Unauthorized("unknown key id")
    parts: dict[str, list[str]] = {}
    for item in signature.split(","):
        name, sep, value = item.strip().partition("=")
        if sep:
            parts.setdefault(name, []).append(value)
    try:
        timestamp = int(parts["t"][0])
    except (KeyError, ValueError):
        raise Unauthorized("signature needs t=<unix seconds>") from None
    current = time.time() if now is None else now
    if abs(current - timestamp) > window_seconds:
        raise Unauthorized(f"signature timestamp outside the {window_seconds} s window")
    expected = hmac.new(
        secret, f"{timestamp}.".encode() + body, hashlib.sha256
    ).hexdigest()
    # Any v1 may match (a signer may send several during rotation); compare in
    # constant time so the comparison leaks nothing about the expected value.
    if not any(hmac.compare_digest(expected, v) for v in parts.get("v1", [])):
        raise Unauthorized("signature does not match")
    return key_id

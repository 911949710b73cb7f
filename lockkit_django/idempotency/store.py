"""Kept responses: one Django cache entry per scoped key, holding the first response's status,
reason, headers and body bytes, and the fingerprint of the request that made it. Cookies
(``Set-Cookie``) are never kept: a replay must not hand out a session, whoever asks.

The cache entry is written before the key's lock is released, so a retry that finds the lock
free finds the response too (it reads the cache again once it holds the lock).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from django.core.cache import caches
from django.http import HttpResponse

__all__ = ["REPLAYED_HEADER", "KeptResponse", "keep", "kept", "record_key"]

REPLAYED_HEADER: Final = "Idempotency-Replayed"
_PREFIX: Final = "lockkit:idempotency:"
_NOT_KEPT: Final = frozenset({"set-cookie", "set-cookie2"})


@dataclass(frozen=True)
class KeptResponse:
    """A response as it was first sent, and the request fingerprint it answered."""

    fingerprint: str
    status: int
    reason: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    @classmethod
    def of(cls, fingerprint: str, response: HttpResponse) -> KeptResponse:
        """Capture a (non-streaming) response, without its cookies."""
        headers = tuple((k, v) for k, v in response.items() if k.lower() not in _NOT_KEPT)
        return cls(
            fingerprint=fingerprint,
            status=response.status_code,
            reason=response.reason_phrase,
            headers=headers,
            body=response.content,
        )

    def replay(self) -> HttpResponse:
        """A new response with the same status, reason, headers and body bytes (no cookies),
        plus ``Idempotency-Replayed: true``."""
        response = HttpResponse(self.body, status=self.status, reason=self.reason)
        for name in list(response.headers):
            del response.headers[name]
        for name, value in self.headers:
            response.headers[name] = value
        response.headers[REPLAYED_HEADER] = "true"
        return response


def record_key(scope: str) -> str:
    """The cache key of a scoped idempotency key."""
    return _PREFIX + scope


def kept(alias: str, scope: str) -> KeptResponse | None:
    """The kept response of ``scope``, or None. Cache errors propagate (the caller fails closed)."""
    found = caches[alias].get(record_key(scope))
    return found if isinstance(found, KeptResponse) else None


def keep(alias: str, scope: str, response: KeptResponse, expires: int) -> None:
    """Keep ``response`` for ``expires`` seconds."""
    caches[alias].set(record_key(scope), response, timeout=expires)

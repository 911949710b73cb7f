"""``Idempotency-Key`` (draft-ietf-httpapi-idempotency-key-header): a retried request gets
the first response again, byte for byte, and the view runs once per key.

* :mod:`.settings`: ``LOCKKIT['IDEMPOTENCY']`` and the options of ``@idempotent``.
* :mod:`.header`: the header (an RFC 8941 sf-string), the scope of a key (principal, method,
  route) and the fingerprint of a request's payload.
* :mod:`.store`: responses kept in a Django cache.
* :mod:`.flow`: replay, 400/409/422/503, or run once under the key's lock.
* :mod:`.views`: ``@idempotent``; ``IdempotencyMiddleware`` is in
  :mod:`lockkit_django.middleware`.
"""

from .settings import IdempotencySettings, parse_idempotency

__all__ = ["IdempotencySettings", "parse_idempotency"]

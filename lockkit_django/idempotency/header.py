"""The ``Idempotency-Key`` header, the scope a key lives in, and a request's fingerprint.

The header is a Structured Field String (RFC 8941 section 3.3.3), as
draft-ietf-httpapi-idempotency-key-header asks: ``Idempotency-Key: "8e03978e-40d5"``.
Parameters after the string (``"k";a=1``) are ignored, as RFC 8941 says unknown ones must be.

A key is scoped by principal, method and route: the same key sent by two users, or to two
routes, names two different records. The principal is the signed-in user, else the session,
else ``SCOPE(request)``; a keyed hash of the ``Authorization`` header is folded into it, so
APIs that authenticate inside the view (token auth, JWT) tell their callers apart. A request
with none of these has no principal: its key is neither kept nor replayed (any caller could
send it). Session keys and ``Authorization`` are hashed with ``SECRET_KEY``
(:func:`lockkit_core.guard.credential_digest`).
"""

from __future__ import annotations

import hashlib
from typing import Final

from django.http import HttpRequest
from django.http.request import RawPostDataException
from django.urls import Resolver404, resolve

from lockkit_core.guard import credential_digest

from ..conf import secret_key
from ..problems import IdempotencyKeyInvalid
from .settings import IdempotencySettings

__all__ = ["HEADER", "fingerprint", "parse_key", "principal", "scope_of"]

HEADER: Final = "Idempotency-Key"
_SF_STRING_CHARS: Final = frozenset(chr(c) for c in range(0x20, 0x7F)) - {'"', "\\"}


def _sf_string(value: str) -> tuple[str, str]:
    """Parse a Structured Field String at the start of ``value``: (string, rest)."""
    if not value.startswith('"'):
        raise IdempotencyKeyInvalid(
            f'the {HEADER} header must be a quoted string such as "8e03978e-40d5" '
            f"(an RFC 8941 sf-string), got {value!r}"
        )
    out: list[str] = []
    i = 1
    while i < len(value):
        char = value[i]
        if char == "\\":
            if i + 1 >= len(value) or value[i + 1] not in '"\\':
                raise IdempotencyKeyInvalid(
                    f'the {HEADER} header may escape only " and \\ with a backslash'
                )
            out.append(value[i + 1])
            i += 2
            continue
        if char == '"':
            return "".join(out), value[i + 1 :]
        if char not in _SF_STRING_CHARS:
            raise IdempotencyKeyInvalid(
                f"the {HEADER} header may hold only printable ASCII, got {char!r}"
            )
        out.append(char)
        i += 1
    raise IdempotencyKeyInvalid(f"the {HEADER} header's string has no closing quote")


def parse_key(request: HttpRequest, options: IdempotencySettings) -> str | None:
    """The request's key, None if it sent none; IdempotencyKeyInvalid for a 400."""
    raw = request.headers.get(HEADER)
    if raw is None:
        if options.required:
            raise IdempotencyKeyInvalid(
                f"{request.method} {request.path} requires an {HEADER} header, e.g. "
                f'{HEADER}: "<a new UUID for each operation>"',
                missing=True,
            )
        return None
    key, rest = _sf_string(raw.strip(" \t"))
    rest = rest.strip(" \t")
    if rest and not rest.startswith(";"):
        raise IdempotencyKeyInvalid(
            f"the {HEADER} header must hold one string, got {raw!r} (a list or trailing text)"
        )
    if not key:
        raise IdempotencyKeyInvalid(f"the {HEADER} header is empty; send a unique string")
    if len(key) > options.max_key_length:
        raise IdempotencyKeyInvalid(
            f"the {HEADER} header is {len(key)} characters long; at most "
            f"{options.max_key_length} are accepted"
        )
    return key


def principal(request: HttpRequest, options: IdempotencySettings) -> str | None:
    """Who sent the request: ``user:<pk>``, ``session:<hash>`` or ``scope:<SCOPE>``, with
    ``authorization:<hash>`` folded in; None if nothing tells this caller from another."""
    parts = []
    user = getattr(request, "user", None)
    session = getattr(request, "session", None)
    if user is not None and getattr(user, "is_authenticated", False):
        parts.append(f"user:{user.pk}")
    elif session is not None and session.session_key:
        parts.append(f"session:{credential_digest(session.session_key, secret_key)}")
    elif options.scope is not None:
        scope = options.scope(request)
        if scope:
            parts.append(f"scope:{scope}")
    authorization = request.headers.get("Authorization")
    if authorization:
        parts.append(f"authorization:{credential_digest(authorization, secret_key)}")
    return "|".join(parts) or None


def _route(request: HttpRequest) -> str:
    match = request.resolver_match
    if match is None:
        try:
            match = resolve(request.path_info, getattr(request, "urlconf", None))
        except Resolver404:
            return f"path:{request.path_info}"
    return f"route:{match.route}|{match.view_name}"


def scope_of(request: HttpRequest, key: str, options: IdempotencySettings) -> str | None:
    """The digest naming this key's record and lock: principal + method + route + key; None
    if the request has no principal."""
    who = principal(request, options)
    if who is None:
        return None
    parts = (who, request.method or "", _route(request), key)
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def fingerprint(request: HttpRequest) -> str:
    """A digest of method, path with query string, content type and body. The same key with
    another fingerprint is another payload: a 422.

    A multipart body is digested as its parsed fields and files (names, sizes, contents), as
    the view will read it: its boundary differs from one retry to the next. Any other body is
    read into memory (``DATA_UPLOAD_MAX_MEMORY_SIZE`` applies)."""
    digest = hashlib.sha256()
    for part in (request.method or "", request.get_full_path(), request.content_type or ""):
        digest.update(part.encode() + b"\x00")
    if request.content_type != "multipart/form-data":
        try:
            digest.update(request.body)
            return digest.hexdigest()
        except RawPostDataException:
            pass  # read as a form already (a decorator under a middleware that parsed it)
    for name, values in sorted(request.POST.lists()):
        digest.update(repr((name, values)).encode())
    for name, files in sorted(request.FILES.lists()):
        for upload in files:
            digest.update(repr((name, upload.name, upload.size)).encode())
            for chunk in upload.chunks():
                digest.update(chunk)
            upload.seek(0)  # the view reads it from the start
    return digest.hexdigest()

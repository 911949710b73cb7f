"""System checks: bad ``settings.LOCKKIT`` surfaces at ``manage.py check`` (and at every
``runserver`` and ``migrate``), never as a traceback at request time.

=============  ===============================================================
lockkit.E001   the URL is malformed or names an unknown scheme
lockkit.E002   the backend's extra is not installed
lockkit.E003   a malformed setting, option or middleware rule
lockkit.E004   (``--deploy``) the lock store cannot be reached
lockkit.E005   a ``LockViewMixin``'s ``lock_key`` names a URL argument its route lacks
lockkit.W001   ``memory://``: each process has its own locks
lockkit.W002   a lock ttl shorter than the server's request timeout, without renewal
lockkit.W003   the default ``file://`` temp directory with ``DEBUG=False``
lockkit.W004   ``IDEMPOTENCY`` keeps responses in a per-process or dummy cache
lockkit.W005   ``IdempotencyMiddleware`` comes before the authentication middleware
=============  ===============================================================
"""

from __future__ import annotations

import os
import shlex
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register

from lockkit_core import BackendNotInstalled, BackendUnavailable, ConfigError, LockKitError
from lockkit_core.registry import _check_installed, backend_class
from lockkit_core.url import parse_url

from .conf import AdapterSettings, lockkit_state, parse_settings

__all__ = ["check_deploy", "check_settings", "check_view_keys"]

_DOCS = "see the 'Django' section of lockkit's README"


def _url_errors(raw: Any) -> list[CheckMessage]:
    """E001/E002 from the URL alone, so a bad URL is named as such."""
    url = raw.get("URL") if isinstance(raw, dict) else None
    if not isinstance(url, str):
        return []
    try:
        scheme = parse_url(url).scheme
        _check_installed(backend_class(scheme), scheme)
    except BackendNotInstalled as exc:
        return [_not_installed(str(exc))]
    except ConfigError as exc:
        return [
            Error(
                f"LOCKKIT['URL'] is unusable: {exc}",
                hint="Use a URL such as 'redis://127.0.0.1:6379/0', 'file:///var/lib/"
                "myapp/locks' or 'memory://'.",
                id="lockkit.E001",
            )
        ]
    return []


def _not_installed(detail: str) -> Error:
    return Error(
        f"LOCKKIT['URL'] needs a driver that is not installed: {detail}",
        hint='Install the extra it names, e.g. pip install "lockkit[redis]".',
        id="lockkit.E002",
    )


def _request_timeout() -> float | None:
    """gunicorn's ``--timeout``, when the server says it in ``GUNICORN_CMD_ARGS``."""
    args = shlex.split(os.environ.get("GUNICORN_CMD_ARGS", ""))
    for i, arg in enumerate(args):
        value = None
        if arg in ("-t", "--timeout") and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--timeout="):
            value = arg.partition("=")[2]
        if value is not None:
            try:
                return float(value)
            except ValueError:
                return None
    return None


def _warnings(parsed: AdapterSettings, raw: Any) -> list[CheckMessage]:
    found: list[CheckMessage] = []
    scheme = parse_url(parsed.config.url).scheme
    if scheme == "memory":
        found.append(
            Warning(
                "LOCKKIT['URL'] is memory://: locks are held per process, so the worker "
                "processes of a deployment (gunicorn, uwsgi, celery) do not exclude each other.",
                hint="Use redis://... or a shared file:// directory; silence lockkit.W001 only "
                "for a single-process server or tests.",
                id="lockkit.W001",
            )
        )
    timeout = _request_timeout()
    if timeout is not None and not parsed.config.auto_renew:
        short = [("LOCKKIT['TTL']", parsed.config.ttl)]
        short += [
            (f"the middleware rule for {r.path.pattern!r}", r.ttl)
            for r in parsed.rules
            if isinstance(r.ttl, float)
        ]
        for where, ttl in short:
            if ttl < timeout:
                found.append(
                    Warning(
                        f"{where} is {ttl:g} s, shorter than the server's request timeout "
                        f"({timeout:g} s), and AUTO_RENEW is off: a slow request can lose "
                        "its lock while it still runs.",
                        hint="Turn AUTO_RENEW on, or make the ttl longer than the request timeout.",
                        id="lockkit.W002",
                    )
                )
    found.extend(_idempotency_warnings(parsed, raw))
    url_given = isinstance(raw, dict) and any(str(k).upper() == "URL" for k in raw)
    if scheme == "file" and not url_given and not settings.DEBUG:
        found.append(
            Warning(
                f"lockkit uses its default {parsed.config.url}, under the system temp "
                "directory: services that see their own /tmp (systemd PrivateTmp, other "
                "users, containers) share no locks with this one.",
                hint="Set LOCKKIT['URL'] to a directory every service shares, such as "
                "'file:///var/lib/myapp/locks', or to a lock server ('redis://...').",
                id="lockkit.W003",
            )
        )
    return found


_UNSHARED_CACHES = (
    "django.core.cache.backends.locmem.LocMemCache",
    "django.core.cache.backends.dummy.DummyCache",
)


def _middleware_order() -> list[CheckMessage]:
    middleware = [str(m) for m in getattr(settings, "MIDDLEWARE", None) or []]
    ours = "lockkit_django.middleware.IdempotencyMiddleware"
    auth = "django.contrib.auth.middleware.AuthenticationMiddleware"
    if (
        ours in middleware
        and auth in middleware
        and middleware.index(ours) < middleware.index(auth)
    ):
        return [
            Warning(
                "IdempotencyMiddleware comes before AuthenticationMiddleware: it cannot see "
                "request.user, so signed-in users' keys are scoped by session or not at all.",
                hint="Move it after AuthenticationMiddleware (and before LockMiddleware).",
                id="lockkit.W005",
            )
        ]
    return []


def _idempotency_warnings(parsed: AdapterSettings, raw: Any) -> list[CheckMessage]:
    found = _middleware_order()
    if not isinstance(raw, dict) or not any(str(k).upper() == "IDEMPOTENCY" for k in raw):
        return found
    alias = parsed.idempotency.cache
    backend = getattr(settings, "CACHES", {}).get(alias, {}).get("BACKEND", "")
    if backend not in _UNSHARED_CACHES:
        return found
    return [
        *found,
        Warning(
            f"LOCKKIT['IDEMPOTENCY'] keeps responses in the cache {alias!r} ({backend}), "
            "which other worker processes do not see (or which keeps nothing): a retry "
            "served by another process runs the view again.",
            hint="Point LOCKKIT['IDEMPOTENCY']['CACHE'] at a shared cache (Redis, Memcached, "
            "database, file-based); silence lockkit.W004 only for a single-process server.",
            id="lockkit.W004",
        ),
    ]


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Validate ``settings.LOCKKIT`` (E001-E003) and warn about risky ones (W001-W005)."""
    raw = getattr(settings, "LOCKKIT", None)
    url_errors = _url_errors(raw)
    if url_errors:
        return url_errors
    try:
        parsed = parse_settings(raw)
        lockkit_state()  # the backend checks its OPTIONS when it is built (no I/O)
    except ConfigError as exc:
        return [
            Error(
                f"settings.LOCKKIT is invalid: {exc}",
                hint=f"Fix the setting it names; {_DOCS}.",
                id="lockkit.E003",
            )
        ]
    return _warnings(parsed, raw)


@register(Tags.compatibility, deploy=True)
def check_deploy(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``check --deploy``: the lock store answers."""
    if any(message.is_serious() for message in check_settings()):
        return []  # the settings checks already report what is wrong
    try:
        lockkit_state().kit.admin.info("lockkit-deploy-check")
    except BackendUnavailable as exc:
        return [
            Error(
                f"the lock store cannot be reached: {exc}",
                hint="Start it, or fix LOCKKIT['URL'] and LOCKKIT['OPTIONS'].",
                id="lockkit.E004",
            )
        ]
    except LockKitError:
        return []
    return []


@register(Tags.urls)
def check_view_keys(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E005: a class-based view's ``lock_key`` names a URL argument that a route serving it
    does not capture (``@lock_view`` checks the function's parameters when it decorates)."""
    from django.urls import URLResolver, get_resolver

    from .views import LockViewMixin

    found: list[CheckMessage] = []

    def walk(patterns: Any, captured: frozenset[str]) -> None:
        for entry in patterns:
            names = captured | set(entry.pattern.regex.groupindex)
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, names)
                continue
            view = getattr(entry.callback, "view_class", None)
            if not (isinstance(view, type) and issubclass(view, LockViewMixin)):
                continue
            if view.lock_key is None:
                continue
            try:
                fields = view.lock_rule().key.url_fields()
            except ConfigError as exc:
                found.append(Error(f"{view.__qualname__}: {exc}", id="lockkit.E005"))
                continue
            missing = [f for f in fields if f not in names]
            if missing:
                found.append(
                    Error(
                        f"{view.__qualname__}.lock_key {view.lock_key!r} names "
                        f"{', '.join(missing)}, which the URL pattern {str(entry.pattern)!r} "
                        f"does not capture (it captures: {', '.join(sorted(names)) or 'none'})",
                        hint="Fix the key template, or capture the argument in the URL.",
                        id="lockkit.E005",
                    )
                )

    walk(get_resolver().url_patterns, frozenset())
    return found

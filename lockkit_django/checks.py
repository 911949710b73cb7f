"""System checks: bad ``settings.LOCKKIT`` surfaces at ``manage.py check`` (and at every
``runserver`` and ``migrate``), never as a traceback at request time.

=============  ===============================================================
lockkit.E001   the URL is malformed or names an unknown scheme
lockkit.E002   the backend's extra is not installed
lockkit.E003   a malformed setting, option or middleware rule
lockkit.E004   (``--deploy``) the lock store cannot be reached
lockkit.E005   a locked view's key names a URL argument its route does not capture
lockkit.E006   ``ttl=None`` (no lease) on a store that needs a lease
lockkit.E007   (``--deploy``) ``lockkit doctor`` finds the store unsafe for locks (an
               evicting Redis, a replica, a transaction pooler, ...)
lockkit.W001   ``memory://``: each process has its own locks
lockkit.W002   a lock ttl shorter than the server's request timeout, without renewal
lockkit.W003   the default ``file://`` temp directory with ``DEBUG=False``
lockkit.W004   ``IDEMPOTENCY`` keeps responses in a per-process or dummy cache
lockkit.W005   ``IdempotencyMiddleware`` comes before the authentication middleware
lockkit.W006   ``IDEMPOTENCY`` without ``SCOPE``: callers with no user, session or
               ``Authorization`` header are not kept or replayed
lockkit.W007   (``--deploy``) ``lockkit doctor`` warns about the store (persistence,
               replicas, clock, round trip, session timeout, ...)
=============  ===============================================================
"""

from __future__ import annotations

import os
import shlex
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register

from lockkit_core import BackendNotInstalled, BackendUnavailable, ConfigError, LockKitError
from lockkit_core.guard import RequestRule
from lockkit_core.registry import backend_class, check_installed
from lockkit_core.store_warnings import unshared_store_warnings
from lockkit_core.url import parse_url

from .conf import AdapterSettings, lockkit_state, parse_settings

__all__ = ["check_deploy", "check_settings", "check_view_keys"]

_DOCS = "see lockkit's Django guide (docs/guides/django.md)"
_URL = "LOCKKIT['URL']"


def _url_errors(raw: Any) -> list[CheckMessage]:
    """E001/E002 from the URL alone, so a bad URL is named as such."""
    url = raw.get("URL") if isinstance(raw, dict) else None
    if not isinstance(url, str):
        return []
    try:
        scheme = parse_url(url).scheme
        check_installed(backend_class(scheme), scheme)
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
    # None (os.environ.get of an unset variable) is no URL: the default applies.
    url_given = isinstance(raw, dict) and any(
        str(k).upper() == "URL" and v is not None for k, v in raw.items()
    )
    # The core words these warnings (as for Flask and Celery); Django adds the check ids.
    # The default file:// store is fine for runserver: W003 only with DEBUG off.
    for text in unshared_store_warnings(parsed.config, url_given=url_given, setting=_URL):
        if scheme == "memory":
            found.append(
                Warning(
                    text,
                    hint="Silence lockkit.W001 only for a single-process server or tests.",
                    id="lockkit.W001",
                )
            )
        elif not settings.DEBUG:
            found.append(Warning(text, id="lockkit.W003"))
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
    if parsed.idempotency.scope is None:
        found.append(
            Warning(
                "LOCKKIT['IDEMPOTENCY'] has no SCOPE: an Idempotency-Key request from a caller "
                "with no signed-in user, no session and no Authorization header (e.g. an API "
                "key in another header, checked inside the view) is run but neither kept nor "
                "replayed, since nothing tells one such caller from another.",
                hint="Set LOCKKIT['IDEMPOTENCY']['SCOPE'] to a callable (request) -> str "
                "naming the caller (e.g. a hash of its API key); silence lockkit.W006 if "
                "every caller signs in or sends Authorization.",
                id="lockkit.W006",
            )
        )
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
    """Validate ``settings.LOCKKIT`` (E001-E003) and warn about risky ones (W001-W006)."""
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
    """``check --deploy``: the lock store answers, and ``lockkit doctor`` finds its settings
    safe for locks (E007 when unsafe, W007 for its warnings)."""
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
    return _doctor_messages()


def _doctor_messages() -> list[CheckMessage]:
    """E007/W007: what ``lockkit doctor`` finds wrong in the store's settings."""
    from lockkit_core.doctor import Level, diagnose

    config = lockkit_state().settings.config
    try:
        report = diagnose(config.url, config.options, ttl=config.ttl)
    except LockKitError:
        return []  # the settings checks report a bad URL or option
    messages: list[CheckMessage] = []
    for finding in report.findings:
        if finding.level is Level.OK:
            continue
        where = f" ({finding.where})" if finding.where else ""
        text = f"lockkit doctor, {finding.check}{where}: {finding.message}"
        hint = finding.fix or None
        if finding.level is Level.UNSAFE:
            messages.append(Error(text, hint=hint, id="lockkit.E007"))
        else:
            messages.append(Warning(text, hint=hint, id="lockkit.W007"))
    return messages


def _view_rules(callback: Any) -> list[tuple[str, RequestRule]]:
    """The rules a URL pattern's view runs under, each with the name to report: a
    ``@lock_view`` function (also around ``View.as_view()``), a ``dispatch`` decorated with
    ``method_decorator(lock_view(...))``, a ``LockViewMixin``."""
    from .views import RULE, LockViewMixin

    found: dict[int, tuple[str, RequestRule]] = {}
    view = getattr(callback, "view_class", None)
    if isinstance(view, type):
        rule = getattr(getattr(view, "dispatch", None), RULE, None)
        if isinstance(rule, RequestRule):
            found[id(rule)] = (f"{view.__qualname__}.dispatch", rule)
        if issubclass(view, LockViewMixin) and view.lock_key is not None:
            rule = view.lock_rule()
            found[id(rule)] = (f"{view.__qualname__}.lock_key", rule)
    # as_view() copies dispatch's attributes onto the view function: the same rule again.
    rule = getattr(callback, RULE, None)
    if isinstance(rule, RequestRule) and id(rule) not in found:
        found[id(rule)] = (getattr(callback, "__qualname__", repr(callback)), rule)
    return list(found.values())


@register(Tags.urls)
def check_view_keys(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Walk the URLs: E005, a locked view's key names a URL argument its route does not
    capture; E006, a view's or a middleware rule's ``ttl=None`` on a store that needs a
    lease. (``@lock_view`` checks a function's own parameters when it decorates.)"""
    from django.urls import URLResolver, get_resolver

    found: list[CheckMessage] = []
    try:
        kit = lockkit_state().kit
    except ConfigError:
        kit = None  # check_settings reports it

    def check_store(rule: RequestRule, where: str) -> None:
        if kit is None:
            return
        try:
            rule.check_store(kit, where)
        except ConfigError as exc:
            found.append(
                Error(str(exc), hint="Give the rule a ttl, or use a store that holds locks "
                      "without a lease.", id="lockkit.E006")
            )  # fmt: skip

    def walk(patterns: Any, captured: frozenset[str]) -> None:
        for entry in patterns:
            names = captured | set(entry.pattern.regex.groupindex)
            names |= set(getattr(entry, "default_args", None) or ())  # path(..., kwargs=)
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, names)
                continue
            try:
                rules = _view_rules(entry.callback)
            except ConfigError as exc:
                found.append(Error(str(exc), id="lockkit.E005"))
                continue
            for name, rule in rules:
                check_store(rule, name)
                missing = [f for f in rule.key.url_fields() if f not in names]
                if missing:
                    found.append(
                        Error(
                            f"{name} {rule.key.template!r} names {', '.join(missing)}, which "
                            f"the URL pattern {str(entry.pattern)!r} does not capture (it "
                            f"captures: {', '.join(sorted(names)) or 'none'})",
                            hint="Fix the key template, or capture the argument in the URL.",
                            id="lockkit.E005",
                        )
                    )

    walk(get_resolver().url_patterns, frozenset())
    if kit is not None:
        for i, rule in enumerate(lockkit_state().settings.rules):
            check_store(rule, f"LOCKKIT['MIDDLEWARE']['RULES'][{i}] ({rule.path.pattern!r})")
    return found

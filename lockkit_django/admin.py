"""The admin page for locks: list the held ones, force-release one after a confirmation.

Listed on the admin index under "lockkit" for staff users with ``lockkit.view_lock``;
releasing needs ``lockkit.release_lock`` as well (both created by ``manage.py migrate``, see
:mod:`lockkit_django.models`). Everything goes through the core's admin layer on the kit of
``settings.LOCKKIT``; a release is logged as an admin ``LogEntry`` (deletion) and on the
``lockkit.django`` logger, with the user who did it.

Releasing ends a lock its holder may still be using: the holder is not told until it next
renews, extends, releases or checks it. The confirmation page says so.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.http import urlencode

from lockkit_core import LockKitError
from lockkit_core.admin import LockInfo, age_text

from .conf import get_kit
from .models import Lock

__all__ = ["LockAdmin", "LockRow"]

log = logging.getLogger("lockkit.django")

_HOLDER = re.compile(r"^(?P<host>.*) pid (?P<pid>\d+)(?P<rest>.*)$")


@dataclass(frozen=True)
class LockRow:
    """One line of the page: what :class:`~lockkit_core.admin.LockInfo` says, with the
    holder split into host and pid where the store records them (``host pid N``)."""

    key: str
    owner_hint: str
    token: int | None
    ttl_remaining: float | None
    host: str | None
    pid: int | None
    age: float | None = None  #: seconds held, where the store keeps the start

    @classmethod
    def of(cls, info: LockInfo) -> LockRow:
        """The row of ``info``."""
        host: str | None = info.holder
        pid: int | None = None
        match = _HOLDER.match(info.holder or "")
        if match:
            host = match["host"] + match["rest"]
            pid = int(match["pid"])
        return cls(info.key, info.owner_hint, info.token, info.ttl_remaining, host, pid, info.age())

    @property
    def time_left(self) -> str:
        """The lease's remaining time, e.g. ``12.3 s``; ``-`` if the store does not say."""
        return "-" if self.ttl_remaining is None else f"{self.ttl_remaining:.1f} s"

    @property
    def held_for(self) -> str:
        """How long it has been held, e.g. ``4.2 s`` or ``12m 05s``; ``-`` if unknown."""
        return age_text(self.age)


@admin.register(Lock)
class LockAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """The held locks in the store, not rows: a list and a release confirmation."""

    list_template = "lockkit_django/admin/lock_list.html"
    release_template = "lockkit_django/admin/lock_release.html"

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _has_perm(request, "lockkit.view_lock")

    def has_release_permission(self, request: HttpRequest) -> bool:
        """May this user force-release locks? ``lockkit.release_lock``, and
        ``lockkit.view_lock`` too: the confirmation shows what the list shows."""
        return self.has_view_permission(request) and _has_perm(request, "lockkit.release_lock")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        site = self.admin_site
        return [
            path("", site.admin_view(self.list_view), name=f"{name}_changelist"),
            path("release/", site.admin_view(self.release_view), name=f"{name}_release"),
        ]

    def _list_url(self, prefix: str = "") -> str:
        url = reverse(
            f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_changelist"
        )
        return f"{url}?{urlencode({'prefix': prefix})}" if prefix else url

    def _context(self, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "title": title,
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "has_view_permission": True,
            "can_release": self.has_release_permission(request),
            **extra,
        }

    def list_view(self, request: HttpRequest) -> HttpResponse:
        """The held locks whose key starts with ``?prefix=``, sorted by key."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        prefix = request.GET.get("prefix", "")
        kit = get_kit()
        rows: list[LockRow] = []
        error = None
        try:
            rows = [LockRow.of(info) for info in kit.admin.list(prefix)]
        except LockKitError as exc:  # NotSupported (cannot list), BackendUnavailable
            log.error("the admin page could not list locks: %s", exc)
            error = str(exc)
        context = self._context(
            request,
            "Held locks",
            rows=rows,
            prefix=prefix,
            error=error,
            store=kit.admin.backend_info().url,
            namespace=kit.namespace,
        )
        return TemplateResponse(request, self.list_template, context, status=503 if error else 200)

    def release_view(self, request: HttpRequest) -> HttpResponse:
        """GET ``?key=``: the confirmation page; POST (with CSRF): force-release the key."""
        if request.method not in ("GET", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        if not self.has_release_permission(request):
            raise PermissionDenied
        data = request.POST if request.method == "POST" else request.GET
        key, prefix = data.get("key", ""), data.get("prefix", "")
        back = HttpResponseRedirect(self._list_url(prefix))
        if not key:
            messages.error(request, "Name the lock to release: ?key=<key>.")
            return back
        kit_admin = get_kit().admin
        try:
            before = kit_admin.info(key)
            if request.method == "GET":
                return self._confirm(request, key, before, prefix) or back
            released = kit_admin.force_release(key)
        except LockKitError as exc:  # a bad key, or the store is down
            messages.error(request, f"Could not release {key!r}: {exc}")
            return back
        if not released:
            messages.info(request, f"The lock {key!r} was already free.")
            return back
        self._log_release(request, key, before)
        messages.success(request, f"Released the lock {key!r}{_detail(before)}.")
        return back

    def _confirm(
        self, request: HttpRequest, key: str, info: LockInfo | None, prefix: str
    ) -> HttpResponse | None:
        """The confirmation page for a held ``key``; None (after a message) for a free one."""
        if info is None:
            messages.info(request, f"The lock {key!r} is already free.")
            return None
        context = self._context(
            request,
            "Release this lock?",
            row=LockRow.of(info),
            prefix=prefix,
            list_url=self._list_url(prefix),
        )
        return TemplateResponse(request, self.release_template, context)

    def _log_release(self, request: HttpRequest, key: str, before: LockInfo | None) -> None:
        detail = _detail(before)
        LogEntry.objects.create(
            user_id=request.user.pk,
            content_type=ContentType.objects.get_for_model(Lock, for_concrete_model=False),
            object_id=key,
            object_repr=key[:200],
            action_flag=DELETION,
            change_message=f"Force-released{detail}.",
        )
        log.warning(
            "force-released %r from the admin by %s%s", key, request.user.get_username(), detail
        )


def _has_perm(request: HttpRequest, perm: str) -> bool:
    has_perm = getattr(request.user, "has_perm", None)
    return bool(has_perm is not None and has_perm(perm))


def _detail(before: LockInfo | None) -> str:
    if before is None:
        return ""
    token = "" if before.token is None else f", token {before.token}"
    holder = "" if before.holder is None else f", held by {before.holder}"
    return f" (owner {before.owner_hint}{token}{holder})"

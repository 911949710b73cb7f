"""The ``lockkit_django`` app: registers the system checks and re-reads ``settings.LOCKKIT``
whenever a test changes it."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core.signals import setting_changed


def _on_setting_changed(*, setting: str, **_: Any) -> None:
    from .conf import reset_state

    if setting == "LOCKKIT":
        reset_state()


class LockKitAppConfig(AppConfig):
    """``INSTALLED_APPS += ["lockkit_django"]``."""

    name = "lockkit_django"
    label = "lockkit"
    verbose_name = "lockkit"
    default = True

    def ready(self) -> None:
        from . import checks  # noqa: F401 - registers the checks

        setting_changed.connect(_on_setting_changed, dispatch_uid="lockkit_django.settings")

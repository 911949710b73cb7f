"""lockkit for Django: ``settings.LOCKKIT``, system checks, and locked views.

>>> INSTALLED_APPS = [..., "lockkit_django"]
>>> LOCKKIT = {"URL": "redis://127.0.0.1:6379/0", "NAMESPACE": "shop"}

Thin over :mod:`lockkit_core`: every lock decision is the core's.
"""

from .conf import get_kit

__all__ = ["get_kit"]

"""``lock_lost``: sent (sender: :class:`~lockkit_django.conf.LockKitState`; ``lock``,
``route``, ``error``) when a request's lock was lost while its view ran, or could not be
released. The response stands; exclusion was not certain meanwhile."""

from __future__ import annotations

from django.dispatch import Signal

__all__ = ["lock_lost"]

lock_lost = Signal()

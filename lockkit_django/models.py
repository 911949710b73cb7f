"""``Lock``: no table, only the admin page's place in the admin index and its permissions.

The locks live in the lock store, never in the database. The model is unmanaged and never
queried; ``manage.py migrate`` creates its two permissions, which staff users need for the
admin page (:mod:`lockkit_django.admin`):

- ``lockkit.view_lock``: see the held locks;
- ``lockkit.release_lock``: force-release one (with ``view_lock``: the confirmation shows
  the lock).

Django's data commands still walk every installed model: ``dumpdata`` (with or without
``--all``) reads each through its default or base manager. Both are :class:`NoRows`, whose
queries are empty without touching the database, so those commands see no rows and no
missing table.
"""

from __future__ import annotations

from django.db import models

__all__ = ["Lock", "NoRows"]


class NoRows(models.Manager["Lock"]):
    """A manager whose every query is empty and never reaches the database: ``Lock`` has no
    table to read."""

    def get_queryset(self) -> models.QuerySet[Lock]:
        return super().get_queryset().none()


class Lock(models.Model):
    """A held lock as the admin page names it; there are no rows."""

    key: models.CharField[str, str] = models.CharField(max_length=200, primary_key=True)

    objects = NoRows()

    class Meta:
        managed = False
        # dumpdata --all reads the base manager: make it the empty one too.
        base_manager_name = "objects"
        default_permissions = ("view",)
        permissions = (("release_lock", "Can force-release held locks"),)
        verbose_name = "lock"
        verbose_name_plural = "locks"

    def __str__(self) -> str:
        return str(self.key)

"""Writes the database itself refuses when they come from a lock holder that is out of date.

A lock's lease can end while its holder still works (a long GC pause, a force-release): the
next holder gets a higher fencing token. Give the model a plain field and pass the token::

    class Stock(models.Model):
        fence = models.BigIntegerField(default=0)   # tokens are 64-bit: BIGINT
        version = models.IntegerField(default=0)    # for optimistic_update

    with get_kit().lock(f"stock:{sku}") as held:
        ...
        if not fenced_update(Stock.objects.filter(sku=sku), held.token, quantity=n):
            raise RuntimeError("a newer lock holder has written this row")

Each is one ``UPDATE ... WHERE`` statement, so the check and the write are atomic in the
database whatever the isolation level.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.db import models
from django.db.models import F

from lockkit_core import ConfigError

__all__ = ["fenced_update", "optimistic_update"]

_BIG = (models.BigIntegerField, models.PositiveBigIntegerField)


def _field(queryset: models.QuerySet[Any], name: str, kinds: tuple[type, ...]) -> None:
    model = queryset.model
    try:
        field = model._meta.get_field(name)
    except FieldDoesNotExist:
        raise ConfigError(
            f"{model.__name__} has no field {name!r}; add "
            f"'{name} = models.BigIntegerField(default=0)' and a migration"
        ) from None
    if not isinstance(field, kinds):
        raise ConfigError(
            f"{model.__name__}.{name} is a {type(field).__name__}; it must be one of "
            f"{', '.join(k.__name__ for k in kinds)} (fencing tokens are 64-bit)"
        )


def _whole(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        hint = (
            " (this backend gives no fencing token, e.g. redlock: fence with another store)"
            if value is None
            else ""
        )
        raise ConfigError(f"{name} must be an int, got {value!r}{hint}")
    return value


def fenced_update(
    queryset: models.QuerySet[Any], token: int, *, fence_field: str = "fence", **fields: Any
) -> bool:
    """Set ``fields`` (and the fence to ``token``) on the rows whose fence is lower than
    ``token``; True if a row was written, False if a newer token had written it already.
    Meant for a queryset of one row, the one the lock protects."""
    token = _whole("token", token)
    _field(queryset, fence_field, _BIG)
    if fence_field in fields:
        raise ConfigError(f"{fence_field!r} is set by fenced_update itself; leave it out")
    written = queryset.filter(**{f"{fence_field}__lt": token}).update(
        **fields, **{fence_field: token}
    )
    return written > 0


def optimistic_update(
    queryset: models.QuerySet[Any], version: int, *, version_field: str = "version", **fields: Any
) -> bool:
    """Set ``fields`` and bump the version on the rows still at ``version`` (the value read
    before the change); True if written, False if someone else wrote it meanwhile."""
    version = _whole("version", version)
    _field(queryset, version_field, (models.IntegerField,))
    if version_field in fields:
        raise ConfigError(f"{version_field!r} is set by optimistic_update itself; leave it out")
    written = queryset.filter(**{version_field: version}).update(
        **fields, **{version_field: F(version_field) + 1}
    )
    return written > 0

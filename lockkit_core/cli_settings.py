"""``CliSettings``: the store a ``lockkit`` command works on; opening it; reporting errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import click

from .config import UNSET
from .errors import LockKitError
from .kit import LockKit
from .terminal import printable

__all__ = ["CliSettings", "lockkit_errors", "open_kit"]


@dataclass(frozen=True)
class CliSettings:
    """Where the admin verbs look: the store's URL and namespace (``ctx.obj``), and
    ``command``, the words that run this command group on the same store (for hints)."""

    url: str
    namespace: str | None
    command: str = "lockkit"


@contextmanager
def lockkit_errors() -> Iterator[None]:
    """Turn lockkit's errors into a one-line ``Error: ...`` and exit status 1."""
    try:
        yield
    except LockKitError as exc:
        raise click.ClickException(printable(str(exc))) from exc


@contextmanager
def open_kit(ctx: click.Context) -> Iterator[LockKit]:
    """A kit on the command's store, closed on leaving; errors as :func:`lockkit_errors`."""
    settings: CliSettings = ctx.ensure_object(CliSettings)
    with lockkit_errors():
        kit = LockKit(
            settings.url,
            namespace=UNSET if settings.namespace is None else settings.namespace,
        )
        try:
            yield kit
        finally:
            kit.close()

"""``flask lockkit list|info KEY|release KEY --force``: the core admin layer on the app's kit.

Registered through the ``flask.commands`` entry point, so every app that set up
:class:`~lockkit_flask.LockKit` has it; output is the same as the ``lockkit`` command's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click
from flask import current_app
from flask.cli import AppGroup

from lockkit_core import Admin, LockKitError
from lockkit_core.cli import (
    LOCK_HEADERS,
    emit_json,
    free_line,
    lock_rows,
    no_locks_line,
    refusal,
    released_line,
    render_table,
)
from lockkit_core.terminal import printable

from .extension import state_of

__all__ = ["lockkit_group"]

lockkit_group = AppGroup("lockkit", help="Inspect and force-release this app's locks.")


@contextmanager
def _admin() -> Iterator[Admin]:
    """The app's admin layer; lockkit's errors become one ``Error: ...`` line, status 1."""
    try:
        yield state_of(current_app).kit.admin
    except LockKitError as exc:
        raise click.ClickException(printable(str(exc))) from exc


@lockkit_group.command("list")
@click.argument("prefix", default="")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_command(prefix: str, as_json: bool) -> None:
    """List held locks whose key starts with PREFIX."""
    with _admin() as admin:
        infos = admin.list(prefix)
    if as_json:
        emit_json([info.as_dict() for info in infos])
    elif not infos:
        click.echo(no_locks_line(prefix))
    else:
        click.echo(render_table(LOCK_HEADERS, lock_rows(infos)))


@lockkit_group.command("info")
@click.argument("key")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (null for a free key).")
def info_command(key: str, as_json: bool) -> None:
    """Show who holds KEY, or that it is free."""
    with _admin() as admin:
        info = admin.info(key)
    if as_json:
        emit_json(None if info is None else info.as_dict())
    elif info is None:
        click.echo(free_line(key))
    else:
        click.echo(render_table(LOCK_HEADERS, lock_rows([info])))


@lockkit_group.command("release")
@click.argument("key")
@click.option("--force", is_flag=True, help="Really free the key, whoever holds it.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a sentence.")
def release_command(key: str, force: bool, as_json: bool) -> None:
    """Free KEY whoever holds it (needs --force). The holder is not told until it next
    renews or releases, so only writes checked against the fencing token are safe from it."""
    if not force:
        raise click.ClickException(refusal(key, "flask lockkit"))
    with _admin() as admin:
        before = admin.info(key)
        released = admin.force_release(key)
    if as_json:
        previous = None if before is None or not released else before.as_dict()
        emit_json({"key": key, "released": released, "previous": previous})
    else:
        click.echo(released_line(key, before, released))

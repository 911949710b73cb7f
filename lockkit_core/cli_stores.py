"""The store commands of ``lockkit``: ``backends`` (schemes, grades, capabilities), ``migrate``."""

from __future__ import annotations

import importlib.util
from typing import Any

import click

from .backends.base import capability_names
from .backends.sql.schema import LeaseTable
from .cli_output import emit_json, render_table
from .cli_settings import CliSettings, lockkit_errors
from .errors import LockKitError
from .registry import backend_class, create_backend, known_schemes
from .url import parse_url

__all__ = ["backends_command", "migrate_command"]


def _scheme_rows(scheme: str, current: str | None) -> list[dict[str, Any]]:
    """The scheme's row, then one per variant its options pick (``?mode=advisory``)."""
    row = _scheme_row(scheme, current)
    rows = [row]
    try:
        variants = backend_class(scheme).variants() if row["installed"] else {}
    except Exception as exc:  # a broken plug-in must not hide the others
        row["note"] = f"cannot load its variants: {exc}"
        variants = {}
    for query, cls in variants.items():
        rows.append(
            {
                **row,
                "scheme": scheme,
                "variant": query,
                "current": False,
                "grade": str(cls.grade),
                "capabilities": capability_names(cls.capabilities),
            }
        )
    return rows


def _scheme_row(scheme: str, current: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "scheme": scheme,
        "variant": "",  # or the URL query that picks another kind of lock (?mode=advisory)
        "current": scheme == current,
        "grade": None,
        "capabilities": [],
        "installed": False,
        "note": "",
    }
    try:
        cls = backend_class(scheme)
    except Exception as exc:  # a broken plug-in must not hide the others
        row["note"] = f"cannot load: {exc}"
        return row
    row["grade"] = str(cls.grade)
    row["capabilities"] = capability_names(cls.capabilities)
    try:
        installed = cls.requires is None or importlib.util.find_spec(cls.requires) is not None
    except (ImportError, ValueError):
        installed = False
    row["installed"] = installed
    if not installed:
        row["note"] = f'pip install "lockkit[{cls.extra or scheme}]"'
    return row


@click.command(name="backends", short_help="Show backend schemes, safety grades, capabilities.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def backends_command(ctx: click.Context, as_json: bool) -> None:
    """Show every backend scheme with its safety grade and capabilities."""
    settings: CliSettings = ctx.ensure_object(CliSettings)
    try:
        current: str | None = parse_url(settings.url).scheme
    except LockKitError:
        current = None
    with lockkit_errors():
        rows = [row for scheme in known_schemes() for row in _scheme_rows(scheme, current)]
    if as_json:
        emit_json(rows)
        return
    click.echo(
        render_table(
            ("", "SCHEME", "GRADE", "CAPABILITIES", "NOTE"),
            [
                [
                    "*" if row["current"] else "",
                    row["scheme"] + "://" + row["variant"],
                    row["grade"] or "-",
                    ", ".join(row["capabilities"]) or "-",
                    row["note"],
                ]
                for row in rows
            ],
        )
    )
    if current in {row["scheme"] for row in rows}:
        click.echo(f"\n* the backend that --url / LOCKKIT_URL selects ({current}://)")


@click.command(name="migrate", short_help="Create a database store's lease table.")
@click.argument("url", required=False)
@click.option("--sql", "print_sql", is_flag=True, help="Print the DDL instead of running it.")
@click.pass_context
def migrate_command(ctx: click.Context, url: str | None, print_sql: bool) -> None:
    """Create the lease table of the database store at URL (default: --url / LOCKKIT_URL).

    lockkit creates it on first use; run this as a user that may run DDL when the
    application's user may not, or print the statements with --sql for a DBA to run.
    """
    settings: CliSettings = ctx.ensure_object(CliSettings)
    target = settings.url if url is None else url
    with lockkit_errors():
        backend = create_backend(target)
        try:
            if not isinstance(backend, LeaseTable):
                raise click.ClickException(
                    f"{parse_url(target).scheme}:// keeps no table: nothing to migrate "
                    "(migrate is for postgresql://, mysql:// and sqlite://)"
                )
            if print_sql:
                click.echo("".join(statement + ";\n" for statement in backend.ddl()), nl=False)
                return
            backend.create_schema()
        finally:
            backend.close()
    click.echo(f"the lease table {backend.table} is ready at {backend.describe()}")

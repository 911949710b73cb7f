"""The ``lockkit`` command: list, inspect and force-release locks, show backends, run the demo.

Every lock operation goes through :class:`~lockkit_core.admin.Admin`, so the command works the
same on every backend. Errors that lockkit raises are shown as one ``Error: ...`` line with
exit status 1, never as a traceback. The commands live in :mod:`~lockkit_core.cli_locks`,
:mod:`~lockkit_core.cli_stores` and :mod:`lockkit_core.doctor`; what they print, shared with
the framework commands, in :mod:`~lockkit_core.cli_output`.
"""

from __future__ import annotations

import click

from .admin import age_text
from .cli_locks import info_command, list_command, release_command, top_command
from .cli_output import (
    LOCK_HEADERS,
    emit_json,
    free_line,
    lock_rows,
    no_locks_line,
    refusal,
    released_line,
    render_table,
)
from .cli_settings import CliSettings, lockkit_errors
from .cli_stores import backends_command, migrate_command
from .config import default_url
from .doctor.command import doctor_command

__all__ = [
    "LOCK_HEADERS",
    "CliSettings",
    "age_text",
    "cli",
    "emit_json",
    "free_line",
    "info_command",
    "list_command",
    "lock_rows",
    "main",
    "no_locks_line",
    "refusal",
    "release_command",
    "released_line",
    "render_table",
]


@click.group(name="lockkit", context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url",
    envvar="LOCKKIT_URL",
    default=default_url,
    show_default="file:// under the system temp dir",
    help="Backend URL, e.g. file:///var/lock/myapp or redis://127.0.0.1:6379/0.",
)
@click.option(
    "--namespace",
    envvar="LOCKKIT_NAMESPACE",
    default=None,
    help="Namespace the keys live under (as in LockKit(namespace=...)).",
)
@click.version_option(package_name="lockkit", prog_name="lockkit")
@click.pass_context
def cli(ctx: click.Context, url: str, namespace: str | None) -> None:
    """Inspect and manage lockkit locks.

    The backend comes from --url, else LOCKKIT_URL, else file:// under the system temp dir.
    """
    ctx.obj = CliSettings(url=url, namespace=namespace)


@cli.command(name="demo", short_help="Race workers sending SMS, without and with a lock.")
@click.option(
    "--workers",
    default=4,
    show_default=True,
    type=click.IntRange(2, 64),
    help="Worker processes racing to send the SMS.",
)
@click.option(
    "--orders",
    default=200,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Paid orders, each needing exactly one SMS.",
)
@click.option(
    "--latency",
    default=2.0,
    show_default=True,
    type=click.FloatRange(0.0, 1000.0),
    help="Simulated SMS gateway latency, in milliseconds.",
)
@click.pass_context
def demo_command(ctx: click.Context, workers: int, orders: int, latency: float) -> None:
    """Race worker processes to send one "payment received" SMS per order, with and without
    a lock, and count the SMS each order got."""
    from .demo import run_demo

    settings: CliSettings = ctx.ensure_object(CliSettings)
    with lockkit_errors():
        ok = run_demo(
            url=settings.url,
            namespace=settings.namespace,
            workers=workers,
            orders=orders,
            latency=latency / 1000.0,
        )
    if not ok:
        ctx.exit(1)


for command in (
    list_command,
    info_command,
    release_command,
    top_command,
    backends_command,
    migrate_command,
    doctor_command,
):
    cli.add_command(command)


def main() -> None:
    """Entry point of the ``lockkit`` console script."""
    cli(prog_name="lockkit")


if __name__ == "__main__":
    main()

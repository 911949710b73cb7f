"""``celery -A proj lockkit list|info|release|check|clear-stale`` on the app's lock store.

Installed through the ``celery.commands`` entry point; the store and namespace are the app's
(``app.conf.lockkit_url`` ...), so keys are shown as the tasks see them.
"""

from __future__ import annotations

import sys

import click
from celery import Celery

from lockkit_core.cli import CliSettings, info_command, list_command, release_command
from lockkit_core.terminal import printable

from .settings import store_config
from .stale import clear_stale_locks
from .startup import check_app

__all__ = ["lockkit"]


@click.group(name="lockkit")
@click.pass_context
def lockkit(ctx: click.Context) -> None:
    """Inspect and release the locks of this app's tasks."""
    app = ctx.obj.app
    config = store_config(app)
    # Hints name a command that reaches this app's store, never the core's default one.
    name = _app_option(ctx.find_root().params.get("app"), app)
    command = f"celery -A {name} lockkit" if name else "celery lockkit"
    ctx.obj = CliSettings(url=config.url, namespace=config.namespace, command=command)
    ctx.meta["lockkit_app"] = app


def _app_option(given: object, app: Celery) -> str | None:
    """What to pass to ``-A`` for ``app``: the text the user gave (Celery 5.4 and newer keep
    it), else the app's main module name. Celery 5.3 converts ``-A`` to the app object
    itself, whose repr (``<Celery proj at 0x...>``) is no ``-A`` value; None if the app
    cannot be named."""
    if isinstance(given, str) and given:
        return given
    main: str | None = app.main
    if main and main != "__main__":
        return main
    # No main name: the module that holds the app, as ``-A module:attribute``.
    for name, module in list(sys.modules.items()):
        found = getattr(module, "__dict__", {})  # not getattr: no module __getattr__ runs
        for attribute in ("app", "celery"):
            if found.get(attribute) is app and name != "__main__":
                return f"{name}:{attribute}"
    return None


@lockkit.command(name="check")
@click.pass_context
def check_command(ctx: click.Context) -> None:
    """Print the startup check's warnings; exit status 1 if there are any."""
    problems = check_app(ctx.meta["lockkit_app"])
    for problem in problems:
        click.echo(f"warning: {printable(problem)}")
    if problems:
        ctx.exit(1)
    click.echo("no problems found")


@lockkit.command(name="clear-stale")
@click.pass_context
def clear_stale_command(ctx: click.Context) -> None:
    """Free the run locks that dead processes of this host left (what a worker does at start
    with lockkit_clear_stale_on_start), and print each key freed."""
    for key in clear_stale_locks(ctx.meta["lockkit_app"]):
        click.echo(f"cleared {printable(key)}")


lockkit.add_command(list_command)
lockkit.add_command(info_command)
lockkit.add_command(release_command)

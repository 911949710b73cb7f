"""``celery -A proj lockkit list|info|release``: the core's admin commands on the app's store.

Installed through the ``celery.commands`` entry point; the store and namespace are the app's
(``app.conf.lockkit_url`` ...), so keys are shown as the tasks see them.
"""

from __future__ import annotations

import click

from lockkit_core.cli import _Settings, info_command, list_command, release_command

from .settings import store_config
from .startup import check_app

__all__ = ["lockkit"]


@click.group(name="lockkit")
@click.pass_context
def lockkit(ctx: click.Context) -> None:
    """Inspect and release the locks of this app's tasks."""
    app = ctx.obj.app
    config = store_config(app)
    ctx.obj = _Settings(url=config.url, namespace=config.namespace)
    ctx.meta["lockkit_app"] = app


@lockkit.command(name="check")
@click.pass_context
def check_command(ctx: click.Context) -> None:
    """Print the startup check's warnings; exit status 1 if there are any."""
    problems = check_app(ctx.meta["lockkit_app"])
    for problem in problems:
        click.echo(f"warning: {problem}")
    if problems:
        ctx.exit(1)
    click.echo("no problems found")


lockkit.add_command(list_command)
lockkit.add_command(info_command)
lockkit.add_command(release_command)

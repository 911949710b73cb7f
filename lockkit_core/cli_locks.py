"""The lock commands of ``lockkit``: ``list``, ``info``, ``release --force`` and ``top``."""

from __future__ import annotations

import importlib.util

import click

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
from .cli_settings import CliSettings, lockkit_errors, open_kit

__all__ = ["info_command", "list_command", "release_command", "top_command"]


@click.command(name="list")
@click.argument("prefix", default="")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def list_command(ctx: click.Context, prefix: str, as_json: bool) -> None:
    """List held locks whose key starts with PREFIX."""
    with open_kit(ctx) as kit:
        infos = kit.admin.list(prefix)
    if as_json:
        emit_json([info.as_dict() for info in infos])
    elif not infos:
        click.echo(no_locks_line(prefix))
    else:
        click.echo(render_table(LOCK_HEADERS, lock_rows(infos)))


@click.command(name="info")
@click.argument("key")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (null for a free key).")
@click.pass_context
def info_command(ctx: click.Context, key: str, as_json: bool) -> None:
    """Show who holds KEY, or that it is free."""
    with open_kit(ctx) as kit:
        info = kit.admin.info(key)
    if as_json:
        emit_json(None if info is None else info.as_dict())
    elif info is None:
        click.echo(free_line(key))
    else:
        click.echo(render_table(LOCK_HEADERS, lock_rows([info])))


@click.command(name="release")
@click.argument("key")
@click.option("--force", is_flag=True, help="Really free the key, whoever holds it.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a sentence.")
@click.pass_context
def release_command(ctx: click.Context, key: str, force: bool, as_json: bool) -> None:
    """Free KEY whoever holds it (needs --force).

    The holder is not told until it next renews, extends, releases or checks its lock, so it
    may go on working for a while as if it still held it: only writes checked against the
    fencing token are safe from it.
    """
    settings: CliSettings = ctx.ensure_object(CliSettings)
    if not force:
        raise click.ClickException(refusal(key, settings.command))
    with open_kit(ctx) as kit:
        before = kit.admin.info(key)
        released = kit.admin.force_release(key)
    if as_json:
        emit_json(
            {
                "key": key,
                "released": released,
                "previous": None if before is None or not released else before.as_dict(),
            }
        )
    else:
        click.echo(released_line(key, before, released))


@click.command(name="top", short_help="A live view of the held locks (q quits).")
@click.argument("url", required=False)
@click.option("--prefix", default="", help="Only keys that start with PREFIX.")
@click.option(
    "--interval", default=1.0, show_default=True, type=click.FloatRange(min=0.1),
    help="Seconds between refreshes.",
)  # fmt: skip
@click.pass_context
def top_command(ctx: click.Context, url: str | None, prefix: str, interval: float) -> None:
    """Watch the locks held on URL (default: --url) refresh every second: key, holder, owner
    hint, token, time left, age and waiters. q or Ctrl-C quits."""
    if importlib.util.find_spec("rich") is None:
        raise click.ClickException('lockkit top needs rich: pip install "lockkit[top]"')
    from .top import run_top

    settings: CliSettings = ctx.ensure_object(CliSettings)
    if url is not None:
        ctx.obj = CliSettings(url=url, namespace=settings.namespace, command=settings.command)
    with open_kit(ctx) as kit, lockkit_errors():
        run_top(kit, prefix, interval)

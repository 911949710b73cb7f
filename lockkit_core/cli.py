"""The ``lockkit`` command: list, inspect and force-release locks, show backends, run the demo.

Every lock operation goes through :class:`~lockkit_core.admin.Admin`, so the command works the
same on every backend. Errors that lockkit raises are shown as one ``Error: ...`` line with
exit status 1, never as a traceback.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import click

from .admin import LockInfo, age_text
from .backends.base import capability_names
from .backends.sql.schema import LeaseTable
from .config import UNSET, default_url
from .doctor.command import doctor_command
from .errors import LockKitError
from .kit import LockKit
from .registry import backend_class, create_backend, known_schemes
from .terminal import printable
from .url import parse_url

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


@dataclass(frozen=True)
class CliSettings:
    """Where the admin verbs look: the store's URL and namespace (``ctx.obj``), and
    ``command``, the words that run this command group on the same store (for hints)."""

    url: str
    namespace: str | None
    command: str = "lockkit"


@contextmanager
def _lockkit_errors() -> Iterator[None]:
    """Turn lockkit's errors into a one-line ``Error: ...`` and exit status 1."""
    try:
        yield
    except LockKitError as exc:
        raise click.ClickException(printable(str(exc))) from exc


@contextmanager
def _open_kit(ctx: click.Context) -> Iterator[LockKit]:
    settings: CliSettings = ctx.ensure_object(CliSettings)
    with _lockkit_errors():
        kit = LockKit(
            settings.url,
            namespace=UNSET if settings.namespace is None else settings.namespace,
        )
        try:
            yield kit
        finally:
            kit.close()


def emit_json(value: Any) -> None:
    """Print ``value`` as indented JSON with sorted keys (the ``--json`` output)."""
    click.echo(json.dumps(value, indent=2, sort_keys=True))


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; the last column is not padded."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in [list(headers), *rows]:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


LOCK_HEADERS = ("KEY", "TOKEN", "TTL LEFT", "AGE", "HOLDER", "OWNER HINT")


def lock_rows(infos: Sequence[LockInfo]) -> list[list[str]]:
    """One table row per lock, in :data:`LOCK_HEADERS` order; the framework commands share it."""
    now = time.time()
    return [
        [
            printable(info.key),
            "-" if info.token is None else str(info.token),
            _seconds(info.ttl_remaining),
            age_text(info.age(now)),
            printable(info.holder or "-"),
            printable(info.owner_hint),
        ]
        for info in infos
    ]


# The sentences every framework's command prints (keys escaped for the terminal).


def no_locks_line(prefix: str) -> str:
    """What ``list`` prints when no lock is held under ``prefix``."""
    return "no locks held" + (f" under {printable(repr(prefix))}" if prefix else "")


def free_line(key: str) -> str:
    """What ``info`` prints for a free key."""
    return f"{printable(key)} is free"


def released_line(key: str, before: LockInfo | None, released: bool) -> str:
    """What ``release --force`` prints: whether ``key`` was freed, and whose lock it was."""
    shown = printable(key)
    if not released:
        return f"{shown} was already free"
    if before is None:
        return f"released {shown}"
    token = "" if before.token is None else f", token {before.token}"
    return f"released {shown} (owner {printable(before.owner_hint)}{token})"


def refusal(key: str, command: str) -> str:
    """Why ``release`` without ``--force`` did nothing, and the ``command`` line that would."""
    return printable(
        f"refusing to release {key!r} without --force: its holder is not told and may go on "
        f"as if it still held the lock. Run '{command} release {shlex.quote(key)} --force' if "
        "you mean it."
    )


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


@cli.command(name="list")
@click.argument("prefix", default="")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def list_command(ctx: click.Context, prefix: str, as_json: bool) -> None:
    """List held locks whose key starts with PREFIX."""
    with _open_kit(ctx) as kit:
        infos = kit.admin.list(prefix)
    if as_json:
        emit_json([info.as_dict() for info in infos])
    elif not infos:
        click.echo(no_locks_line(prefix))
    else:
        click.echo(render_table(LOCK_HEADERS, lock_rows(infos)))


@cli.command(name="info")
@click.argument("key")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (null for a free key).")
@click.pass_context
def info_command(ctx: click.Context, key: str, as_json: bool) -> None:
    """Show who holds KEY, or that it is free."""
    with _open_kit(ctx) as kit:
        info = kit.admin.info(key)
    if as_json:
        emit_json(None if info is None else info.as_dict())
    elif info is None:
        click.echo(free_line(key))
    else:
        click.echo(render_table(LOCK_HEADERS, lock_rows([info])))


@cli.command(name="release")
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
    with _open_kit(ctx) as kit:
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


@cli.command(name="top", short_help="A live view of the held locks (q quits).")
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
    with _open_kit(ctx) as kit, _lockkit_errors():
        run_top(kit, prefix, interval)


@cli.command(name="backends", short_help="Show backend schemes, safety grades, capabilities.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def backends_command(ctx: click.Context, as_json: bool) -> None:
    """Show every backend scheme with its safety grade and capabilities."""
    settings: CliSettings = ctx.ensure_object(CliSettings)
    try:
        current: str | None = parse_url(settings.url).scheme
    except LockKitError:
        current = None
    with _lockkit_errors():
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


@cli.command(name="migrate", short_help="Create a database store's lease table.")
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
    with _lockkit_errors():
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
    with _lockkit_errors():
        ok = run_demo(
            url=settings.url,
            namespace=settings.namespace,
            workers=workers,
            orders=orders,
            latency=latency / 1000.0,
        )
    if not ok:
        ctx.exit(1)


cli.add_command(doctor_command)


def main() -> None:
    """Entry point of the ``lockkit`` console script."""
    cli(prog_name="lockkit")


if __name__ == "__main__":
    main()

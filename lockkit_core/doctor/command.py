"""``lockkit doctor [URL] [--ttl S] [--json]``: the report of :func:`~.run.diagnose` as a
table (or JSON), exit status 1 when something is unsafe, 2 for a bad URL or option."""

from __future__ import annotations

import click

from ..cli_output import emit_json, render_table
from ..cli_settings import CliSettings
from ..config import DEFAULT_TTL
from ..errors import ConfigError
from ..terminal import printable
from .findings import Level, Report
from .run import diagnose

__all__ = ["doctor_command", "render_report"]

_MARK = {Level.OK: "ok", Level.WARN: "WARN", Level.UNSAFE: "UNSAFE"}


def render_report(report: Report) -> str:
    """The findings as a table, each fix under it, and a last line with the verdict."""
    rows = [
        [_MARK[f.level], f.check, printable(f.where or "-"), printable(f.message)]
        for f in report.findings
    ]
    lines = [f"lockkit doctor: {printable(report.url)} (ttl {report.ttl:g} s)", ""]
    lines.append(render_table(("LEVEL", "CHECK", "WHERE", "FINDING"), rows))
    fixes = [f for f in report.findings if f.fix and f.level is not Level.OK]
    if fixes:
        lines.append("")
        lines.append("What to change:")
        for f in fixes:
            where = f" ({printable(f.where)})" if f.where else ""
            lines.append(f"- {f.check}{where}: {printable(f.fix)}")
    verdict = {
        Level.OK: "nothing to change",
        Level.WARN: "usable, with the warnings above",
        Level.UNSAFE: "UNSAFE for locks: fix the findings above",
    }[report.level]
    lines += ["", f"verdict: {verdict}"]
    return "\n".join(lines)


@click.command(name="doctor", short_help="Check a live store's settings for locks.")
@click.argument("url", required=False)
@click.option(
    "--ttl",
    type=float,
    default=DEFAULT_TTL,
    show_default=True,
    help="The lock ttl (seconds) to judge round trip, clock and session timeout against.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def doctor_command(ctx: click.Context, url: str | None, ttl: float, as_json: bool) -> None:
    """Check the store URL (else --url / LOCKKIT_URL) for settings that make locks unsafe or
    slow, and say what to change. Exit status 1 when something is unsafe."""
    settings: CliSettings = ctx.ensure_object(CliSettings)
    try:
        report = diagnose(url or settings.url, ttl=ttl)
    except ConfigError as exc:
        raise click.UsageError(printable(str(exc))) from exc
    if as_json:
        emit_json(report.as_dict())
    else:
        click.echo(render_report(report))
    ctx.exit(report.exit_code)

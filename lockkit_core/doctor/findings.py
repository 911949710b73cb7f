"""What the doctor reports: one :class:`Finding` per check, gathered in a :class:`Report`."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Finding", "Level", "Report", "unreachable"]


class Level(str, enum.Enum):
    """How much a finding matters: ``unsafe`` makes ``lockkit doctor`` exit 1. ``str(level)``
    is its value (no ``StrEnum``: lockkit runs on Python 3.10)."""

    OK = "ok"
    WARN = "warn"
    UNSAFE = "unsafe"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Finding:
    """One check's verdict: ``check`` names it (``maxmemory-policy``), ``where`` the server
    it ran on (one node of several), ``message`` what was seen, ``fix`` what to change
    (empty when nothing needs to)."""

    level: Level
    check: str
    message: str
    fix: str = ""
    where: str = ""

    def as_dict(self) -> dict[str, str]:
        return {
            "level": str(self.level),
            "check": self.check,
            "where": self.where,
            "message": self.message,
            "fix": self.fix,
        }


def unreachable(error: object, where: str = "", *, servers: bool = False) -> Finding:
    """The store (``servers``: the ensemble) could not be asked: nothing else can be checked,
    and a store nobody can check is not called safe."""
    fix = f"start the {'servers' if servers else 'server'}, or fix the URL and its options"
    return Finding(Level.UNSAFE, "reachable", f"cannot check: {error}", fix, where)


@dataclass(frozen=True)
class Report:
    """Every finding for one store URL (shown redacted) checked against one ``ttl``."""

    url: str
    ttl: float
    findings: Sequence[Finding] = field(default_factory=list)

    @property
    def level(self) -> Level:
        """The worst level found (``ok`` for no findings)."""
        levels = {finding.level for finding in self.findings}
        for level in (Level.UNSAFE, Level.WARN):
            if level in levels:
                return level
        return Level.OK

    @property
    def exit_code(self) -> int:
        """1 when something is unsafe, else 0 (warnings are for people, not for scripts)."""
        return 1 if self.level is Level.UNSAFE else 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "ttl": self.ttl,
            "level": str(self.level),
            "findings": [finding.as_dict() for finding in self.findings],
        }

"""``LOCKKIT["TASKS"]``: the task lock defaults of a Django project, checked by the core's
rules (:mod:`lockkit_core.dedupe.options`). No import of the tasks framework, so
``settings.LOCKKIT`` (and its system check) can validate the ``TASKS`` mapping anywhere.

``"TASKS": {"TTL": 30, "ON_DUPLICATE": "skip", "ONCE": None, "WAIT": 0, "ENQUEUE_LOCK": True,
"ENQUEUE_TTL": 3600, "REMEMBER": 86400, "ENABLED": True}``; the same names in lower case are
the decorator's keywords.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lockkit_core import ConfigError
from lockkit_core.dedupe import DEFAULTS, check_option

__all__ = ["parse_tasks"]


def parse_tasks(raw: object) -> dict[str, Any]:
    """Validate ``LOCKKIT["TASKS"]``: a dict of the options above, keys in any case."""
    if not isinstance(raw, Mapping):
        raise ConfigError(
            "LOCKKIT['TASKS'] must be a dict such as {'TTL': 30, 'ONCE': 3600}, "
            f"got {type(raw).__name__}"
        )
    names = {str(key): str(key).lower() for key in raw}
    unknown = sorted(key for key, name in names.items() if name not in DEFAULTS)
    if unknown:
        raise ConfigError(
            f"unknown setting LOCKKIT['TASKS'][{unknown[0]!r}]; known: "
            f"{', '.join(n.upper() for n in DEFAULTS)}"
        )
    return {
        names[str(key)]: check_option(names[str(key)], value, f"LOCKKIT['TASKS'][{key!r}]")
        for key, value in raw.items()
    }

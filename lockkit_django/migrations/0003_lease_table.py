"""The lease table of ``django://ALIAS``, made by ``manage.py migrate`` on that alias.

When ``LOCKKIT["URL"]`` is ``django://ALIAS``, migrating the lockkit app on ``ALIAS`` creates
the table and its fence counter with Django's own connection, so the user that runs
migrations makes it and the application's user needs no DDL rights. On any other store or
alias this does nothing. Unapplying leaves the table: dropping it would free held locks.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import migrations


def create_lease_table(apps: Any, schema_editor: Any) -> None:
    config = getattr(settings, "LOCKKIT", None)
    if not isinstance(config, dict):
        return
    url = config.get("URL")
    if not isinstance(url, str) or not url.startswith("django://"):
        return
    if urlsplit(url).netloc != schema_editor.connection.alias:
        return
    from lockkit_core.backends.sql import LeaseTable
    from lockkit_core.registry import create_backend

    backend = create_backend(url, config.get("OPTIONS") or {})
    try:
        assert isinstance(backend, LeaseTable)  # django:// always keeps one
        for statement in backend.ddl():
            schema_editor.execute(statement, params=None)
    finally:
        backend.close()


class Migration(migrations.Migration):
    dependencies = [("lockkit", "0002_alter_lock_options")]

    operations = [migrations.RunPython(create_lease_table, migrations.RunPython.noop)]

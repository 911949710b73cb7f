"""``flask lockkit ...`` through the real ``flask`` command and its entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lockkit_core import LockKit as CoreKit
from lockkit_core.backends.base import owner_hint

SAMPLE = Path(__file__).resolve().parent.parent / "sample_projects" / "flask_tickets"
FLASK = Path(sys.executable).with_name("flask")


def flask(
    tmp_path: Path, *args: str, app: str = "app:create_app"
) -> subprocess.CompletedProcess[str]:
    env = {
        "TICKETS_DATA_DIR": str(tmp_path),
        "TICKETS_LOCKKIT_URL": f"file://{tmp_path}/locks",
        "PATH": str(FLASK.parent),
    }
    return subprocess.run(
        [str(FLASK), "--app", app, "lockkit", *args],
        check=False,
        cwd=SAMPLE if app.startswith("app:") else tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_list_info_and_release_act_on_the_apps_store_and_namespace(tmp_path: Path) -> None:
    with CoreKit(f"file://{tmp_path}/locks", namespace="tickets") as kit:
        lock = kit.lock("book_seat:event:gala")
        lock.acquire()
        listed = flask(tmp_path, "list")
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.splitlines()[0].split() == [
            "KEY",
            "TOKEN",
            "TTL",
            "LEFT",
            "AGE",
            "HOLDER",
            "OWNER",
            "HINT",
        ]
        assert listed.stdout.splitlines()[1].startswith("book_seat:event:gala ")
        info = flask(tmp_path, "info", "book_seat:event:gala", "--json")
        assert json.loads(info.stdout)["owner_hint"] == owner_hint(lock.owner)  # type: ignore[index]
        refused = flask(tmp_path, "release", "book_seat:event:gala")
        assert refused.returncode == 1
        assert "without --force" in refused.stderr
        assert "flask lockkit release book_seat:event:gala --force" in refused.stderr
        released = flask(tmp_path, "release", "book_seat:event:gala", "--force")
        assert released.returncode == 0, released.stderr
        assert released.stdout.startswith(
            f"released book_seat:event:gala (owner {owner_hint(lock.owner)}"
        )  # type: ignore[index]
        assert kit.admin.info("book_seat:event:gala") is None
        assert flask(tmp_path, "list").stdout.strip() == "no locks held"
        assert (
            flask(tmp_path, "release", "gone", "--force").stdout.strip() == "gone was already free"
        )


def test_an_app_without_the_extension_gets_one_clear_error_line(tmp_path: Path) -> None:
    (tmp_path / "bare.py").write_text("from flask import Flask\napp = Flask('bare')\n")
    result = flask(tmp_path, "list", app="bare:app")
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("Error: lockkit is not set up on the Flask app 'bare'")
    )
    assert "Traceback" not in result.stderr

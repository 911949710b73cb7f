"""``manage.py lockkit``: admin verbs in-process, and ``run`` as a cron singleton across
real processes sharing a file:// store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from lockkit_core import LockKit, LockNotOwned

TESTS = Path(__file__).resolve().parent


def manage(*args: str, url: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(TESTS),
        "DJANGO_SETTINGS_MODULE": "djproject.settings",
        "DJPROJECT_LOCKKIT_URL": url,
    }
    return subprocess.run(
        [sys.executable, "-m", "django", "lockkit", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=check,
    )


def out(*args: str) -> str:
    stdout = StringIO()
    call_command("lockkit", *args, stdout=stdout)
    return stdout.getvalue()


def test_list_info_release() -> None:
    with override_settings(LOCKKIT={"URL": "memory://cmd", "NAMESPACE": "shop"}):
        from lockkit_django import get_kit

        assert out("list") == "no locks held\n"
        assert out("info", "order:1") == "order:1 is free\n"
        lock = get_kit().lock("order:1")
        assert lock.acquire()
        assert "order:1" in out("list", "order:")
        info = json.loads(out("info", "order:1", "--json"))
        assert info["key"] == "order:1"
        assert info["token"] == lock.token
        with pytest.raises(CommandError, match="--force"):
            out("release", "order:1")
        assert out("release", "order:1", "--force").startswith("released order:1")
        assert get_kit().admin.info("order:1") is None
        with pytest.raises(LockNotOwned):
            lock.release()  # the holder learns it lost the lock
        assert "already free" in out("release", "order:1", "--force")


def test_check_names_the_store() -> None:
    with override_settings(LOCKKIT={"URL": "memory://cmd"}):
        text = out("check")
    assert "memory://cmd" in text
    assert "the store answers" in text


def test_run_needs_a_command() -> None:
    with pytest.raises(CommandError, match="name the command"):
        out("run")


def test_run_is_a_singleton_across_processes_and_keeps_the_exit_code(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/locks"
    log = tmp_path / "runs.log"
    go = tmp_path / "go"  # the first run holds its lock until the second has been turned away
    job = ["run", "--", "sleepy", "--log", str(log), "--until", str(go)]
    first = subprocess.Popen(
        [sys.executable, "-m", "django", "lockkit", *job],
        env={
            **os.environ,
            "PYTHONPATH": str(TESTS),
            "DJANGO_SETTINGS_MODULE": "djproject.settings",
            "DJPROJECT_LOCKKIT_URL": url,
        },
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not (log.exists() and "start" in log.read_text()):
        assert time.monotonic() < deadline, "the first run never started"
        time.sleep(0.05)
    second = manage(*job, url=url)
    assert second.returncode == 75, second.stderr
    assert "not run" in second.stderr
    go.touch()
    assert first.wait(60) == 0, first.stderr.read() if first.stderr else ""
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["start", "end"]
    with LockKit(url) as kit:
        assert kit.admin.info("command:sleepy") is None  # released after the run

    failing = manage("run", "--", "sleepy", "--log", str(log), "--exit", "3", url=url)
    assert failing.returncode == 3, failing.stderr
    waited = manage(
        "run", "--key", "nightly", "--wait", "5", "--", "sleepy", "--log", str(log), url=url
    )
    assert waited.returncode == 0, waited.stderr


def test_release_force_from_another_process(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/locks"
    with LockKit(url) as kit:
        lock = kit.lock("stuck:1")
        assert lock.acquire()
        listed = manage("list", "--json", url=url, check=True)
        assert [i["key"] for i in json.loads(listed.stdout)] == ["stuck:1"]
        released = manage("release", "stuck:1", "--force", url=url, check=True)
        assert "released stuck:1" in released.stdout
        assert kit.admin.info("stuck:1") is None
        with pytest.raises(LockNotOwned):
            lock.release()

"""Keys reach terminals with their control characters escaped: a key holding a terminal escape
sequence (``\\x1b]...``), a newline or a bidi override is printed as ``\\x1b``, ``\\n``,
``\\u202e`` by ``lockkit``, ``flask lockkit`` and ``manage.py lockkit``, never as raw bytes that
a terminal would act on or that would forge another line of the listing."""

from __future__ import annotations

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from lockkit_core import LockKit
from lockkit_core.terminal import printable

EVIL = "job:\x1b]0;owned\x07\x1b[2J\nFAKE  1  9.9 s  host  deadbeef\u202etxt"
ESCAPED = "job:\\x1b]0;owned\\x07\\x1b[2J\\nFAKE  1  9.9 s  host  deadbeef\\u202etxt"
SAMPLE = Path(__file__).resolve().parent.parent / "sample_projects" / "flask_tickets"
FLASK = Path(sys.executable).with_name("flask")


def test_printable_escapes_control_and_format_characters_only() -> None:
    assert printable(EVIL) == ESCAPED
    assert printable("café:Ω:order 42") == "café:Ω:order 42"
    assert printable("\t\r\x00\x7f\x9b\u2028") == "\\t\\r\\x00\\x7f\\x9b\\u2028"


def _assert_clean(output: str) -> None:
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in output, repr(output)
    assert not any(line.startswith("FAKE") for line in output.splitlines()), output


def _core(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lockkit_core.cli", "--url", url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )


def test_the_lockkit_command_escapes_keys(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/locks"
    with LockKit(url) as kit:
        assert kit.lock(EVIL).acquire()  # force-released below, never released here
        listed = _core(url, "list")
        assert listed.returncode == 0, listed.stderr
        _assert_clean(listed.stdout)
        assert ESCAPED in listed.stdout
        info = _core(url, "info", EVIL)
        _assert_clean(info.stdout)
        assert ESCAPED in info.stdout
        refused = _core(url, "release", EVIL)
        assert refused.returncode == 1
        _assert_clean(refused.stderr)
        released = _core(url, "release", EVIL, "--force")
        _assert_clean(released.stdout)
        assert released.stdout.startswith(f"released {ESCAPED} (owner ")
    free = _core(url, "info", EVIL)
    _assert_clean(free.stdout)
    assert free.stdout.strip() == f"{ESCAPED} is free"
    again = _core(url, "release", EVIL, "--force")
    assert again.stdout.strip() == f"{ESCAPED} was already free"


def test_flask_lockkit_escapes_keys(tmp_path: Path) -> None:
    env = {
        "TICKETS_DATA_DIR": str(tmp_path),
        "TICKETS_LOCKKIT_URL": f"file://{tmp_path}/locks",
        "PATH": str(FLASK.parent),
        "PYTHONIOENCODING": "utf-8",
    }

    def flask(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(FLASK), "--app", "app:create_app", "lockkit", *args],
            cwd=SAMPLE,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    with LockKit(f"file://{tmp_path}/locks", namespace="tickets") as kit:
        assert kit.lock(EVIL).acquire()  # force-released below, never released here
        for args in (["list"], ["info", EVIL], ["release", EVIL]):
            done = flask(*args)
            _assert_clean(done.stdout + done.stderr)
            assert ESCAPED in done.stdout + done.stderr
        released = flask("release", EVIL, "--force")
        _assert_clean(released.stdout)
        assert released.stdout.startswith(f"released {ESCAPED} (owner ")


def _manage(*args: str) -> str:
    out = StringIO()
    call_command("lockkit", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_manage_py_lockkit_escapes_keys() -> None:
    with override_settings(LOCKKIT={"URL": "memory://terminal", "NAMESPACE": "shop"}):
        from lockkit_django import get_kit

        assert get_kit().lock(EVIL).acquire()  # force-released below
        for args in (["list"], ["info", EVIL]):
            output = _manage(*args)
            _assert_clean(output)
            assert ESCAPED in output
        with pytest.raises(CommandError) as refused:
            _manage("release", EVIL)
        _assert_clean(str(refused.value))
        output = _manage("release", EVIL, "--force")
        _assert_clean(output)
        assert output.startswith(f"released {ESCAPED} (owner ")
        assert _manage("info", EVIL).strip() == f"{ESCAPED} is free"

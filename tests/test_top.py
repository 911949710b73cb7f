"""``lockkit top`` used as a person would: started in a real terminal (tmux), its screen read
with ``capture-pane`` while this process takes and releases locks on the same store."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lockkit_core import LockKit

LOCKKIT = str(Path(sys.executable).with_name("lockkit"))


class Screen:
    """A tmux session of 160x40 running one command."""

    def __init__(self, command: list[str]) -> None:
        self.name = f"lockkit-top-{uuid.uuid4().hex[:8]}"
        # Without COLUMNS and LINES (which a test run may leave set): the pane's own size counts.
        size = ["-x", "160", "-y", "40"]
        unset = ["env", "-u", "COLUMNS", "-u", "LINES"]
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", self.name, *size, *unset, *command], check=True
        )

    def text(self) -> str:
        done = subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", self.name],
            check=False,
            capture_output=True,
            text=True,
        )
        return done.stdout

    def alive(self) -> bool:
        return subprocess.run(["tmux", "has-session", "-t", self.name], check=False).returncode == 0

    def press(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def wait_for(self, what: str, ok: Callable[[str], bool], within: float = 20.0) -> str:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            text = self.text()
            if ok(text):
                return text
            time.sleep(0.1)
        raise AssertionError(f"the screen never showed {what}:\n{self.text()}")

    def close(self) -> None:
        if self.alive():
            subprocess.run(["tmux", "kill-session", "-t", self.name], check=False)


def _row(text: str, key: str) -> str:
    [line] = [line for line in text.splitlines() if f" {key} " in f" {line} "]
    return line


def _age(line: str) -> float:
    cells = [cell.strip() for cell in line.split("│")[1:-1]]
    age = cells[5]  # KEY HOLDER OWNER TOKEN "TTL LEFT" AGE WAITERS
    assert age.endswith(" s"), line
    return float(age[:-2])


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"file://{tmp_path / 'locks'}"


@pytest.fixture
def screen(url: str) -> Iterator[Screen]:
    assert shutil.which("tmux"), "tmux is needed (scripts/test installs it)"
    shown = Screen([LOCKKIT, "--namespace", "ops", "top", url, "--prefix", "job:"])
    yield shown
    shown.close()


def test_top_shows_held_locks_their_age_and_drops_released_ones(url: str, screen: Screen) -> None:
    with LockKit(url, namespace="ops", ttl=60) as kit:
        screen.wait_for("its header", lambda t: "lockkit top" in t and "no locks held" in t)
        first, second = kit.lock("job:report"), kit.lock("job:export")
        assert first.acquire() and second.acquire()
        with kit.lock("other:thing"):  # outside --prefix: never shown
            text = screen.wait_for("both locks", lambda t: "job:report" in t and "job:export" in t)
            assert "other:thing" not in text
            row = _row(text, "job:report")
            assert first.owner_hint is not None and first.owner_hint in row
            assert str(first.token) in row and "pid" in row
            young = _age(row)
            later = screen.wait_for(
                "the age growing", lambda t: _age(_row(t, "job:report")) >= young + 1.0
            )
            assert "KEY" in later and "AGE" in later and "TTL LEFT" in later
        second.release()
        screen.wait_for("job:export gone", lambda t: "job:export" not in t and "job:report" in t)
        first.release()
        screen.wait_for("an empty list", lambda t: "no locks held" in t)
    screen.press("q")
    deadline = time.monotonic() + 10
    while screen.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not screen.alive(), "q did not quit"


def test_ctrl_c_quits_too(screen: Screen) -> None:
    screen.wait_for("its header", lambda t: "lockkit top" in t)
    screen.press("C-c")
    deadline = time.monotonic() + 10
    while screen.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not screen.alive(), "Ctrl-C did not quit"

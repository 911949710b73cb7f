"""Structured log records of every path that is not the happy one: busy, timeout, lost,
store down; each carries lockkit_event and lockkit_key (and an owner hint or task id where
known), and a key cannot forge a log line."""

from __future__ import annotations

import logging
import time
import uuid

import pytest

from lockkit_core import LockKit
from lockkit_core.errors import BackendUnavailable, LockLost
from lockkit_core.testing import free_port


def _events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "lockkit_event", None) == name]


@pytest.fixture
def kit() -> LockKit:
    return LockKit(f"memory://logs-{uuid.uuid4().hex[:10]}", namespace="logs", auto_renew=False)


def test_a_key_with_a_line_break_cannot_forge_a_log_line(
    kit: LockKit, caplog: pytest.LogCaptureFixture
) -> None:
    key = "job\nCRITICAL root: disk wiped"
    lock = kit.lock(key, ttl=0.1)
    assert lock.acquire()
    time.sleep(0.2)
    with caplog.at_level(logging.WARNING, logger="lockkit"), pytest.raises(LockLost):
        lock.release()
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("lockkit")]
    assert lines, "the loss was not logged"
    for line in lines:
        assert "\n" not in line, line


def test_busy_and_timeout_are_logged_with_the_key(
    kit: LockKit, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="lockkit"), kit.lock("k"):
        other = kit.lock("k", reentrant=False)
        assert other.acquire(blocking=False) is False
        assert other.acquire(timeout=0.05) is False
    [busy] = _events(caplog, "busy")
    [timeout] = _events(caplog, "timeout")
    assert busy.levelno == logging.DEBUG and timeout.levelno == logging.INFO
    assert busy.lockkit_key == timeout.lockkit_key == "logs:k"  # type: ignore[attr-defined]


def test_an_outage_is_logged_as_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    with (
        LockKit(url, namespace="down", options={"socket_timeout": 0.2}) as kit,
        caplog.at_level(logging.WARNING, logger="lockkit"),
        pytest.raises(BackendUnavailable),
    ):
        kit.lock("k").acquire(timeout=0.3)
    [record] = _events(caplog, "unavailable")
    assert record.levelno == logging.WARNING
    assert record.lockkit_key == "down:k"  # type: ignore[attr-defined]

"""Helpers shared by the ``file://`` tests: owner tokens and steered child processes."""

from __future__ import annotations

import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from lockkit_core import Lock

ROOT = Path(__file__).resolve().parents[1]
OWNER_A = "a" * 32
OWNER_B = "b" * 32
OWNER_C = "c" * 32


# A lock holder steered through stdin: prints "acquired <token>", then answers each command
# ("check", "release", "extend") with ok | lost | notowned.
HOLDER = r"""
import sys
from lockkit_core import LockKit, LockLost, LockNotOwned
url, key, ttl, renew = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "1"
lock = LockKit(url).lock(key, ttl=ttl, auto_renew=renew)
if not lock.acquire(timeout=10):
    sys.exit(3)
print("acquired", lock.token, flush=True)
for line in sys.stdin:
    try:
        getattr(lock, line.strip())()
        print("ok", flush=True)
    except LockLost:
        print("lost", flush=True)
    except LockNotOwned:
        print("notowned", flush=True)
"""


def fence(lock: Lock) -> int:
    assert lock.token is not None
    return lock.token


def start(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def read_line(proc: subprocess.Popen[str], timeout: float = 20.0) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"process {proc.pid} said nothing for {timeout} s"
    line = proc.stdout.readline()
    assert line, f"process {proc.pid} exited with {proc.wait()}"
    return line.strip()


def ask(proc: subprocess.Popen[str], command: str) -> str:
    assert proc.stdin is not None
    proc.stdin.write(command + "\n")
    proc.stdin.flush()
    return read_line(proc)


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            stream.close()


def pause_outside_flock(proc: subprocess.Popen[str], attempts: int = 200) -> None:
    """SIGSTOP ``proc`` at a moment it holds no flock.

    A process stopped inside its few-microsecond critical section keeps the record flocked, and
    others then give up with BackendUnavailable by design; a test that means to pause a holder or
    a waiter between its steps must not land in that window, so it retries until it does not.
    """
    for _ in range(attempts):
        proc.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 5.0
        while _state(proc.pid) != "T":
            assert time.monotonic() < deadline, f"process {proc.pid} did not stop"
            time.sleep(0.0005)
        if not _holds_flock(proc.pid):
            return
        proc.send_signal(signal.SIGCONT)
        time.sleep(0.001)
    raise AssertionError(f"process {proc.pid} was inside a flock every time it was stopped")


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()[0]


def _holds_flock(pid: int) -> bool:
    with open("/proc/locks") as locks:
        return any(line.split()[4] == str(pid) for line in locks if "FLOCK" in line)

"""Process workers of the contract suite: module level, so the ``spawn`` start method can pickle
them, and the counter file they increment."""

from __future__ import annotations

import multiprocessing
import os
import traceback
from pathlib import Path
from typing import Any

from ...kit import LockKit

__all__ = [
    "acquire_and_exit",
    "acquired_by_an_exited_process",
    "exclusion_worker",
    "increment_under_lock",
    "init_counter",
    "read_counter",
]

#: processes (or threads) racing in the mutual-exclusion tests, and increments each makes
WORKERS = 8
ROUNDS = 200


def init_counter(path: Path) -> None:
    path.write_text("0 0\n")


def read_counter(path: Path) -> tuple[int, int]:
    count, token = path.read_text().split()
    return int(count), int(token)


def increment_under_lock(
    kit: LockKit, key: str, counter: str, marker: str, rounds: int, timeout: float
) -> dict[str, Any]:
    """``rounds`` read-modify-write increments of the ``counter`` file, each under the lock.

    Entering a critical section creates ``marker`` with O_EXCL, so a second holder at the
    same time is seen as an overlap. The counter file also keeps the last fencing token,
    which every later holder must exceed.
    """
    overlaps = 0
    stale_tokens = 0
    tokens: list[int] = []
    for _ in range(rounds):
        with kit.lock(key, timeout=timeout) as held:
            try:
                fd: int | None = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            except FileExistsError:
                overlaps += 1
                fd = None
            path = Path(counter)
            count, last_token = read_counter(path)
            token = held.token
            if token is not None:
                tokens.append(token)
                if token <= last_token:
                    stale_tokens += 1
            path.write_text(f"{count + 1} {token if token is not None else 0}\n")
            if fd is not None:
                os.close(fd)
                os.unlink(marker)
    return {"overlaps": overlaps, "stale_tokens": stale_tokens, "tokens": tokens}


def exclusion_worker(
    url: str,
    namespace: str,
    key: str,
    counter: str,
    marker: str,
    rounds: int,
    start: Any,
    results: Any,
) -> None:
    """One process of the cross-process exclusion test; reports a dict on ``results``."""
    report: dict[str, Any] = {"pid": os.getpid()}
    try:
        kit = LockKit(url, namespace=namespace, ttl=30.0, auto_renew=False)
        start.wait(60)
        report.update(increment_under_lock(kit, key, counter, marker, rounds, timeout=60.0))
        kit.close()
    except BaseException:
        report["error"] = traceback.format_exc()
    results.put(report)


def acquire_and_exit(url: str, namespace: str, key: str, ttl: float | None, results: Any) -> None:
    """Take ``key`` and exit without releasing it, handing the owner token on via
    ``results``, as a Celery producer hands its lock to the worker that runs the task."""
    try:
        kit = LockKit(url, namespace=namespace, auto_renew=False)
        lock = kit.lock(key, ttl=ttl)
        got = lock.acquire(timeout=10)
        results.put((lock.owner, lock.token) if got else ("busy", None))
    except BaseException:
        results.put(("error", traceback.format_exc()))


def acquired_by_an_exited_process(
    url: str, namespace: str, key: str, ttl: float | None
) -> tuple[str, int | None]:
    """Run :func:`acquire_and_exit` in a spawned process and wait for it to end; the owner
    token and fencing token of the lock it left held on ``key``."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    proc = ctx.Process(target=acquire_and_exit, args=(url, namespace, key, ttl, results))
    proc.start()
    try:
        owner, token = results.get(timeout=60)
    finally:
        proc.join(30)
    assert proc.exitcode == 0
    assert owner not in ("busy", "error"), token  # on "error", token is the traceback
    return owner, token

"""Mutual exclusion: between kits, between threads, and between processes racing on one counter."""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from ...backends.base import Capability
from ...kit import LockKit
from .fixtures import ContractBase, KitFactory
from .workers import (
    ROUNDS,
    WORKERS,
    exclusion_worker,
    increment_under_lock,
    init_counter,
    read_counter,
)

__all__ = ["ExclusionContract"]


class ExclusionContract(ContractBase):
    """Only one holder at a time, whoever and wherever the contenders are."""

    def test_exclusion_between_kits(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        first = a.lock("order:1")
        assert first.acquire(blocking=False) is True
        second = b.lock("order:1")
        assert second.acquire(blocking=False) is False
        assert second.locked() is True
        assert first.owned() and not second.owned()
        first.release()
        assert second.acquire(blocking=False) is True
        assert first.acquire(blocking=False) is False
        second.release()
        assert first.locked() is False

    def test_other_keys_are_independent(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        with a.lock("order:1"), b.lock("order:2", timeout=0) as other:
            assert other.owned()

    def test_exclusion_between_threads_of_one_kit(self, make_kit: KitFactory) -> None:
        kit = make_kit()
        inside = 0
        overlaps = 0
        done = 0
        guard = threading.Lock()

        def work() -> None:
            nonlocal inside, overlaps, done
            for _ in range(20):
                with kit.lock("shared", timeout=10):
                    with guard:
                        inside += 1
                        overlaps += inside > 1
                    time.sleep(0.0005)
                    with guard:
                        inside -= 1
                        done += 1

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads)
        assert done == 80
        assert overlaps == 0

    # -- many workers --------------------------------------------------------------------------

    def test_mutual_exclusion_across_threads(self, make_kit: KitFactory, tmp_path: Path) -> None:
        kits = [make_kit(auto_renew=False), make_kit(auto_renew=False)]
        counter, marker = tmp_path / "counter", tmp_path / "inside"
        init_counter(counter)
        reports: list[dict[str, Any]] = []
        errors: list[str] = []

        def work(kit: LockKit) -> None:
            try:
                reports.append(
                    increment_under_lock(kit, "counter", str(counter), str(marker), ROUNDS, 30.0)
                )
            except BaseException:
                errors.append(traceback.format_exc())

        threads = [threading.Thread(target=work, args=(kits[i % 2],)) for i in range(WORKERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads), "a worker thread hung"
        assert not errors, errors[0]
        _check_exclusion(reports, counter, kits[0])

    def test_mutual_exclusion_across_processes(
        self, make_kit: KitFactory, backend_url: str, namespace: str, tmp_path: Path
    ) -> None:
        kit = make_kit()
        self.require(kit, Capability.CROSS_PROCESS)
        counter, marker = tmp_path / "counter", tmp_path / "inside"
        init_counter(counter)
        ctx = multiprocessing.get_context("spawn")
        start = ctx.Barrier(WORKERS)
        results = ctx.Queue()
        procs = [
            ctx.Process(
                target=exclusion_worker,
                args=(
                    backend_url,
                    namespace,
                    "counter",
                    str(counter),
                    str(marker),
                    ROUNDS,
                    start,
                    results,
                ),
                daemon=True,
            )
            for _ in range(WORKERS)
        ]
        for p in procs:
            p.start()
        reports: list[dict[str, Any]] = []
        deadline = time.monotonic() + 180
        try:
            while len(reports) < WORKERS and time.monotonic() < deadline:
                try:
                    reports.append(results.get(timeout=0.5))
                except queue.Empty:
                    if not any(p.is_alive() for p in procs) and results.empty():
                        break  # a worker died without reporting
        finally:
            for p in procs:
                p.join(10)
                if p.is_alive():
                    p.kill()
        codes = [p.exitcode for p in procs]
        assert len(reports) == WORKERS, f"{len(reports)} of {WORKERS} reported; exit codes {codes}"
        errors = [r["error"] for r in reports if "error" in r]
        assert not errors, errors[0]
        assert len({r["pid"] for r in reports}) == WORKERS
        _check_exclusion(reports, counter, kit)


def _check_exclusion(reports: list[dict[str, Any]], counter: Path, kit: LockKit) -> None:
    assert len(reports) == WORKERS
    count, _ = read_counter(counter)
    assert count == WORKERS * ROUNDS, "lost updates: two workers were inside at once"
    assert sum(r["overlaps"] for r in reports) == 0
    if Capability.FENCING in kit.backend.capabilities:
        tokens = [t for r in reports for t in r["tokens"]]
        assert len(tokens) == WORKERS * ROUNDS
        assert len(set(tokens)) == len(tokens), "a fencing token was handed out twice"
        assert sum(r["stale_tokens"] for r in reports) == 0

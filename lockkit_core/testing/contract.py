"""The contract every backend passes: one suite, run against each store for real.

A backend's test module subclasses :class:`LockContract` and provides a ``backend_url``
fixture (a string naming a store only that module's tests use)::

    class TestMemoryContract(LockContract):
        @pytest.fixture
        def backend_url(self) -> str:
            return f"memory://contract-{uuid.uuid4().hex}"

``make_kit(**kwargs)`` builds kits on that same store under one namespace per test; override
it to pass backend options. Tests needing a capability the backend does not declare
(``TTL``, ``FENCING``, ``LIST``, ``CROSS_PROCESS``) are skipped with the reason.

Process workers live at module level so the ``spawn`` start method can pickle them.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import queue
import secrets
import signal
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from ..backends.base import Capability
from ..errors import (
    ConfigError,
    LockLost,
    LockNotOwned,
    LockTimeout,
    LockUnavailable,
)
from ..lease import validity
from ..lock import Lock, LockKit

__all__ = [
    "KitFactory",
    "LockContract",
    "acquire_and_exit",
    "exclusion_worker",
    "increment_under_lock",
]

#: processes (or threads) racing in the mutual-exclusion tests, and increments each makes
WORKERS = 8
ROUNDS = 200


class KitFactory(Protocol):
    """``make_kit(**kwargs)``: a new :class:`LockKit` on the test's store and namespace."""

    def __call__(self, **kwargs: Any) -> LockKit: ...


class _Recorder:
    """An ``on_lost`` callback that remembers its calls and lets a test wait for the first."""

    def __init__(self) -> None:
        self.calls: list[Lock] = []
        self.threads: list[str] = []
        self.event = threading.Event()

    def __call__(self, lock: Lock) -> None:
        self.calls.append(lock)
        self.threads.append(threading.current_thread().name)
        self.event.set()


# -- mutual exclusion workers (module level: picklable for "spawn") ----------------------------


def _init_counter(path: Path) -> None:
    path.write_text("0 0\n")


def _read_counter(path: Path) -> tuple[int, int]:
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
            count, last_token = _read_counter(path)
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


def acquire_and_exit(url: str, namespace: str, key: str, ttl: float, results: Any) -> None:
    """Take ``key`` and exit without releasing it, handing the owner token on via
    ``results``, as a Celery producer hands its lock to the worker that runs the task."""
    try:
        kit = LockKit(url, namespace=namespace, auto_renew=False)
        lock = kit.lock(key, ttl=ttl)
        got = lock.acquire(timeout=10)
        results.put((lock.owner, lock.token) if got else ("busy", None))
    except BaseException:
        results.put(("error", traceback.format_exc()))


class LockContract:
    """Mixin of tests every backend must pass; see the module docstring."""

    # -- fixtures ------------------------------------------------------------------------------

    @pytest.fixture
    def backend_url(self) -> str:
        """The store under test; each backend's test module overrides this."""
        raise NotImplementedError("the backend's test module must define a backend_url fixture")

    @pytest.fixture
    def namespace(self) -> str:
        """A namespace of this test's own."""
        return f"ct{uuid.uuid4().hex[:12]}"

    @pytest.fixture
    def make_kit(self, backend_url: str, namespace: str) -> Iterator[KitFactory]:
        """``make_kit(**kwargs)``: kits on the same store and namespace, closed afterwards."""
        kits: list[LockKit] = []

        def make(**kwargs: Any) -> LockKit:
            kwargs.setdefault("namespace", namespace)
            kwargs.setdefault("ttl", 10.0)
            kit = LockKit(backend_url, **kwargs)
            kits.append(kit)
            return kit

        yield make
        for kit in kits:
            kit.close()

    @staticmethod
    def require(kit: LockKit, capability: Capability) -> None:
        """Skip the test unless the backend declares ``capability``."""
        if capability not in kit.backend.capabilities:
            name = capability.name or str(capability)
            pytest.skip(f"the {kit.backend.url.scheme}:// backend does not declare {name}")

    # -- exclusion -----------------------------------------------------------------------------

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

    def test_blocking_acquire_is_woken_when_released(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        holding = threading.Event()
        released_at: list[float] = []

        def hold_briefly() -> None:
            with a.lock("k"):
                holding.set()
                time.sleep(0.1)
                released_at.append(time.monotonic())

        holder = threading.Thread(target=hold_briefly)
        holder.start()
        try:
            assert holding.wait(5)
            waiter = b.lock("k", timeout=3)
            assert waiter.acquire() is True
            acquired_at = time.monotonic()
        finally:
            holder.join(5)
        lag = acquired_at - released_at[0]
        assert 0 <= lag < 0.15, f"the waiter got the lock {lag:.3f} s after it was released"
        waiter.release()

    # -- reentrancy ----------------------------------------------------------------------------

    def test_reentrant_per_thread_touches_the_store_once(
        self, make_kit: KitFactory, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        kit, other_kit = make_kit(), make_kit()
        backend = kit.backend
        calls = {"try_acquire": 0, "release": 0}
        real_try, real_release = backend.try_acquire, backend.release

        def counting_try(key: str, owner: str, ttl: float) -> Any:
            calls["try_acquire"] += 1
            return real_try(key, owner, ttl)

        def counting_release(key: str, owner: str) -> bool:
            calls["release"] += 1
            return real_release(key, owner)

        monkeypatch.setattr(backend, "try_acquire", counting_try)
        monkeypatch.setattr(backend, "release", counting_release)

        def other_thread_gets_it() -> bool:
            result: list[bool] = []
            t = threading.Thread(
                target=lambda: result.append(kit.lock("r").acquire(blocking=False))
            )
            t.start()
            t.join(10)
            got = result[0]
            if got:
                # give it back from that thread's hold: not expected, but do not leak it
                kit.backend.force_release(kit.lock("r").full_key)
            return got

        outer = kit.lock("r")
        inner = kit.lock("r")
        assert outer.acquire(blocking=False)
        assert inner.acquire(blocking=False)
        assert outer.acquire(timeout=0.1)
        assert calls["try_acquire"] == 1
        assert inner.token == outer.token
        assert other_thread_gets_it() is False
        assert other_kit.lock("r").acquire(blocking=False) is False

        inner.release()
        assert outer.owned()
        assert other_thread_gets_it() is False
        outer.release()
        assert outer.owned(), "one level of reentrancy is still held"
        assert other_thread_gets_it() is False
        assert calls["release"] == 0
        outer.release()
        assert calls["release"] == 1
        assert not outer.owned()
        with pytest.raises(LockNotOwned):
            outer.release()
        assert other_kit.lock("r").acquire(blocking=False) is True

    def test_non_reentrant_handles_exclude_the_same_thread(self, make_kit: KitFactory) -> None:
        kit = make_kit()
        first = kit.lock("nr", reentrant=False)
        second = kit.lock("nr", reentrant=False)
        assert first.acquire(blocking=False)
        assert second.acquire(blocking=False) is False
        first.release()
        assert second.acquire(blocking=False) is True
        second.release()

    # -- timeouts ------------------------------------------------------------------------------

    def test_non_blocking_acquire_returns_false_when_held(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        with a.lock("busy"):
            waiter = b.lock("busy")
            start = time.monotonic()
            assert waiter.acquire(blocking=False) is False
            assert waiter.acquire(timeout=0) is False
            assert time.monotonic() - start < 0.5
            assert waiter.token is None
            with pytest.raises(LockNotOwned):
                waiter.release()

    def test_timeout_is_honoured_within_50_ms(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        with a.lock("slow"):
            for waiter in (b.lock("slow", timeout=0.2), b.lock("slow")):
                start = time.monotonic()
                got = waiter.acquire() if waiter.timeout else waiter.acquire(timeout=0.2)
                elapsed = time.monotonic() - start
                assert got is False
                assert 0.2 <= elapsed <= 0.25, f"timeout=0.2 returned after {elapsed:.3f} s"

    def test_with_block_raises_lock_timeout_carrying_the_key(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        body_ran = False
        with (
            a.lock("invoice:7"),
            pytest.raises(LockTimeout) as caught,
            b.lock("invoice:7", timeout=0.05),
        ):
            body_ran = True
        assert not body_ran
        err = caught.value
        assert isinstance(err, TimeoutError)
        assert isinstance(err, LockUnavailable)
        assert err.key == "invoice:7"
        assert "invoice:7" in str(err)

    # -- leases --------------------------------------------------------------------------------

    def test_ttl_expiry_lets_another_kit_take_over(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        self.require(a, Capability.TTL)
        first = a.lock("lease", ttl=0.3, auto_renew=False)
        before = time.monotonic()
        assert first.acquire()
        second = b.lock("lease", timeout=3)
        assert second.acquire() is True
        taken = time.monotonic()
        # Safety: nobody gets the key while the first holder may still trust its lease.
        assert taken >= before + validity(0.3)
        assert first.lost, "the old holder must already know when someone else has it"
        assert taken - before < 0.3 + 0.3, f"took {taken - before:.3f} s to expire a 0.3 s ttl"
        if Capability.FENCING in a.backend.capabilities:
            assert first.token is not None and second.token is not None
            assert second.token > first.token
        with pytest.raises(LockLost):
            first.check()
        with pytest.raises(LockLost) as caught:
            first.release()
        assert caught.value.key == "lease"
        assert second.owned()
        info = b.admin.info("lease")
        assert info is not None and second.owner is not None
        assert second.owner.startswith(info.owner_hint)
        second.release()

    def test_extend_keeps_the_lock_past_its_original_ttl(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        self.require(a, Capability.TTL)
        held = a.lock("ext", ttl=0.3, auto_renew=False)
        assert held.acquire()
        time.sleep(0.15)
        held.extend()  # another 0.3 s from now
        held.extend(0.6)
        time.sleep(0.3)  # 0.45 s after acquiring: past the first ttl
        held.check()
        assert held.owned()
        assert b.lock("ext").acquire(blocking=False) is False
        held.release()
        assert b.lock("ext").acquire(blocking=False) is True

    def test_release_of_a_lock_not_held_raises_not_owned(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        with a.lock("mine") as held:
            stranger = b.lock("mine")
            with pytest.raises(LockNotOwned) as caught:
                stranger.release()
            assert type(caught.value) is LockNotOwned
            assert caught.value.key == "mine"
            with pytest.raises(LockNotOwned):
                stranger.extend()
            assert held.owned()
        with pytest.raises(LockNotOwned):
            held.release()

    def test_release_of_an_expired_lock_raises_lock_lost(self, make_kit: KitFactory) -> None:
        kit = make_kit()
        self.require(kit, Capability.TTL)
        held = kit.lock("expired", ttl=0.2, auto_renew=False)
        assert held.acquire()
        time.sleep(0.3)
        assert held.lost and not held.owned()
        with pytest.raises(LockLost) as caught:
            held.release()
        assert caught.value.key == "expired"
        assert "expired" in str(caught.value)
        assert kit.admin.info("expired") is None

    def test_another_kit_can_release_and_extend_with_the_owner_token(
        self, make_kit: KitFactory
    ) -> None:
        a, b, c = make_kit(), make_kit(), make_kit()
        held = a.lock("celery:task", ttl=5, auto_renew=False)
        assert held.acquire()
        owner = held.owner
        assert owner is not None and len(owner) == 32

        wrong = b.lock("celery:task", owner=secrets.token_hex(16))
        with pytest.raises(LockNotOwned):
            wrong.release()
        with pytest.raises(LockNotOwned):
            wrong.extend(1.0)
        info = c.admin.info("celery:task")
        assert info is not None and owner.startswith(info.owner_hint)

        adopted = b.lock("celery:task", owner=owner)
        if Capability.TTL in b.backend.capabilities:
            adopted.extend(2.0)
            info = c.admin.info("celery:task")
            assert info is not None and info.ttl_remaining is not None
            assert 1.0 < info.ttl_remaining <= 2.0
        adopted.release()
        assert c.admin.info("celery:task") is None
        assert c.lock("celery:task").acquire(blocking=False) is True
        with pytest.raises(LockLost):
            held.release()  # its acquisition was ended elsewhere; c's lock is untouched
        assert c.admin.info("celery:task") is not None

    def test_owner_token_hand_off_outlives_the_acquiring_process(
        self, make_kit: KitFactory, backend_url: str, namespace: str
    ) -> None:
        kit = make_kit()
        self.require(kit, Capability.CROSS_PROCESS)
        ctx = multiprocessing.get_context("spawn")
        results = ctx.Queue()
        proc = ctx.Process(
            target=acquire_and_exit, args=(backend_url, namespace, "handoff", 5.0, results)
        )
        proc.start()
        try:
            owner, token = results.get(timeout=60)
        finally:
            proc.join(30)
        assert proc.exitcode == 0
        assert owner not in ("busy", "error"), token
        # The process that took it is gone; the lease, not the process, says who holds it.
        assert kit.lock("handoff").acquire(blocking=False) is False
        info = kit.admin.info("handoff")
        assert info is not None and owner.startswith(info.owner_hint)
        adopted = kit.lock("handoff", owner=owner)
        adopted.extend(5.0)
        adopted.release()
        assert kit.admin.info("handoff") is None
        with kit.lock("handoff", timeout=0) as again:
            if token is not None:
                assert again.token is not None and again.token > token

    def test_fencing_tokens_strictly_increase(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        self.require(a, Capability.FENCING)
        tokens: list[int] = []
        for i in range(30):
            kit = a if i % 2 else b
            with kit.lock("fence") as held:
                assert isinstance(held.token, int)
                tokens.append(held.token)
        assert all(later > earlier for earlier, later in itertools.pairwise(tokens))
        with a.lock("another-key") as other:
            assert isinstance(other.token, int)

    # -- lost-lock detection -------------------------------------------------------------------

    def test_lost_lock_is_detected_without_renewal(self, make_kit: KitFactory) -> None:
        kit = make_kit()
        self.require(kit, Capability.TTL)
        lost = _Recorder()
        lock = kit.lock("job", ttl=0.3, auto_renew=False, on_lost=lost)
        with pytest.raises(LockLost) as caught, lock:
            lock.check()
            time.sleep(0.4)
            assert lock.lost
            with pytest.raises(LockLost):
                lock.check()
        assert caught.value.key == "job"
        assert lost.event.wait(1.0), "on_lost was not called at the lease deadline"
        assert lost.calls == [lock]
        assert lost.threads[0] != threading.current_thread().name

    def test_auto_renew_keeps_a_short_lease_held(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        self.require(a, Capability.TTL)
        lost = _Recorder()
        with a.lock("renewed", ttl=0.3, auto_renew=True, on_lost=lost) as held:
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                assert b.lock("renewed").acquire(blocking=False) is False
                held.check()
                time.sleep(0.1)
            assert held.owned()
        assert not lost.calls
        assert b.lock("renewed").acquire(blocking=False) is True

    def test_force_release_makes_the_holder_find_out(self, make_kit: KitFactory) -> None:
        holder_kit, admin_kit, other = make_kit(), make_kit(), make_kit()
        lost = _Recorder()
        held = holder_kit.lock("stuck", ttl=0.6, auto_renew=True, on_lost=lost)
        assert held.acquire()
        assert admin_kit.admin.force_release("stuck") is True
        assert admin_kit.admin.force_release("stuck") is False
        assert admin_kit.admin.info("stuck") is None
        taker = other.lock("stuck")
        assert taker.acquire(blocking=False) is True
        if Capability.FENCING in other.backend.capabilities:
            assert taker.token is not None and held.token is not None
            assert taker.token > held.token
        # The watchdog's next renewal (every ttl/3) finds the key gone.
        assert lost.event.wait(1.0), "the holder was not told its lock was force-released"
        with pytest.raises(LockLost):
            held.check()
        with pytest.raises(LockLost):
            held.release()
        assert taker.owned()
        info = admin_kit.admin.info("stuck")
        assert info is not None and info.token == taker.token
        taker.release()

    def test_force_release_then_release_raises_lock_lost(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        held = a.lock("stuck2", auto_renew=False)
        assert held.acquire()
        assert b.admin.force_release("stuck2")
        assert b.lock("stuck2").acquire(blocking=False)
        with pytest.raises(LockLost):
            held.release()
        assert b.admin.info("stuck2") is not None

    # -- decorator -----------------------------------------------------------------------------

    def test_decorator_binds_the_key_to_the_call(self, make_kit: KitFactory) -> None:
        kit = make_kit()
        entered = threading.Event()
        leave = threading.Event()
        ran: list[str] = []

        @kit.locked("report:{day}", timeout=0)
        def build_report(day: str, slow: bool = False) -> str:
            ran.append(day)
            if slow:
                entered.set()
                leave.wait(10)
            return f"report for {day}"

        worker = threading.Thread(target=build_report, args=("mon",), kwargs={"slow": True})
        worker.start()
        try:
            assert entered.wait(5)
            with pytest.raises(LockTimeout) as caught:
                build_report("mon")
            assert caught.value.key == "report:mon"
            assert build_report("tue") == "report for tue"
            assert build_report(day="wed") == "report for wed"
            assert kit.admin.info("report:mon") is not None
        finally:
            leave.set()
            worker.join(10)
        assert ran == ["mon", "tue", "wed"]
        assert build_report("mon") == "report for mon"
        assert build_report.__name__ == "build_report"

    def test_decorator_rejects_a_placeholder_the_function_lacks(
        self, make_kit: KitFactory
    ) -> None:
        kit = make_kit()
        with pytest.raises(ConfigError) as caught:

            @kit.locked("report:{day}")
            def build_report(date: str) -> None: ...

        assert "day" in str(caught.value)
        assert "date" in str(caught.value)

    # -- fork safety ---------------------------------------------------------------------------

    @pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
    def test_forked_child_never_releases_the_parents_lock(self, make_kit: KitFactory) -> None:
        kit, other = make_kit(), make_kit()
        held = kit.lock("forked", ttl=2, auto_renew=True)
        assert held.acquire()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 99
            try:
                code = _child_checks(held, kit)
            finally:
                os._exit(code)
        status = _wait_for_child(pid, timeout=10.0)
        assert os.WIFEXITED(status), f"child ended with status {status}"
        assert os.WEXITSTATUS(status) == 0, _CHILD_FAILURES.get(
            os.WEXITSTATUS(status), f"child exit {os.WEXITSTATUS(status)}"
        )
        assert held.owned()
        held.check()
        assert other.lock("forked").acquire(blocking=False) is False
        held.release()
        assert other.lock("forked").acquire(blocking=False) is True

    # -- admin ---------------------------------------------------------------------------------

    def test_admin_info_and_list(self, make_kit: KitFactory, namespace: str) -> None:
        kit = make_kit()
        admin = make_kit().admin
        assert admin.info("a:1") is None
        held = [kit.lock(name, ttl=5, auto_renew=False) for name in ("a:1", "a:2", "b:1")]
        for lock in held:
            assert lock.acquire()
        info = admin.info("a:1")
        assert info is not None
        assert info.key == "a:1"
        assert info.stored_key.startswith(namespace)
        assert info.stored_key.endswith("a:1")
        owner = held[0].owner
        assert owner is not None and info.owner_hint and owner.startswith(info.owner_hint)
        assert len(info.owner_hint) < len(owner)
        if Capability.FENCING in kit.backend.capabilities:
            assert info.token == held[0].token
        if Capability.TTL in kit.backend.capabilities:
            assert info.ttl_remaining is not None and 0 < info.ttl_remaining <= 5.0
        if Capability.LIST in kit.backend.capabilities:
            assert [i.key for i in admin.list("a:")] == ["a:1", "a:2"]
            assert [i.key for i in admin.list()] == ["a:1", "a:2", "b:1"]
            assert admin.list("zzz") == []
            held[1].release()
            assert [i.key for i in admin.list()] == ["a:1", "b:1"]
        else:
            held[1].release()
        assert admin.info("a:2") is None
        assert admin.force_release("b:1") is True
        assert admin.info("b:1") is None
        assert admin.force_release("b:1") is False
        held[0].release()

    def test_admin_list_stays_inside_the_namespace(
        self, make_kit: KitFactory, namespace: str
    ) -> None:
        mine = make_kit()
        self.require(mine, Capability.LIST)
        theirs = make_kit(namespace=namespace + "x")
        with mine.lock("job:1"), theirs.lock("job:1"), theirs.lock("job:2"):
            assert [i.key for i in mine.admin.list()] == ["job:1"]
            assert [i.key for i in theirs.admin.list("job:")] == ["job:1", "job:2"]

    # -- mutual exclusion, many workers --------------------------------------------------------

    def test_mutual_exclusion_across_threads(self, make_kit: KitFactory, tmp_path: Path) -> None:
        kits = [make_kit(auto_renew=False), make_kit(auto_renew=False)]
        counter, marker = tmp_path / "counter", tmp_path / "inside"
        _init_counter(counter)
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
        _init_counter(counter)
        ctx = multiprocessing.get_context("spawn")
        start = ctx.Barrier(WORKERS)
        results = ctx.Queue()
        procs = [
            ctx.Process(
                target=exclusion_worker,
                args=(backend_url, namespace, "counter", str(counter), str(marker), ROUNDS,
                      start, results),
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
    count, _ = _read_counter(counter)
    assert count == WORKERS * ROUNDS, "lost updates: two workers were inside at once"
    assert sum(r["overlaps"] for r in reports) == 0
    if Capability.FENCING in kit.backend.capabilities:
        tokens = [t for r in reports for t in r["tokens"]]
        assert len(tokens) == WORKERS * ROUNDS
        assert len(set(tokens)) == len(tokens), "a fencing token was handed out twice"
        assert sum(r["stale_tokens"] for r in reports) == 0


# -- the forked child's side of the fork-safety test -------------------------------------------

_CHILD_FAILURES = {
    1: "in the child, release() of the parent's lock did not raise LockNotOwned",
    2: "in the child, release() raised LockLost instead of LockNotOwned",
    3: "in the child, owned() was True for the parent's lock",
    4: "in the child, check() did not raise LockNotOwned",
    5: "in the child, the parent's key could be acquired: it was released or never held",
    6: "in the child, extend() of the parent's lock did not raise LockNotOwned",
    99: "the child raised an unexpected exception",
}


def _child_checks(held: Lock, kit: LockKit) -> int:
    """Run in the forked child; 0 if every check passed, else a code from _CHILD_FAILURES."""
    for code, attempt in ((1, held.release), (4, held.check), (6, held.extend)):
        try:
            attempt()
        except LockLost:
            if code == 1:
                return 2
        except LockNotOwned:
            pass
        else:
            return code
    if held.owned():
        return 3
    if kit.lock("forked").acquire(blocking=False):
        return 5
    return 0


def _wait_for_child(pid: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"the forked child did not finish within {timeout} s")


"""A lock holder steered from a test (``holder_process.py`` in a subprocess), and the two
holder faults every server-backed store must survive: SIGKILL, and SIGSTOP past the ttl."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from lockkit_core import LockKit
from lockkit_core.backends.base import owner_hint

HOLDER = Path(__file__).with_name("holder_process.py")
#: how long a holder process may take to start and say its first line: an interpreter start
#: and lockkit's imports, which a loaded machine stretches from a fraction of a second to tens
START_WITHIN = 60.0


class Holder:
    """``holder_process.py`` in a subprocess; lines it prints are read with a timeout."""

    def __init__(
        self,
        url: str,
        namespace: str,
        key: str,
        ttl: float,
        auto_renew: bool,
        wait: float = 10.0,
        place: str = "",
    ) -> None:
        self.wait = wait  # how long expect() waits for a line unless told otherwise
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(HOLDER),
                url,
                namespace,
                key,
                str(ttl),
                "1" if auto_renew else "0",
                *([place] if place else []),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def expect(self, prefix: str, timeout: float | None = None) -> str:
        """The next line starting with ``prefix`` (others are kept in ``seen``)."""
        deadline = time.monotonic() + (self.wait if timeout is None else timeout)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"holder never printed {prefix!r}; saw {self.seen}")
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                continue
            self.seen.append(line)
            if line.startswith(prefix):
                return line

    def acquired(self) -> tuple[int, str]:
        _, token, owner = self.expect("acquired", timeout=max(self.wait, START_WITHIN)).split()
        return int(token), owner

    def ask(self, command: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.expect("")  # the next line; on_lost lines are skipped below

    def answer(self, command: str) -> str:
        """Send ``command`` and return its answer, skipping ``on_lost`` notices."""
        line = self.ask(command)
        while line == "on_lost":
            line = self.expect("")
        return line

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(10)


def check_sigkilled_holder_frees_the_key_within_its_ttl(
    url: str, direct: LockKit, namespace: str
) -> None:
    """A holder (ttl 1 s) killed with SIGKILL: ``direct`` gets the key within ttl + 1 s, with a
    higher token."""
    holder = Holder(url, namespace, "job", ttl=1.0, auto_renew=True)
    try:
        token, _ = holder.acquired()
        assert direct.lock("job").acquire(blocking=False) is False
        holder.signal(signal.SIGKILL)
        killed = time.monotonic()
        holder.proc.wait(5)
        taker = direct.lock("job", timeout=3)
        assert taker.acquire() is True
        waited = time.monotonic() - killed
        assert waited <= 1.0 + 1.0, f"the key was free only {waited:.3f} s after the kill"
        assert taker.token is not None and taker.token > token
        taker.release()
    finally:
        holder.close()


def check_sigstopped_holder_loses_the_lock_and_finds_out_on_resume(
    url: str, direct: LockKit, namespace: str
) -> None:
    """A holder (ttl 1 s) stopped past its ttl: ``direct`` takes over with a higher token; the
    resumed holder is told, and neither renews nor releases the new owner's lock."""
    holder = Holder(url, namespace, "job", ttl=1.0, auto_renew=True)
    try:
        token, owner = holder.acquired()
        holder.signal(signal.SIGSTOP)
        stopped = time.monotonic()
        taker = direct.lock("job", timeout=3)
        assert taker.acquire() is True, "the stopped holder's lease never ran out"
        waited = time.monotonic() - stopped
        assert waited <= 1.0 + 1.0, f"took {waited:.3f} s to take over a 1 s lease"
        assert taker.token is not None and taker.token > token
        holder.signal(signal.SIGCONT)
        assert holder.answer("check") == "lost", holder.seen
        assert holder.answer("release") == "lost", holder.seen
        if "on_lost" not in holder.seen:
            holder.expect("on_lost", timeout=2)
        info = direct.admin.info("job")
        assert info is not None and info.token == taker.token
        assert info.owner_hint != owner_hint(owner)
        assert holder.answer("check") == "notowned"  # after the failed release it holds nothing
        taker.release()
    finally:
        holder.close()


def check_no_ghost_holds_the_key(
    far: LockKit, direct: LockKit, key: str, *, far_calls: bool
) -> None:
    """After an outage healed, ``direct`` gets ``key`` soon, however an attempt of ``far``
    abandoned in the outage ended: whether ``far`` reaches the store again (``far_calls``) or
    stays idle (a web worker with no more requests), when its kit gives it back by itself."""
    time.sleep(0.3)  # what the link held back arrives
    if far_calls:
        with far.lock("other", timeout=2):  # the store answers this kit again
            pass
    start = time.monotonic()
    with direct.lock(key, timeout=5) as held:
        assert held.owned()
    waited = time.monotonic() - start
    assert waited < 3.0, f"the key was held {waited:.1f} s by an attempt nobody made"

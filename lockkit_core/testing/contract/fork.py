"""Fork safety: a forked child never releases or renews its parent's locks."""

from __future__ import annotations

import os
import signal
import time

import pytest

from ...errors import LockLost, LockNotOwned
from ...kit import LockKit
from ...lock import Lock
from .fixtures import ContractBase, KitFactory

__all__ = ["ForkContract"]


class ForkContract(ContractBase):
    """The parent's hold survives whatever its forked child tries."""

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

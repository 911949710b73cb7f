"""A lock holder in its own process, steered through stdin, for the fault tests.

    python holder_process.py URL NAMESPACE KEY TTL AUTO_RENEW [PLACE]

PLACE, if given, holds a place instead of the lock: ``read`` or ``write`` of a read-write
lock, or ``slot:N`` of a semaphore of N places; ``fair`` waits for a line on stdin (so several
can start at once and still queue in a set order), then takes the lock with ``fair=True``.

Prints ``acquired <token> <owner>`` once it holds KEY, then answers one line per command:
``check`` -> ``ok`` | ``lost`` | ``notowned``; ``release`` -> ``released`` | ``lost`` |
``notowned``; ``quit`` exits 0. When the watchdog reports the lock lost it prints ``on_lost``.
"""

from __future__ import annotations

import sys
import threading

from lockkit_core import Lock, LockKit, LockLost, LockNotOwned

_out = threading.Lock()


def say(line: str) -> None:
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main() -> int:
    url, namespace, key, ttl, auto_renew = sys.argv[1:6]
    place = sys.argv[6] if len(sys.argv) > 6 else ""
    kit = LockKit(url, namespace=namespace)

    def on_lost(lock: Lock) -> None:
        say("on_lost")

    lease = {"ttl": float(ttl), "auto_renew": auto_renew == "1", "on_lost": on_lost}
    lock: Lock
    if place.startswith("slot:"):
        lock = kit.semaphore(key, int(place[5:]), **lease)
    elif place in ("read", "write"):
        rw = kit.rwlock(key, **lease)
        lock = rw.read() if place == "read" else rw.write()
    else:
        lock = kit.lock(key, fair=place == "fair", **lease)
    if place == "fair":
        sys.stdin.readline()
    if not lock.acquire(timeout=10):
        say("busy")
        return 3
    say(f"acquired {lock.token} {lock.owner}")
    for raw in sys.stdin:
        command = raw.strip()
        if command == "quit":
            return 0
        try:
            if command == "check":
                lock.check()
                say("ok")
            elif command == "release":
                lock.release()
                say("released")
            else:
                say(f"unknown {command}")
        except LockLost:
            say("lost")
        except LockNotOwned:
            say("notowned")
    return 0


if __name__ == "__main__":
    sys.exit(main())

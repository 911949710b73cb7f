"""A lock holder that writes an Account row on PostgreSQL, steered through stdin.

    python fence_writer_process.py URL KEY TTL

Runs tests/djproject with its ``pg`` alias taken from DJPROJECT_PG_* and prints ``ready``
once connected. Then one line per command: ``row <id>`` -> ``ok`` (the Account row to write);
``acquire`` -> ``acquired <token>`` | ``busy`` (a new lock handle each time);
``fenced <balance>`` -> ``written 1`` | ``written 0`` (fenced_update with our token);
``plain <balance>`` -> ``written <rows>`` (a plain UPDATE, no fence); ``release`` ->
``released`` | ``lost`` | ``notowned``; ``quit`` exits 0. A write never checks the lock
first: this process stands for a holder that does not know its lease has ended.
"""

from __future__ import annotations

import os
import sys

import django


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> int:
    url, key, ttl = sys.argv[1:4]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djproject.settings")
    django.setup()
    from djproject.models import Account

    from lockkit_core import LockKit, LockLost, LockNotOwned
    from lockkit_django import fenced_update

    rows = Account.objects.using("pg")
    row = rows.none()
    rows.exists()  # connect now, not while the test waits on us
    kit = LockKit(url, namespace="race")
    lock = kit.lock(key, ttl=float(ttl), auto_renew=True, reentrant=False)
    token: int | None = None  # kept after the lease is lost, as a paused holder would
    say("ready")
    for raw in sys.stdin:
        command, _, arg = raw.strip().partition(" ")
        if command == "quit":
            return 0
        if command == "row":
            row = rows.filter(pk=int(arg))
            say("ok")
        elif command == "acquire":
            lock = kit.lock(key, ttl=float(ttl), auto_renew=True, reentrant=False)
            if lock.acquire(timeout=15):
                token = lock.token
                say(f"acquired {token}")
            else:
                say("busy")
        elif command == "fenced":
            assert token is not None
            say(f"written {int(fenced_update(row, token, balance=int(arg)))}")
        elif command == "plain":
            say(f"written {row.update(balance=int(arg))}")
        elif command == "release":
            try:
                lock.release()
                say("released")
            except LockLost:
                say("lost")
            except LockNotOwned:
                say("notowned")
        else:
            say(f"unknown {command}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

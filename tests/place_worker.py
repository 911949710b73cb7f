"""Takes a place ROUNDS times in its own process and logs every entry and exit.

    python place_worker.py URL NAMESPACE KEY PLACE ROUNDS HOLD LOG

PLACE is ``read``, ``write`` or ``slot:N``. While holding it appends ``+<mode> <pid>``, sleeps
HOLD seconds, appends ``-<mode> <pid>`` and releases. Lines go to LOG with O_APPEND, so the
file's order is the order in which they happened, across processes.
"""

from __future__ import annotations

import os
import sys
import time

from lockkit_core import LockKit


def main() -> int:
    url, namespace, key, place, rounds, hold, log = sys.argv[1:8]
    kit = LockKit(url, namespace=namespace, ttl=10.0)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    mode = place.partition(":")[0]
    for _ in range(int(rounds)):
        if mode == "slot":
            handle = kit.semaphore(key, int(place[5:]), timeout=60)
        else:
            rw = kit.rwlock(key)
            handle = rw.read(timeout=60) if mode == "read" else rw.write(timeout=60)
        with handle:
            os.write(fd, f"+{mode} {os.getpid()}\n".encode())
            time.sleep(float(hold))
            os.write(fd, f"-{mode} {os.getpid()}\n".encode())
    kit.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Takes a place ROUNDS times in its own process and logs every entry and exit.

    python place_worker.py URL NAMESPACE KEY PLACE ROUNDS HOLD LOG [TOGETHER]

PLACE is ``read``, ``write`` or ``slot:N``. While holding it appends ``+<mode> <pid>``, sleeps
HOLD seconds, appends ``-<mode> <pid>`` and releases. With TOGETHER, the first round holds on
until LOG shows that many entries (at most 10 s): places that can be held together are.
Lines go to LOG with O_APPEND, so the file's order is the order in which they happened,
across processes.
"""

from __future__ import annotations

import os
import sys
import time

from lockkit_core import LockKit


def main() -> int:
    url, namespace, key, place, rounds, hold, log = sys.argv[1:8]
    together = int(sys.argv[8]) if len(sys.argv) > 8 else 0
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
            until = time.monotonic() + 10
            while together and time.monotonic() < until:
                with open(log) as seen:
                    if seen.read().count("+") >= together:
                        break
                time.sleep(0.01)
            together = 0
            os.write(fd, f"-{mode} {os.getpid()}\n".encode())
    kit.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One process of the Redis Cluster exclusion test: for each key in turn, take its lock and
check that nobody else is inside (a marker set with NX), count the visit, leave.

Usage: ``python cluster_worker_process.py URL NAMESPACE KEYS START`` (``KEYS``: how many, the
same names in the same order in every process; ``START``: the wall-clock time all processes
begin at, so they meet on every key). Each stays inside for a millisecond. ``--no-lock`` skips
the lock: then the processes overlap on many keys, which shows the check would catch it.
Prints ``overlaps <n>`` at the end.
"""

from __future__ import annotations

import sys
import time

from redis.cluster import ClusterNode, RedisCluster

from lockkit_core import LockKit


def main() -> None:
    url, namespace, count, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    locked = "--no-lock" not in sys.argv
    seeds = url.split("://", 1)[1].strip("/").split(",")
    nodes = [ClusterNode(h, int(p)) for h, p in (s.rsplit(":", 1) for s in seeds)]
    data = RedisCluster(startup_nodes=nodes)
    kit = LockKit(url, namespace=namespace, ttl=10)
    overlaps = 0
    time.sleep(max(0.0, start - time.time()))
    for n in range(count):
        key = f"k{n}"
        # the data lives in the lock's slot, as an app's would: one node serves both
        inside, visits = f"{{{namespace}:{key}}}:inside", f"{{{namespace}:{key}}}:visits"
        lock = kit.lock(key, timeout=30)
        if locked:
            lock.acquire()
        if not data.set(inside, "1", nx=True):
            overlaps += 1
        time.sleep(0.001)
        data.incr(visits)
        data.delete(inside)
        if locked:
            lock.release()
    print(f"overlaps {overlaps}", flush=True)
    kit.close()


if __name__ == "__main__":
    main()

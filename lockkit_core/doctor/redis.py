"""The checks of one Redis server: eviction, persistence, replication, cluster mode, round
trip and clock. ``redlock://`` runs them on each node (:func:`check_redlock`)."""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import TYPE_CHECKING, Any

from .findings import Finding, Level, unreachable

if TYPE_CHECKING:
    from ..backends.redis import RedisBackend
    from ..backends.redlock import RedlockBackend

__all__ = ["check_redis", "check_redlock"]

#: a round trip above this share of the ttl leaves too little of the lease: warn; above
#: ``RTT_UNSAFE``, the watchdog (every ttl/3) cannot renew in time: unsafe
RTT_WARN = 0.01
RTT_UNSAFE = 0.1
#: a server clock this far from ours (as a share of the ttl, at least ``CLOCK_MIN`` s) means
#: one of the clocks is not synchronised
CLOCK_WARN = 0.1
CLOCK_MIN = 0.5


def check_redis(
    backend: RedisBackend, ttl: float, *, where: str = "", quorum: bool = False
) -> list[Finding]:
    """Check the server behind ``backend`` for locks of ``ttl`` seconds. ``quorum``: it is
    one Redlock node (no fencing promise; a node that restarts empty may vote twice)."""
    client: Any = backend.client
    try:
        info = client.info("everything")
        config = _config(client)
        rtt = _round_trip(client)
        offset = _clock_offset(client)
    except Exception as exc:  # any driver error: the store cannot be checked, say so
        error = (
            backend.failure("run the doctor's checks", exc, may_retry=False)
            if _driver(exc)
            else exc
        )
        return [unreachable(error, where)]
    found = [
        _eviction(info, config, where),
        _persistence(info, config, where, quorum),
        _replication(info, where),
        _round_trip_finding(rtt, ttl, where),
        _clock(offset, ttl, where, quorum),
    ]
    if str(info.get("cluster_enabled", "0")) == "1":
        found.append(
            Finding(
                Level.WARN,
                "cluster",
                "the server runs in cluster mode: a failover to an "
                "asynchronous replica can grant a lock twice",
                "fence your writes, or use zookeeper:// or etcd:// where that must never happen",
                where,
            )
        )
    return found


def _driver(exc: Exception) -> bool:
    import redis

    return isinstance(exc, (redis.exceptions.RedisError, TimeoutError))


def _config(client: Any) -> dict[str, str]:
    """CONFIG GET of the settings we judge; {} where CONFIG is refused (managed services
    rename or forbid it: then INFO's copy of the eviction policy is used)."""
    from redis.exceptions import ResponseError

    try:
        found = client.config_get("maxmemory-policy")
        found.update(client.config_get("appendfsync"))
        return {str(k): str(v) for k, v in found.items()}
    except ResponseError:
        return {}


def _round_trip(client: Any, samples: int = 5) -> float:
    taken = []
    for _ in range(samples):
        started = time.monotonic()
        client.ping()
        taken.append(time.monotonic() - started)
    return statistics.median(taken)


def _clock_offset(client: Any) -> float:
    """The server's wall clock minus ours, at the middle of the request (seconds)."""
    before = time.time()
    seconds, micros = client.time()
    after = time.time()
    return float(seconds) + float(micros) / 1e6 - (before + after) / 2


def _eviction(info: dict[str, Any], config: dict[str, str], where: str) -> Finding:
    policy = config.get("maxmemory-policy") or str(info.get("maxmemory_policy", ""))
    if policy == "noeviction":
        return Finding(
            Level.OK, "maxmemory-policy", "noeviction: lock keys are never evicted", where=where
        )
    if not policy:
        return Finding(
            Level.WARN,
            "maxmemory-policy",
            "the eviction policy could not be read (CONFIG and INFO hide it)",
            "make sure it is noeviction",
            where,
        )
    limit = int(info.get("maxmemory", 0) or 0)
    when = "under memory pressure" if limit else "as soon as a maxmemory limit is set"
    why = (
        "our lock keys all carry a TTL, so volatile-* policies pick them too"
        if policy.startswith("volatile")
        else "every key may be evicted"
    )
    return Finding(
        Level.UNSAFE,
        "maxmemory-policy",
        f"{policy}: Redis may delete a held lock {when} ({why}), and a second holder gets it",
        "CONFIG SET maxmemory-policy noeviction (and in redis.conf), or give locks a Redis "
        "of their own with noeviction",
        where,
    )


def _persistence(info: dict[str, Any], config: dict[str, str], where: str, quorum: bool) -> Finding:
    aof = str(info.get("aof_enabled", "0")) == "1"
    fsync = config.get("appendfsync", "")
    if aof and fsync == "always":
        return Finding(
            Level.OK,
            "persistence",
            "appendonly yes, appendfsync always: a restart keeps every grant",
            where=where,
        )
    if quorum:
        return Finding(
            Level.WARN,
            "persistence",
            f"appendonly {'yes' if aof else 'no'}, appendfsync {fsync or '?'}: a node that "
            "restarts with its data lost can grant a lock another holder still has on the "
            "other nodes (two majorities)",
            "appendonly yes + appendfsync always, or keep a restarted node out for longer "
            "than the longest ttl",
            where,
        )
    return Finding(
        Level.WARN,
        "persistence",
        f"appendonly {'yes' if aof else 'no'}, appendfsync {fsync or '?'}: fencing tokens are "
        "strictly increasing across a restart only with an fsync'd AOF (else they rely on the "
        "server clock being ahead of the last grant), and a restart frees every held lock",
        "appendonly yes + appendfsync always if you rely on fencing tokens across restarts",
        where,
    )


def _replication(info: dict[str, Any], where: str) -> Finding:
    role = str(info.get("role", "master"))
    replicas = int(info.get("connected_slaves", 0) or 0)
    if role != "master":
        return Finding(
            Level.UNSAFE,
            "replication",
            f"this server is a {role}: lock writes are refused (READONLY)",
            "point the URL at the master",
            where,
        )
    if replicas:
        return Finding(
            Level.WARN,
            "replication",
            f"{replicas} asynchronous replica(s): a failover may promote one that never saw a "
            "grant, and the lock is granted twice",
            "fence your writes (held.token), or use zookeeper:// or etcd:// where a lock must "
            "never be granted twice",
            where,
        )
    return Finding(Level.OK, "replication", "a master without replicas", where=where)


def _round_trip_finding(rtt: float, ttl: float, where: str) -> Finding:
    text = f"round trip {rtt * 1000:.2f} ms against a ttl of {ttl:g} s"
    if rtt > ttl * RTT_UNSAFE:
        return Finding(
            Level.UNSAFE,
            "round-trip",
            text + ": renewals cannot keep up",
            "raise the ttl well above the round trip, or move closer",
            where,
        )
    if rtt > ttl * RTT_WARN:
        return Finding(
            Level.WARN, "round-trip", text + ": a large part of each lease", "raise the ttl", where
        )
    return Finding(Level.OK, "round-trip", text, where=where)


def _clock(offset: float, ttl: float, where: str, quorum: bool) -> Finding:
    text = f"server clock {offset * 1000:+.0f} ms from ours"
    if abs(offset) > max(CLOCK_MIN, ttl * CLOCK_WARN):
        why = (
            "a node whose clock jumps expires locks early (Redlock's timing assumption)"
            if quorum
            else "leases are timed by monotonic clocks, but fencing tokens after a restart "
            "lean on the server clock"
        )
        return Finding(
            Level.WARN,
            "clock",
            f"{text}: one of them is not synchronised; {why}",
            "run chrony or ntpd on both hosts, slewing, never stepping",
            where,
        )
    return Finding(Level.OK, "clock", text, where=where)


def check_redlock(backend: RedlockBackend, ttl: float) -> list[Finding]:
    """Every node's checks, and whether a majority of nodes can be reached."""
    found: list[Finding] = []
    down = 0
    for address, node in zip(backend.addresses, backend.nodes, strict=True):
        checks = check_redis(node, ttl, where=address, quorum=True)
        down += any(f.check == "reachable" for f in checks)
        found += checks
    alive = len(backend.nodes) - down
    level = Level.OK if down == 0 else Level.WARN if alive >= backend.quorum else Level.UNSAFE
    if level is Level.WARN:
        # a minority down: the lock still works, so each such node is a warning
        found = [
            dataclasses.replace(f, level=Level.WARN) if f.check == "reachable" else f for f in found
        ]
    found.insert(
        0,
        Finding(
            level,
            "quorum",
            f"{len(backend.nodes) - down} of {len(backend.nodes)} nodes answer; a lock needs "
            f"{backend.quorum}",
            "" if level is Level.OK else "bring the nodes that do not answer back",
        ),
    )
    return found

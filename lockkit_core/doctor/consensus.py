"""The checks of the consensus stores: ZooKeeper's session timeout against the ttl; etcd's
leader, members and alarms, and credentials sent without TLS."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import LockKitError
from .findings import Finding, Level, unreachable

if TYPE_CHECKING:
    from ..backends.etcd import EtcdBackend
    from ..backends.zookeeper import ZooKeeperBackend

__all__ = ["check_etcd", "check_zookeeper"]


def check_zookeeper(backend: ZooKeeperBackend, ttl: float) -> list[Finding]:
    """The session timeout the ensemble granted, against ``ttl``: a lock on ZooKeeper is
    bound to its holder's session, so a crashed holder blocks others for the session
    timeout, whatever the ttl (and a ttl take-over trusts the leader's clock)."""
    try:
        client = backend.session.client()
    except LockKitError as exc:
        return [unreachable(exc, servers=True)]
    # kazoo keeps the negotiated value (ms) only here; the server may clamp what we asked
    # for to its [2, 20] x tickTime
    granted = getattr(client, "_session_timeout", None)
    session = granted / 1000.0 if isinstance(granted, (int, float)) else None
    if session is None:
        return [
            Finding(
                Level.WARN,
                "session-timeout",
                "the granted session timeout is unknown",
                "compare the server's maxSessionTimeout with your ttl",
            )
        ]
    text = f"session timeout {session:g} s (granted by the ensemble) against a ttl of {ttl:g} s"
    if session > ttl:
        return [
            Finding(
                Level.WARN,
                "session-timeout",
                text + ": a crashed holder keeps its lock until its session expires, longer "
                "than the ttl says",
                "lower OPTIONS session_timeout (the server clamps it to 2..20 tickTime), or "
                "raise the ttl to match",
            )
        ]
    return [Finding(Level.OK, "session-timeout", text)]


def check_etcd(backend: EtcdBackend, ttl: float) -> list[Finding]:
    """Credentials in clear, then the cluster's leader, members and alarms."""
    found: list[Finding] = []
    client = backend.client
    if backend.url.username and client.tls is None:
        found.append(
            Finding(
                Level.UNSAFE,
                "credentials",
                "a user and password go to etcd over plain HTTP: anyone on the path can read "
                "them and act as that user (take or delete any lock)",
                "serve etcd with TLS and add ?tls=1 (with ca_file) to the URL",
            )
        )
    try:
        status = client.call("maintenance/status", {}, "read the member status")
        members = client.call("cluster/member/list", {}, "list the members").get("members", [])
        alarms = client.call("maintenance/alarm", {}, "read the alarms").get("alarms", [])
    except LockKitError as exc:
        return [*found, unreachable(exc, servers=True)]
    leader = str(status.get("leader", "0"))
    if leader in ("", "0"):
        found.append(
            Finding(
                Level.UNSAFE,
                "leader",
                "the member answering has no leader: no lock can be granted",
                "restore a majority of members",
            )
        )
    else:
        found.append(Finding(Level.OK, "leader", f"leader {leader}"))
    count = len(members)
    if count < 3:
        found.append(
            Finding(
                Level.WARN,
                "members",
                f"{count} member(s): losing one stops every lock",
                "run 3 or 5 members",
            )
        )
    else:
        found.append(Finding(Level.OK, "members", f"{count} members"))
    for alarm in alarms:
        kind = _text(alarm.get("alarm", "?"))
        found.append(
            Finding(
                Level.UNSAFE,
                "alarm",
                f"alarm {kind} on member {alarm.get('memberID', '?')}: writes may be refused",
                "clear it (etcdctl alarm list / disarm) after fixing the cause",
            )
        )
    for error in status.get("errors", []) or []:
        found.append(Finding(Level.WARN, "member-errors", _text(error), "see the member's log"))
    return found


def _text(value: Any) -> str:
    return str(value)

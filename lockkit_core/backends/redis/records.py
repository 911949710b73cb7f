"""The admin reads of ``redis://``: lock records as :class:`~lockkit_core.backends.base.Lease`
(the holder record ``"<id>|<token>|<started>|<holder>"`` of ``lua/lock.lua``, its remaining
lease and its queue's length)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..base import Lease
from .listener import as_text
from .scripts import PREFIX

if TYPE_CHECKING:
    from .backend import RedisBackend

__all__ = ["list_leases", "parse_record", "read_leases"]


def parse_record(stored_key: str, value: bytes | str | None, pttl: int) -> Lease | None:
    """The lease a holder record ``value`` (None: free) with ``pttl`` ms left describes."""
    if value is None:
        return None
    text = as_text(value)
    owner, _, rest = text.partition("|")
    token_text, _, holder = rest.partition("|")
    started = None
    # "<ms>|<holder>" since the record keeps its start; a record written before holds
    # "<holder>" alone, which never is all digits ("<host> pid <pid>").
    started_ms, bar, after = holder.partition("|")
    if bar and started_ms.isdigit():
        started, holder = int(started_ms) / 1000.0, after
    return Lease(
        key=stored_key,
        owner_hint=owner[:8],  # an owner id starts with its hint
        token=int(token_text) if token_text.isdigit() else None,
        ttl_remaining=pttl / 1000.0 if pttl >= 0 else None,
        holder=holder or None,
        started=started,
    )


def read_leases(backend: RedisBackend, lock_keys: list[str]) -> list[Lease]:
    """The leases held on ``lock_keys`` (stored keys), with their queues' lengths."""

    def fetch() -> list[Any]:
        pipe = backend.client.pipeline(transaction=False)
        for lock_key in lock_keys:
            pipe.get(lock_key)
            pipe.pttl(lock_key)
            pipe.zcard(lock_key + ":q")  # the waiters queued on it
        return pipe.execute()

    replies = backend._call("read locks", fetch, retry=True)
    leases = []
    for i, lock_key in enumerate(lock_keys):
        value, pttl, waiters = replies[3 * i : 3 * i + 3]
        lease = parse_record(lock_key[len(PREFIX) : -1], value, pttl)
        if lease is not None:
            leases.append(dataclasses.replace(lease, waiters=int(waiters)))
    return leases


def list_leases(backend: RedisBackend, prefix: str) -> list[Lease]:
    """The leases held on keys that start with ``prefix`` (namespace included)."""
    pattern = PREFIX + _glob_escape(prefix) + "*}"

    def scan() -> list[str]:
        found = []
        for raw in backend.client.scan_iter(match=pattern, count=1000, _type="string"):
            name = as_text(raw)
            if name.endswith("}"):
                found.append(name)
        return found

    lock_keys = sorted(set(backend._call("list locks", scan, retry=True)))
    return read_leases(backend, lock_keys) if lock_keys else []


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)

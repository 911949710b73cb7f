"""The admission rule of read-write locks and semaphores (lockkit_core.places), pure."""

from __future__ import annotations

from lockkit_core.places import admitted, fits


def test_a_writer_fits_only_alone_readers_beside_readers_slots_below_the_limit() -> None:
    assert fits("write", 0, []) and not fits("write", 0, ["read"])
    assert fits("read", 0, ["read", "read"]) and not fits("read", 0, ["write"])
    assert fits("slot", 2, ["slot"]) and not fits("slot", 2, ["slot", "slot"])


def test_the_queue_is_served_in_order_and_stops_at_the_first_that_does_not_fit() -> None:
    queue = [("r1", "read"), ("r2", "read"), ("w", "write"), ("r3", "read")]
    assert admitted([], queue, 0) == ["r1", "r2"]  # r3 never passes the waiting writer
    assert admitted(["read"], [("w", "write"), ("r", "read")], 0) == []
    assert admitted([], [("w", "write"), ("r", "read")], 0) == ["w"]
    assert admitted(["slot"], [(str(i), "slot") for i in range(4)], 3) == ["0", "1"]

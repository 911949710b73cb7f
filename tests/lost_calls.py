"""An ``on_lost`` callback for the fault tests: it counts its calls and sets an event on the
first, so a test can wait for the loss and then check it was reported once."""

from __future__ import annotations

import threading

from lockkit_core import Lock


class LostCalls:
    """An ``on_lost`` callback that counts its calls and sets :attr:`event` on the first."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.calls = 0

    def __call__(self, lock: Lock) -> None:
        self.calls += 1
        self.event.set()

"""``zookeeper://`` on an event loop: the backend's plans of requests, sent with kazoo's
``*_async`` methods and awaited through futures of the loop.

kazoo has no asyncio API, but each ``*_async`` method only queues the request for the
client's one connection thread and returns an ``IAsyncResult``. Its ``rawlink`` callback runs
on kazoo's completion thread, which passes the answer to the waiting task's loop with
``call_soon_threadsafe``: no thread per request, per task or per waiter.

The ``*_async`` calls themselves are made by the session's one :class:`Sender` thread, not on
the loop: each wakes kazoo's connection thread with a socket write, which gives up the GIL to
it, and the loop would wait for it back once per request (measured: about 130 µs each, 45 ms
of a burst of 50 waiters). The loop only puts the request on a queue. Watches wake a
waiter the same way (:class:`AsyncZooKeeperWaiter`). The decisions are the blocking
operations' own: :meth:`ZooKeeperBackend.attempt` and its siblings are written once, as
plans of :class:`~.session.Request` steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ...errors import BackendUnavailable
from ...py310 import within
from ...sansio import arun
from ..aio import AsyncOps, AsyncWaiter, LoopEvent
from ..base import Grant
from .session import Request, Session, Steps
from .waiter import ZooKeeperWaiter

if TYPE_CHECKING:
    from .backend import ZooKeeperBackend

__all__ = ["AsyncZooKeeperWaiter", "Sender", "ZooKeeperOps", "perform"]

T = TypeVar("T")

#: seconds the sender thread stays with nothing to send before it exits
IDLE = 30.0
#: attempts of one loop in flight at once: an attempt on a key contended lately lists its
#: whole queue (see LockTree.create), so a thousand waiters arriving together would hold a
#: thousand such lists at once (measured: 80 MiB for 1,000 waiters); the others wait their turn
ATTEMPTS = 16


class Sender:
    """One thread that makes the ``*_async`` calls of every event loop's requests on one
    session, in the order they were put (the server answers a session in that order too).

    A loop's requests are handed over once per loop iteration, after every task that was
    ready has run: the thread (and kazoo's, which it wakes) is not competing with the loop
    for the GIL while a burst of tasks makes its requests."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[list[Callable[[], None]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pending: dict[asyncio.AbstractEventLoop, list[Callable[[], None]]] = {}

    def put(self, send: Callable[[], None]) -> None:
        """Have ``send`` called on the sender thread, after this loop iteration."""
        loop = asyncio.get_running_loop()
        with self._lock:
            pending = self._pending.get(loop)
            if pending is None:
                pending = self._pending[loop] = []
                loop.call_soon(self._flush, loop)
            pending.append(send)

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            batch = self._pending.pop(loop, [])
            self._queue.put(batch)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="lockkit-zookeeper-sender", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                batch = self._queue.get(timeout=IDLE)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._thread = None
                        return
                continue
            for send in batch:
                send()  # never raises: see perform()


def _deliver(future: asyncio.Future[Any], result: Any) -> None:
    """On the loop: pass kazoo's answer on, unless the caller stopped waiting."""
    if future.done():
        return
    exc = result.exception
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result.value)


def _failed(future: asyncio.Future[Any], exc: Exception) -> None:
    if not future.done():
        future.set_exception(exc)


async def perform(session: Session, sender: Sender, request: Request) -> Any:
    """:meth:`Session.perform` on the event loop: the same answers, the same errors, within
    the same socket timeout."""
    client = session.client()
    loop = asyncio.get_running_loop()
    futures = [loop.create_future() for _ in request.starts]

    def answered(future: asyncio.Future[Any], result: Any) -> None:
        # kazoo's completion thread: hand the answer to the loop, never block here.
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(_deliver, future, result)

    def send() -> None:
        for start, future in zip(request.starts, futures, strict=True):
            try:
                start(client).rawlink(lambda result, future=future: answered(future, result))
            except Exception as exc:  # raised by kazoo when sending (a closed connection)
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_failed, future, exc)

    sender.put(send)
    try:
        done = await within(
            asyncio.gather(*futures, return_exceptions=True), session.socket_timeout
        )
    except TimeoutError as exc:
        raise BackendUnavailable(
            f"ZooKeeper did not answer within {session.socket_timeout:g} s to {request.what}"
        ) from exc
    answers: list[Any] = []
    for answer in done:
        if isinstance(answer, Exception):
            error = session.translate(request.what, answer)
            if error is not answer:
                raise error from answer
            if not request.many:
                raise answer  # an answer such as "no such node", for the plan to judge
        answers.append(answer)
    return answers if request.many else answers[0]


class ZooKeeperOps(AsyncOps):
    """The lock operations of one :class:`ZooKeeperBackend` on the running loop."""

    def __init__(self, backend: ZooKeeperBackend) -> None:
        self._backend = backend
        self._sender = backend.sender
        self._attempts = asyncio.Semaphore(ATTEMPTS)

    async def run(self, steps: Steps[T]) -> T:
        """Run a plan of requests on the loop."""
        session = self._backend.session
        if session.needs_start():
            # Connecting is kazoo's blocking start (once per kit, up to the socket timeout):
            # done on a worker thread so the loop keeps running meanwhile.
            await asyncio.to_thread(session.client)
        return await arun(steps, lambda request: perform(session, self._sender, request))

    async def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        async with self._attempts:
            return await self.run(self._backend.attempt(key, owner, ttl))

    async def release(self, key: str, owner: str) -> bool:
        return await self.run(self._backend.releasing(key, owner))

    async def extend(self, key: str, owner: str, ttl: float) -> bool:
        return (await self.adopt(key, owner, ttl)).acquired

    async def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        return await self.run(self._backend.adopting(key, owner, ttl))

    async def waiter(self, key: str, owner: str, fair: bool) -> AsyncWaiter:
        return AsyncZooKeeperWaiter(self, ZooKeeperWaiter(self._backend, key, owner))


class AsyncZooKeeperWaiter(AsyncWaiter):
    """A :class:`ZooKeeperWaiter` (its watches on the node ahead, its decisions) whose
    watch events wake the loop instead of a sleeping thread."""

    def __init__(self, ops: ZooKeeperOps, waiter: ZooKeeperWaiter) -> None:
        self._ops = ops
        self._waiter = waiter
        self._event = LoopEvent()
        waiter.bell = self._event.set

    async def wait(self, timeout: float) -> Grant | None:
        end = time.monotonic() + timeout
        while (left := self._waiter.look(end)) is not None:
            await self._event.wait(left)
        return None  # the next attempt claims the lock if we are first now

    async def close(self, acquired: bool, *, reachable: bool = True) -> None:
        await self._ops.run(self._waiter.leaving(acquired, reachable))

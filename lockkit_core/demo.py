"""``lockkit demo``: the payment-SMS race, run once without a lock and once with one.

A payment provider calls our webhook more than once for the same payment, and several
workers pick the calls up at about the same time. Each worker does::

    if not already_sent(order):     # check
        gateway.send_sms(order)     # ~2 ms at the gateway
        mark_sent(order)            # record

Two workers that both pass the check before either records the send both send: the customer
gets two "payment received" SMS. Wrapping check-then-send in ``kit.lock(f"sms:order:{id}")``
makes it one step as far as the other workers are concerned.

The workers are separate processes (started with "spawn", so the functions they run live at
module level), released together by a barrier so that they collide. The parent feeds a
progress bar from a shared counter and, at the end, counts the lines each order got in the
outbox file.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from multiprocessing.sharedctypes import Synchronized, SynchronizedArray
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import click

from .config import UNSET
from .errors import ConfigError
from .kit import LockKit

__all__ = ["RUNS", "Tally", "run_demo"]

#: the two runs, by the name the tally table shows, and whether they take the lock
RUNS = (("without a lock", False), ("with kit.lock()", True))

#: seconds the parent waits for every worker to reach the start line
_START_TIMEOUT = 60.0
#: seconds a worker waits for one order's lock before giving up (a bug if it ever happens)
_LOCK_TIMEOUT = 30.0


@dataclass(frozen=True)
class _Job:
    url: str
    namespace: str | None
    outbox: str
    markers: str
    errors: str
    orders: int
    latency: float
    locked: bool
    seed: int


@dataclass(frozen=True)
class Tally:
    """What one run did: SMS sent per order, counted from the outbox."""

    orders: int
    sent: int
    duplicated: int
    missing: int
    seconds: float

    @property
    def exact(self) -> bool:
        """Every order got exactly one SMS."""
        return self.duplicated == 0 and self.missing == 0 and self.sent == self.orders


def _walk(orders: int, rng: random.Random) -> list[int]:
    """Every order id once, in an order of this worker's own."""
    walk = list(range(1, orders + 1))
    rng.shuffle(walk)
    return walk


def _send_once(job: _Job, outbox: int, order_id: int) -> None:
    """Check, send, record: the code the lock has to protect."""
    marker = os.path.join(job.markers, str(order_id))
    if os.path.exists(marker):
        return
    time.sleep(job.latency)  # the SMS gateway
    os.write(outbox, f"{order_id} {os.getpid()}\n".encode())
    with open(marker, "w"):
        pass


def _worker(
    job: _Job,
    index: int,
    ready: Synchronized[int],
    go: Event,
    progress: Synchronized[int],
    finished: SynchronizedArray[float],
) -> None:
    """One worker process: walk every order, sending the SMS that seems not sent yet."""
    try:
        kit = (
            LockKit(job.url, namespace=UNSET if job.namespace is None else job.namespace, ttl=5.0)
            if job.locked
            else None
        )
        walk = _walk(job.orders, random.Random(job.seed * 1000 + index))
        outbox = os.open(job.outbox, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except Exception as exc:
        _report(job, index, exc)
        raise SystemExit(1) from None
    try:
        with ready.get_lock():
            ready.value += 1
        if not go.wait(_START_TIMEOUT):
            raise SystemExit(1)
        for order_id in walk:
            if kit is None:
                _send_once(job, outbox, order_id)
            else:
                with kit.lock(f"sms:order:{order_id}", timeout=_LOCK_TIMEOUT):
                    _send_once(job, outbox, order_id)
            with progress.get_lock():
                progress.value += 1
        finished[index] = time.monotonic()
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group; the parent reports it
        raise SystemExit(130) from None
    except Exception as exc:
        _report(job, index, exc)
        raise SystemExit(1) from None
    finally:
        os.close(outbox)
        if kit is not None:
            kit.close()


def _report(job: _Job, index: int, exc: BaseException) -> None:
    with open(os.path.join(job.errors, f"worker-{index}"), "w") as out:
        out.write(f"{type(exc).__name__}: {exc}")


def _worker_errors(job: _Job) -> list[str]:
    return [
        f"worker {path.name.removeprefix('worker-')}: {path.read_text()}"
        for path in sorted(Path(job.errors).iterdir())
    ]


def _count(job: _Job, seconds: float) -> Tally:
    with open(job.outbox) as outbox:
        per_order = Counter(int(line.split()[0]) for line in outbox if line.strip())
    return Tally(
        orders=job.orders,
        sent=sum(per_order.values()),
        duplicated=sum(1 for n in per_order.values() if n > 1),
        missing=sum(1 for order_id in range(1, job.orders + 1) if per_order[order_id] == 0),
        seconds=seconds,
    )


def _wait_until_ready(procs: list[BaseProcess], ready: Synchronized[int], job: _Job) -> None:
    """Return once every worker is at the start line; fail at once if one died on the way."""
    give_up = time.monotonic() + _START_TIMEOUT
    while ready.value < len(procs):
        if any(proc.exitcode is not None for proc in procs) or time.monotonic() > give_up:
            for proc in procs:
                proc.join(1.0)
            problems = _worker_errors(job) or ["the workers did not all start in time"]
            raise click.ClickException("the demo could not start: " + "; ".join(problems))
        time.sleep(0.005)


def _run(job: _Job, workers: int, label: str) -> Tally:
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Value("i", 0)
    go = ctx.Event()
    progress = ctx.Value("i", 0)
    finished = ctx.Array("d", workers)
    procs: list[BaseProcess] = [
        ctx.Process(
            target=_worker,
            args=(job, i, ready, go, progress, finished),
            name=f"lockkit-demo-{i}",
            daemon=True,
        )
        for i in range(workers)
    ]
    for proc in procs:
        proc.start()
    try:
        _wait_until_ready(procs, ready, job)
        started = time.monotonic()
        go.set()
        total = job.orders * workers
        shown = 0
        with click.progressbar(length=total, label=label, show_eta=False, width=30) as bar:
            while any(proc.is_alive() for proc in procs):
                done = progress.value
                if done > shown:
                    bar.update(done - shown)
                    shown = done
                time.sleep(0.02)
            bar.update(progress.value - shown)
    finally:
        for proc in procs:
            proc.join(5.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
    problems = _worker_errors(job)
    if problems or any(proc.exitcode != 0 for proc in procs):
        problems = problems or [
            f"{proc.name} exited with status {proc.exitcode}" for proc in procs if proc.exitcode
        ]
        raise click.ClickException("the demo failed: " + "; ".join(problems))
    return _count(job, max(finished[:]) - started)


def _check_backend(url: str, namespace: str | None) -> str:
    """Fail early, in the parent, on a URL the workers could not share."""
    with LockKit(url, namespace=UNSET if namespace is None else namespace) as kit:
        info = kit.admin.backend_info()
    if "cross_process" not in info.capabilities and "cross_host" not in info.capabilities:
        raise ConfigError(
            f"the demo's workers are separate processes, and the {info.scheme}:// backend only "
            "locks among the threads of one process; use file:// (the default, no server) "
            "or redis://HOST:PORT/DB"
        )
    return f"{info.url} ({info.grade})"


def _table(rows: list[tuple[str, Tally]]) -> str:
    header = ("run", "orders", "SMS sent", "orders with 2+ SMS", "orders with none", "time")
    body = [
        (name, str(t.orders), str(t.sent), str(t.duplicated), str(t.missing), f"{t.seconds:.2f} s")
        for name, t in rows
    ]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)
        )
        for row in [header, *body]
    )


def run_demo(
    *,
    url: str,
    namespace: str | None = None,
    workers: int = 4,
    orders: int = 200,
    latency: float = 0.002,
    echo: Callable[[str], Any] = click.echo,
) -> bool:
    """Run the race without and with a lock; print both tallies. True if the locked run sent
    exactly one SMS per order."""
    if workers < 2 or orders < 1 or latency < 0:
        raise ConfigError("the demo needs at least 2 workers, 1 order and a latency >= 0")
    backend = _check_backend(url, namespace)
    echo(
        f'lockkit demo: {workers} worker processes race to send the "payment received" SMS '
        f"for the same {orders} orders"
    )
    echo(f"backend: {backend}")
    echo("")
    seed = random.SystemRandom().randrange(1 << 30)
    tallies: list[tuple[str, Tally]] = []
    with tempfile.TemporaryDirectory(prefix="lockkit-demo-") as scratch:
        for name, locked in RUNS:
            base = os.path.join(scratch, "locked" if locked else "unlocked")
            job = _Job(
                url=url,
                namespace=namespace,
                outbox=os.path.join(base, "outbox.log"),
                markers=os.path.join(base, "sent"),
                errors=os.path.join(base, "errors"),
                orders=orders,
                latency=latency,
                locked=locked,
                seed=seed,
            )
            for path in (job.markers, job.errors):
                os.makedirs(path)
            tallies.append((name, _run(job, workers, f"sending SMS {name}".ljust(28))))
    echo("")
    echo(_table(tallies))
    echo("")
    unlocked, locked_tally = tallies[0][1], tallies[1][1]
    if not locked_tally.exact:
        echo(
            f"Verdict: FAILED: with the lock, {locked_tally.duplicated} orders got more than one "
            f"SMS and {locked_tally.missing} got none. The lock did not exclude; please report "
            "this with the backend URL."
        )
        return False
    if unlocked.duplicated:
        echo(
            f"Verdict: without a lock {unlocked.duplicated} of {orders} orders got two or more "
            "SMS; with kit.lock() every order got exactly one."
        )
    else:
        echo(
            "Verdict: with kit.lock() every order got exactly one SMS. The unlocked run was "
            "lucky this time and sent no duplicates; a longer --latency widens the race."
        )
    return True

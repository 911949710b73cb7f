"""``python -m sample_projects.celery_sms``: every payment SMS goes out once.

Starts a redis-server and a prefork worker (2 children), then two producer processes that
both enqueue the confirmation of every order at the same moment. Order 3's first run kills
its pool child mid-task (it is requeued, and runs once the dead child's lease is over);
order 4 runs past the broker's 3 s visibility timeout (the broker hands it out again while it
runs). The SMS log must end with exactly one line per order; the exit status says if it did.
``--without-locks`` runs the same story with lockkit turned off, to see what it prevents.
``--embedded`` needs no server: a filesystem broker, results and ``file://`` locks in a
temporary directory (one host; the filesystem broker has no visibility timeout to show).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from lockkit_core.testing import RedisServer
from sample_projects.celery_sms.producer import ORDERS, produce

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    """Run the story; 0 if every order got exactly one SMS."""
    work = Path(tempfile.mkdtemp(prefix="celery-sms-"))
    embedded = "--embedded" in sys.argv[1:]
    store: AbstractContextManager[Any] = nullcontext() if embedded else RedisServer()
    with store as server:
        os.environ["SMS_LOG"] = str(work / "sms.log")
        if embedded:
            for folder in ("queue", "processed", "results", "locks", "control"):
                (work / folder).mkdir()
            os.environ["SMS_EMBEDDED"] = str(work)
        else:
            os.environ["SMS_REDIS"] = server.url.rsplit("/", 1)[0]
        if "--without-locks" in sys.argv[1:]:
            os.environ["SMS_UNLOCKED"] = "1"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        log = (work / "worker.log").open("wb")
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "sample_projects.celery_sms.tasks",
             "worker", "--pool=prefork", "--concurrency=2", "-l", "info",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            while b"ready." not in (work / "worker.log").read_bytes():
                if worker.poll() is not None:
                    print((work / "worker.log").read_text(), file=sys.stderr)
                    return 1
                time.sleep(0.1)
            print("worker ready; two producers enqueue every order at once:")
            ctx = multiprocessing.get_context("spawn")
            start_at = time.time() + 1.5
            producers = [ctx.Process(target=produce, args=(start_at, w)) for w in ("web1", "web2")]
            for p in producers:
                p.start()
            for p in producers:
                p.join()
            print("waiting for the worker (order 3 waits out its dead child's 4 s lease) ...")
            time.sleep(16)
        finally:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(10)
            except subprocess.TimeoutExpired:  # a warm shutdown waiting on deferred copies
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(5)
            log.close()
    lines = (work / "sms.log").read_text().splitlines() if (work / "sms.log").exists() else []
    print(f"\nSMS log ({work / 'sms.log'}):")
    for line in lines:
        print("  " + line)
    sent = Counter(int(line.split("\t")[1].rsplit(" ", 1)[1]) for line in lines)
    skipped = (work / "worker.log").read_text().count("duplicate ")
    print(f"\nduplicates the worker logged and skipped or deferred: {skipped}")
    ok = all(sent[order] == 1 for order in ORDERS) and len(lines) == len(ORDERS)
    print("exactly one SMS per order" if ok else f"WRONG: SMS per order {dict(sent)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

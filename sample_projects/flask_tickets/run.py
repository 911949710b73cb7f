"""Run the flask_tickets experiments under gunicorn and print what happened.

python sample_projects/flask_tickets/run.py            # file:// locks (the default)
python sample_projects/flask_tickets/run.py --redis    # redis:// (starts a redis-server)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from serve import Gunicorn, concurrently

from lockkit_core.testing import RedisServer


def todos(port: int, prefix: str, requests: int) -> tuple[int, int, set[int]]:
    """PUT /todos?index=N from many clients; how many read back another request's value."""
    calls = [("PUT", f"{prefix}/todos?index={i % 2}", f"value-{i}") for i in range(requests)]
    answers = [json.loads(body) for status, body in concurrently(port, calls) if status == 200]
    mismatches = sum(a["written"] != a["read"] for a in answers)
    return len(answers), mismatches, {a["pid"] for a in answers}


def seats(port: int, prefix: str, buyers: int, seats: int) -> tuple[int, int]:
    """``buyers`` people grab ``seats`` seats; how many got a ticket, how many were sold."""
    event = "locked" if not prefix else "unlocked"
    concurrently(port, [("PUT", f"/events/{event}?seats={seats}", "")])
    calls = [("POST", f"{prefix}/events/{event}/book", f"buyer=b{i}") for i in range(buyers)]
    tickets = sum(status == 201 for status, _ in concurrently(port, calls))
    state = json.loads(concurrently(port, [("GET", f"/events/{event}", "")])[0][1])
    return tickets, seats - state["left"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", action="store_true", help="lock on a redis-server")
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    with ExitStack() as stack:
        data = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="flask-tickets-")))
        env = {"TICKETS_DATA_DIR": str(data), "TICKETS_LOCKKIT_URL": f"file://{data}/locks"}
        if args.redis:
            env["TICKETS_LOCKKIT_URL"] = stack.enter_context(RedisServer()).url
        server = stack.enter_context(Gunicorn(env, workers=2, threads=4))
        print(f"gunicorn: 2 workers x 4 threads, locks on {env['TICKETS_LOCKKIT_URL']}")
        failed = False
        for label, prefix in (("without a lock", "/unlocked"), ("with @lock_route", "")):
            done, bad, pids = todos(server.port, prefix, args.requests)
            print(
                f"PUT /todos {label:17}: {done} requests by {len(pids)} workers, "
                f"{bad} read back another request's value"
            )
            tickets, sold = seats(server.port, prefix, buyers=40, seats=10)
            print(f"40 buyers, 10 seats {label:17}: {tickets} tickets issued, {sold} seats taken")
            failed |= bool(prefix == "" and (bad or tickets != 10 or sold != 10))
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

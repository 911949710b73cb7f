"""Enqueue the test project's tasks from a process of its own (the tests' database file):

    python djtasks_client.py TASK ORDER_ID [THREADS]

THREADS threads enqueue the same call at once (after a barrier); prints the result ids as a
JSON list, one per thread.
"""

from __future__ import annotations

import json
import sys
import threading

import django

django.setup()

from django.db import connection  # noqa: E402
from djproject import tasks  # noqa: E402


def main() -> None:
    name, order_id = sys.argv[1], int(sys.argv[2])
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    task = getattr(tasks, name)
    barrier = threading.Barrier(threads)
    ids: list[str] = []
    errors: list[BaseException] = []

    def enqueue() -> None:
        barrier.wait()
        try:
            ids.append(str(task.enqueue(order_id).id))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    workers = [threading.Thread(target=enqueue) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    if errors:
        raise errors[0]
    print(json.dumps(ids))


if __name__ == "__main__":
    main()

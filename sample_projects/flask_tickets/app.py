"""flask_tickets: many people grab the last seats of an event, and a todo list written and
read back by many workers. Run it with ``scripts/flask-tickets`` (see README.md).

Settings come from the environment with Flask's prefix: ``TICKETS_LOCKKIT_URL``,
``TICKETS_DATA_DIR`` (where the seats and todos live), ``TICKETS_WORK_SECONDS`` (how long a
request works between its read and its write, to make races visible).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from flask import Flask, abort, request

from lockkit_flask import LockKit, lock_route

locks = LockKit()


def create_app(**config: Any) -> Flask:
    """The application factory (``gunicorn 'app:create_app()'``)."""
    app = Flask("flask_tickets")
    app.config.update(
        DATA_DIR=os.path.join(tempfile.gettempdir(), "flask-tickets"),
        WORK_SECONDS=0.005,
        LOCKKIT_NAMESPACE="tickets",
    )
    app.config.from_prefixed_env("TICKETS")
    app.config.update(config)
    data = Path(app.config["DATA_DIR"])
    data.mkdir(parents=True, exist_ok=True)
    work = float(app.config["WORK_SECONDS"])
    locks.init_app(app)

    def write_then_read(index: int) -> dict[str, Any]:
        # The experiment: write the value, work a little, read it back. Another request
        # writing the same file in between makes the two differ.
        path = data / f"todo-{index}.txt"
        written = request.get_data(as_text=True)
        path.write_text(written)
        time.sleep(work)
        read = path.read_text()
        return {"index": index, "written": written, "read": read, "pid": os.getpid()}

    @app.put("/todos")
    @lock_route("todo:{query[index]}", wait=30)
    def put_todo() -> dict[str, Any]:
        return write_then_read(request.args.get("index", type=int, default=0))

    @app.put("/unlocked/todos")
    def put_todo_unlocked() -> dict[str, Any]:
        return write_then_read(request.args.get("index", type=int, default=0))

    def seats_file(event: str) -> Path:
        if not event.isalnum():
            abort(404)
        return data / f"event-{event}.json"

    @app.put("/events/<event>")
    def open_event(event: str) -> dict[str, Any]:
        seats = int(request.args.get("seats", 10))
        seats_file(event).write_text(json.dumps({"left": seats, "sold": []}))
        return {"event": event, "left": seats}

    @app.get("/events/<event>")
    def show_event(event: str) -> Any:
        return json.loads(seats_file(event).read_text())

    def book(event: str) -> tuple[dict[str, Any], int]:
        path = seats_file(event)
        state = json.loads(path.read_text())
        if state["left"] <= 0:
            return {"event": event, "error": "sold out"}, 410
        time.sleep(work)  # payment provider round trip
        buyer = request.form.get("buyer", "anonymous")
        state["left"] -= 1
        state["sold"].append(buyer)
        path.write_text(json.dumps(state))
        return {"event": event, "seat": len(state["sold"]), "buyer": buyer}, 201

    @app.post("/events/<event>/book")
    @lock_route("event:{event}", wait=30)
    def book_seat(event: str) -> tuple[dict[str, Any], int]:
        return book(event)

    # The decorators in the other order lock just the same: lockkit finds the route by its view.
    @lock_route("event:{event}")
    @app.post("/events/<event>/refund")
    def refund(event: str) -> tuple[dict[str, Any], int]:
        time.sleep(work * 100)  # long enough for concurrent refunds to overlap
        return {"event": event, "refunded": True}, 200

    @app.post("/unlocked/events/<event>/book")
    def book_seat_unlocked(event: str) -> tuple[dict[str, Any], int]:
        return book(event)

    @app.get("/health")
    def health() -> str:
        return "ok"

    return app

"""The Flask app of the route tests (``app``: a file:// store per test, the extension on it),
``other``, another owner on that store, and ``held(app, key)``. A test module that defines
its own ``app`` or ``other`` uses its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask

from lockkit_core import LockKit as CoreKit
from lockkit_flask import LockKit, state_of


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    app = Flask("tickets")
    app.config.update(TESTING=True, LOCKKIT_URL=f"file://{tmp_path / 'locks'}")
    LockKit(app)
    return app


@pytest.fixture
def other(app: Flask) -> Iterator[CoreKit]:
    """Another owner on the app's store."""
    with CoreKit(app.config["LOCKKIT_URL"]) as kit:
        yield kit


def held(app: Flask, key: str) -> bool:
    """True if anyone holds ``key`` on the app's store."""
    return state_of(app).kit.admin.info(key) is not None

"""When a route's lock ends: with the final response, whatever a later layer made of it."""

from __future__ import annotations

from pathlib import Path

from flask import Flask, Response, request

from lockkit_flask import LockKit, lock_blueprint, lock_route, state_of


def _app(tmp_path: Path) -> Flask:
    app = Flask("release")
    app.config.update(TESTING=True, LOCKKIT_URL=f"file://{tmp_path / 'locks'}")
    LockKit(app)
    return app


def _held(app: Flask, key: str) -> bool:
    return state_of(app).kit.admin.info(key) is not None


def test_a_stream_an_after_request_replaces_releases_with_the_request(tmp_path: Path) -> None:
    app = _app(tmp_path)

    @app.get("/export")
    @lock_route("export", ttl=None)  # no lease: nothing but the release frees it
    def export() -> Response:
        return Response(iter(["a", "b"]))

    @app.after_request
    def replace(response: Response) -> Response:
        return Response("replaced") if request.args.get("replace") else response

    client = app.test_client()
    assert client.get("/export?replace=1").text == "replaced"
    assert not _held(app, "export")
    streamed = client.get("/export")  # not replaced: still held until the stream is closed
    assert _held(app, "export")
    assert streamed.get_data() == b"ab"
    streamed.close()
    assert not _held(app, "export")


def test_a_response_replaced_by_a_stream_releases_when_the_stream_closes(
    tmp_path: Path,
) -> None:
    app = _app(tmp_path)

    @app.get("/report")
    @lock_route("report", ttl=None)
    def report() -> str:
        return "short"

    @app.after_request
    def stream(response: Response) -> Response:
        return Response(iter(["long", "er"]))

    response = app.test_client().get("/report")
    assert _held(app, "report")  # the bytes the lock protects are still to come
    assert response.get_data() == b"longer"
    response.close()
    assert not _held(app, "report")


def test_a_blueprint_lock_on_a_replaced_stream_is_released(tmp_path: Path) -> None:
    from flask import Blueprint

    app = _app(tmp_path)
    bp = Blueprint("files", __name__)
    lock_blueprint(bp, "files", ttl=None)

    @bp.get("/files")
    def files() -> Response:
        return Response(iter(["a"]))

    app.register_blueprint(bp)

    @app.after_request
    def replace(response: Response) -> Response:
        return Response("replaced")

    assert app.test_client().get("/files").text == "replaced"
    assert not _held(app, "files")

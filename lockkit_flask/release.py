"""What ends a route's lock in Flask: the request's final response, whatever an
``after_request`` made of it. A lock is released when that response is finished (where
Flask sends ``request_finished``) or, for a streamed one, when the stream is closed; a
request that never got that far (an error in a later layer) releases at its teardown."""

from __future__ import annotations

from typing import Any, Final

from flask import Flask, Response, g

from lockkit_core.guard import Outcome

__all__ = ["hold_until_finished", "watch"]

_OUTCOMES: Final = "_lockkit_outcomes"


def _g() -> Any:
    # The request's g itself: every request, locked or not, passes here twice, and each
    # use of the ``g`` proxy would look it up again.
    return g._get_current_object()


def hold_until_finished(response: Any, outcome: Outcome) -> Any:
    """Keep ``outcome``'s lock until the request's final response is finished."""
    _g().setdefault(_OUTCOMES, []).append(outcome)
    return response


def _finished(response: Response) -> None:
    for outcome in _g().pop(_OUTCOMES, ()):
        if response.is_streamed:
            # The bytes it protects are still to come: released at the stream's close, at
            # the latest after LOCKKIT_STREAM_MAX_HOLD.
            outcome.hold_stream()
            response.call_on_close(outcome.release)
        else:
            outcome.release()


def _teardown(_exc: BaseException | None) -> None:
    for outcome in _g().pop(_OUTCOMES, ()):
        outcome.release()


def watch(app: Flask) -> None:
    """Release ``app``'s route locks as its requests finish (the extension calls this): just
    after its ``process_response`` (which runs the ``after_request`` functions) made the
    final response, where Flask sends ``request_finished``; a receiver of that signal would
    cost every request of the app a dispatch, locked or not."""
    process_response = app.process_response

    def finished(response: Response) -> Response:
        response = process_response(response)
        _finished(response)
        return response

    app.process_response = finished  # type: ignore[method-assign]
    app.teardown_request(_teardown)

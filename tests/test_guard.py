"""The core request guard on its own, without a web framework: what each outcome carries."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from lockkit_core import ConfigError, Lock, LockKit
from lockkit_core.guard import (
    GuardContext,
    GuardSettings,
    LockStoreDown,
    RequestKeyMissing,
    RequestLocked,
    RequestRule,
    Source,
)
from lockkit_core.testing.servers import free_port

SOURCES = {
    "query": Source("the query string", "the query parameter"),
    "g": Source("g", hint="set it in a hook"),
}
log = logging.getLogger("lockkit.test")


@pytest.fixture
def context() -> Iterator[GuardContext]:
    with LockKit("memory://guard") as kit:
        yield GuardContext(kit, GuardSettings(retry_after=2), log)


def test_held_then_released_then_free(context: GuardContext) -> None:
    rule = RequestRule("order:{order_id}", sources=SOURCES, methods=["POST"])
    assert not rule.applies(context, "GET")
    outcome = rule.decide(context, "pay", {"order_id": 7})
    assert outcome.refusal is None
    assert outcome.lock is not None
    assert context.kit.admin.info("order:7") is not None
    outcome.release()
    outcome.release()  # once only
    assert context.kit.admin.info("order:7") is None


def test_busy_is_a_409_problem_with_retry_after_and_counted(context: GuardContext) -> None:
    rule = RequestRule("order:{order_id}", sources=SOURCES)
    with context.kit.lock("order:7"):
        outcome = rule.decide(context, "pay", {"order_id": 7})
    assert isinstance(outcome.refusal, RequestLocked)
    assert outcome.refusal.status == 409
    assert ("Retry-After", "2") in outcome.refusal.headers()
    body = json.loads(outcome.refusal.body())
    assert (body["status"], body["lock"], body["route"]) == (409, "order:7", "pay")
    assert context.counts["busy"] == 1


def test_a_missing_client_value_is_a_400_and_an_app_value_a_config_error(
    context: GuardContext,
) -> None:
    by_query = RequestRule("seat:{query[row]}", sources=SOURCES)
    outcome = by_query.decide(context, "book", {"query": {}})
    assert isinstance(outcome.refusal, RequestKeyMissing)
    assert "built from the query parameter 'row'" in outcome.refusal.detail
    by_g = RequestRule("tenant:{g.tenant}", sources=SOURCES)
    with pytest.raises(ConfigError, match="set it in a hook"):
        by_g.decide(context, "book", {"g": object()})


def test_store_down_is_a_503_unless_the_rule_fails_open() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    with LockKit(url, options={"socket_timeout": 0.5}) as kit:
        context = GuardContext(kit, GuardSettings(), log)
        closed = RequestRule("x", sources=SOURCES).decide(context, "r", {})
        opened = RequestRule("x", sources=SOURCES, fail_open=True).decide(context, "r", {})
    assert isinstance(closed.refusal, LockStoreDown)
    assert closed.refusal.status == 503
    assert (opened.refusal, opened.lock) == (None, None)
    assert dict(context.counts) == {"unavailable": 1, "fail_open": 1}


def test_a_lost_lock_is_counted_and_told_to_the_hooks(context: GuardContext) -> None:
    told: list[tuple[str, str]] = []

    def hook(lock: Lock, route: str, error: BaseException) -> None:
        told.append((lock.key, route))

    context.on_lost.append(hook)
    outcome = RequestRule("job", sources=SOURCES).decide(context, "run", {})
    context.kit.admin.force_release("job")
    outcome.release()
    assert context.counts["lost"] == 1
    assert told == [("job", "run")]


@pytest.mark.parametrize("wait", [None, -1, "-1"])
def test_a_request_never_waits_forever(wait: object) -> None:
    with pytest.raises(ConfigError, match="wait forever"):
        RequestRule("x", sources=SOURCES, wait=wait)
    with pytest.raises(ConfigError, match=r"LOCKKIT_WAIT is .* wait forever"):
        GuardSettings.from_mapping({"WAIT": wait})

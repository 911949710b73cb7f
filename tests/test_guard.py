"""The core request guard on its own, without a web framework: what each outcome carries."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator

import pytest

from lockkit_core import ConfigError, Lock, LockKit
from lockkit_core.guard import (
    WEB_SOURCES,
    GuardContext,
    GuardSettings,
    LockStoreDown,
    RequestKeyInvalid,
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


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"methods": []}, "methods"),
        ({"key": "seat:{row!z}"}, "!z"),
    ],
)
def test_a_rule_that_could_never_lock_or_render_fails_when_it_is_made(
    options: dict[str, object], named: str
) -> None:
    key = options.pop("key", "seat:{row}")
    with pytest.raises(ConfigError, match=re.escape(named)):
        RequestRule(key, sources=SOURCES, **options)  # type: ignore[arg-type]


def test_a_format_spec_that_does_not_fit_the_value_is_a_config_error(
    context: GuardContext,
) -> None:
    rule = RequestRule("seat:{row:d}", sources=SOURCES)
    with pytest.raises(ConfigError, match=r"book.*\{row:d\}"):
        rule.decide(context, "book", {"row": "A"})


def test_credentials_render_as_a_keyed_hash_stable_per_secret() -> None:
    rule = RequestRule("me:{headers[Authorization]}:{session}:{headers[X-Desk]}",
                       sources=WEB_SOURCES)  # fmt: skip
    values = {"headers": {"Authorization": "Bearer t0k3n", "X-Desk": "north"}, "session": "s1d"}
    named = RequestRule("{query[api_key]}:{form[password]}:{session[csrf_token]}:{session[cart]}",
                        sources=WEB_SOURCES)  # fmt: skip
    rendered = named.key.render("x", {"query": {"api_key": "k1"}, "form": {"password": "p1"},
                                      "session": {"csrf_token": "c1", "cart": "cart7"}},
                                secret=lambda: "one")  # fmt: skip
    parts = rendered.split(":")
    assert [len(p) for p in parts[:3]] == [32, 32, 32] and parts[3] == "cart7"

    one = rule.key.render("me", values, secret=lambda: "one")
    assert one == rule.key.render("me", values, secret=lambda: "one")  # every process alike
    assert one != rule.key.render("me", values, secret=lambda: "two")
    assert "t0k3n" not in one and "s1d" not in one and one.endswith(":north")
    with pytest.raises(ConfigError, match="SECRET_KEY"):
        rule.key.render("me", values)


@pytest.mark.parametrize(
    ("value", "reason"),
    [("x" * 600, "more than the 512 bytes"), ("a\x00b", "NUL"), ("", "is empty")],
    ids=["too-long", "nul", "empty"],
)
def test_an_unusable_key_from_the_request_is_a_400_before_the_store(
    context: GuardContext, value: str, reason: str
) -> None:
    rule = RequestRule("{query[q]}", sources=SOURCES)
    outcome = rule.decide(context, "search", {"query": {"q": value}})
    assert isinstance(outcome.refusal, RequestKeyInvalid)
    assert outcome.refusal.status == 400
    assert reason in outcome.refusal.detail and (not value or value not in outcome.refusal.body())
    assert context.kit.admin.list() == []
    assert context.counts["bad_request"] == 1
    by_func = RequestRule(lambda: value or "x" * 600, sources=SOURCES)
    refused = by_func.decide(context, "search", lambda func: func())
    assert isinstance(refused.refusal, RequestKeyInvalid)


@pytest.mark.parametrize(
    "given",
    [{"MAX_KEY_BYTES": 8}, {"MAX_KEY_BYTES": "many"}, {"MAX_KEY_BYTES": True},
     {"STREAM_MAX_HOLD": 0}, {"STREAM_MAX_HOLD": "soon"}, {"STREAM_MAX_HOLD": float("inf")}],
)  # fmt: skip
def test_bad_key_and_stream_limits_are_config_errors(given: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match=next(iter(given))):
        GuardSettings.from_mapping(given)


def test_key_and_stream_limits_parse_from_strings_and_none() -> None:
    parsed = GuardSettings.from_mapping({"MAX_KEY_BYTES": "256", "STREAM_MAX_HOLD": "2.5"})
    assert (parsed.max_key_bytes, parsed.stream_max_hold) == (256, 2.5)
    assert GuardSettings.from_mapping({"STREAM_MAX_HOLD": None}).stream_max_hold is None
    assert (GuardSettings().max_key_bytes, GuardSettings().stream_max_hold) == (512, 60.0)


def test_deadlines_run_in_order_on_one_thread_and_cancelled_ones_never() -> None:
    import threading
    import time

    from lockkit_core.guard import deadlines

    ran: list[tuple[str, str]] = []
    done = threading.Event()
    now = time.monotonic()
    late = deadlines.at(now + 0.2, lambda: (ran.append(("late", threading.current_thread().name)),
                                           done.set()))  # fmt: skip
    deadlines.at(now + 0.1, lambda: ran.append(("early", threading.current_thread().name)))
    deadlines.at(now + 0.05, lambda: ran.append(("cancelled", ""))).cancel()
    assert done.wait(5)
    assert ran == [("early", "lockkit-deadlines"), ("late", "lockkit-deadlines")]
    late.cancel()  # harmless once run


def test_a_context_given_another_kit_or_config_locks_with_that_one(
    context: GuardContext,
) -> None:
    # A rule's handles are made with options checked once; a kit or config put in their
    # place is used from the next request on.
    rule = RequestRule("order:{order_id}", sources=SOURCES)
    rule.decide(context, "pay", {"order_id": 1}).release()
    context.kit.config = context.kit.config.replace(ttl=7.0)
    outcome = rule.decide(context, "pay", {"order_id": 2})
    assert outcome.lock is not None
    assert outcome.lock.ttl == 7.0
    outcome.release()
    with LockKit("memory://guard-other") as other:
        context.kit = other
        outcome = rule.decide(context, "pay", {"order_id": 3})
        assert outcome.lock is not None
        assert outcome.lock.kit is other
        assert other.admin.info("order:3") is not None
        outcome.release()

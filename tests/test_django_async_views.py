"""Async views under @lock_view through Django's async test client and its ASGI handler, on the
memory store: they stay coroutine functions, answer 409 when busy, read the user and session in
the request's thread, and park no thread (nor block the event loop) while they wait."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from typing import Any

import pytest
from django.db import connections
from django.test import AsyncClient
from djproject import views

from lockkit_django import get_kit


@pytest.mark.django_db(transaction=True)
def test_an_async_view_reads_user_and_session_in_the_request_thread() -> None:
    # A connection opened in a plain worker thread is outside the request cycle: Django
    # never closes it (CONN_MAX_AGE, close_old_connections do not apply there).
    from django.contrib.auth.models import User
    from django.db.backends.signals import connection_created

    user = User.objects.create_user("cat", password="pw")
    opened_in: list[str] = []

    def opened(sender: object, connection: object, **_: object) -> None:
        opened_in.append(threading.current_thread().name)

    # Logged in before the event loop runs, with the blocking API: AsyncClient.aforce_login
    # and asession are Django 5.0's, and the test runs on Django 4.2 too.
    client = AsyncClient()
    client.force_login(user)
    session = client.session
    session["cart"] = "c7"
    session.save()
    connections.close_all()

    async def go() -> object:
        connection_created.connect(opened)
        try:
            return await client.post("/async-user/")
        finally:
            connection_created.disconnect(opened)

    response = asyncio.run(go())
    assert response.json() == {"key": f"auser:{user.pk}:c7"}  # type: ignore[attr-defined]
    assert not [name for name in opened_in if name.startswith("asyncio")], opened_in


def test_async_views_stay_coroutine_functions() -> None:
    assert inspect.iscoroutinefunction(views.async_view)
    assert views.AsyncMixinView.view_is_async


def test_async_views_lock_and_answer_409() -> None:
    asyncio.run(async_views_lock_and_answer_409())


async def async_views_lock_and_answer_409() -> None:
    client = AsyncClient()
    assert (await client.post("/async/a/")).json() == {"held": True}
    assert (await client.post("/amixin/a/")).json() == {"held": True}
    lock = get_kit().lock("amixin:b", reentrant=False)
    await asyncio.to_thread(lock.acquire)
    try:
        assert (await client.post("/amixin/b/")).status_code == 409
    finally:
        await asyncio.to_thread(lock.release)


def test_waiting_for_a_lock_does_not_block_the_event_loop() -> None:
    asyncio.run(waiting_does_not_block_the_loop())


async def waiting_does_not_block_the_loop() -> None:
    lock = get_kit().lock("slow:w", reentrant=False)
    await asyncio.to_thread(lock.acquire)
    threading.Timer(0.5, lock.release).start()
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        response = await AsyncClient().post("/async/w/")  # waits up to 5 s for the lock
    finally:
        ticker.cancel()
    assert response.json() == {"held": True}
    assert ticks >= 10, f"the loop ran only {ticks} ticks while the view waited 0.5 s"


def test_async_views_waiting_for_a_lock_park_no_thread() -> None:
    asyncio.run(waiting_parks_no_thread())


async def waiting_parks_no_thread() -> None:
    lock = get_kit().lock("slow:p", reentrant=False)
    await lock.aacquire()
    client = AsyncClient()
    # A burst of as many requests first, on free keys: whatever threads Django uses for a
    # burst are started before counting. Django 4.2's AsyncClient sends request_started
    # through sync_to_async(thread_sensitive=False), so 20 requests at once grow the loop's
    # default executor to its size (min(32, CPUs + 4)): threads that serve every request in
    # turn, 5 for 20 waiting requests or 40, not one per request.
    warm = [client.post(f"/async/warm{i}/") for i in range(20)]
    assert [(await w).json() for w in asyncio.as_completed(warm)] == [{"held": True}] * 20
    before = threading.active_count()
    waiting = [asyncio.create_task(client.post("/async/p/")) for _ in range(20)]
    await asyncio.sleep(0.3)  # all twenty wait for the lock
    during = threading.active_count()
    await lock.arelease()
    answers = await asyncio.gather(*waiting)
    assert [answer.json() for answer in answers] == [{"held": True}] * 20
    assert during - before <= 1, f"{during - before} threads more while 20 requests waited"


def test_an_async_view_under_an_asgi_server_parks_no_thread_for_a_url_key() -> None:
    asyncio.run(asgi_waiters_park_no_thread())


async def asgi_waiters_park_no_thread() -> None:
    """Django's ASGI handler runs each request in its own asgiref ThreadSensitiveContext: the
    first thread-sensitive call of a request starts a thread that lives until the response.
    A key read from URL arguments needs no such call, so waiters take no thread. (The view is
    called directly: Django's own MiddlewareMixin middleware would start one in any case.)"""
    lock = get_kit().lock("slow:asgi", reentrant=False)
    await lock.aacquire()

    assert json.loads((await request_on("asgi-warm")).content)["held"]
    before = threading.active_count()
    waiting = [asyncio.create_task(request_on("asgi")) for _ in range(20)]
    await asyncio.sleep(0.3)  # all twenty wait for the lock
    during = threading.active_count()
    await lock.arelease()
    answers = await asyncio.gather(*waiting)
    assert [json.loads(a.content) for a in answers] == [{"held": True}] * 20
    assert during - before <= 1, f"{during - before} threads more while 20 requests waited"


async def request_on(name: str) -> Any:
    """One request to ``views.async_view`` as Django's ASGI handler makes it: in a context of
    its own, the response closed (which frees the view's lock) before the context ends."""
    from asgiref.sync import ThreadSensitiveContext
    from django.test import RequestFactory

    async with ThreadSensitiveContext():
        response = await views.async_view(RequestFactory().post(f"/async/{name}/"), name=name)
        response.close()
        return response

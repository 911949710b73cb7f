"""zookeeper:// specifics on a real server: FIFO order of 8 contenders, one watch per waiter (no
herd), the admin views, free keys cost nothing, tokens across parent re-creation, URL options
and digest auth with ACLs."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from many_kits import kits_on

from lockkit_core import BackendUnavailable, ConfigError, LockKit
from lockkit_core.backends.zookeeper import ZooKeeperBackend
from lockkit_core.testing.zookeeper import ZooKeeperServer, four_letter

pytestmark = pytest.mark.zookeeper


@pytest.fixture
def url(zookeeper_server: ZooKeeperServer) -> str:
    return zookeeper_server.url + "?session_timeout=4&socket_timeout=2"


@pytest.fixture
def namespace() -> str:
    return f"zb{uuid.uuid4().hex[:10]}"


@pytest.fixture
def kits(url: str, namespace: str) -> Iterator[list[LockKit]]:
    with kits_on(url, namespace, 9) as made:
        yield made


def _contenders(kit: LockKit, key: str) -> list[str]:
    backend = kit.backend
    assert isinstance(backend, ZooKeeperBackend)
    return backend.session.run(backend.tree.children(f"{kit.namespace}:{key}"))


@pytest.mark.parametrize("fair", [True, False])
def test_eight_contenders_get_the_lock_in_request_order(kits: list[LockKit], fair: bool) -> None:
    holder, contenders = kits[0], kits[1:]
    order: list[int] = []
    errors: list[BaseException] = []

    def contend(i: int) -> None:
        try:
            with contenders[i].lock("fifo", fair=fair, timeout=30):
                order.append(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(len(contenders))]
    with holder.lock("fifo"):
        for i, thread in enumerate(threads):
            thread.start()
            deadline = time.monotonic() + 10
            while len(_contenders(holder, "fifo")) < i + 2:  # queued before the next asks
                assert time.monotonic() < deadline, "a contender never queued"
                time.sleep(0.005)
        info = holder.admin.info("fifo")
        assert info is not None and info.holder is not None
        assert info.holder.endswith(f"{len(contenders)} waiting")
    for thread in threads:
        thread.join(30)
    assert not errors, errors[0]
    assert order == list(range(len(contenders)))


def test_each_waiter_watches_only_the_node_ahead_of_it(
    kits: list[LockKit], zookeeper_server: ZooKeeperServer
) -> None:
    holder, contenders = kits[0], kits[1:]
    done = threading.Event()

    def contend(i: int) -> None:
        with contenders[i].lock("herd", timeout=30):
            done.wait(30)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(len(contenders))]
    with holder.lock("herd"):
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while len(_contenders(holder, "herd")) < len(contenders) + 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.2)  # the last watches are set after the last node shows up
        parent = holder.backend.tree.parent(f"{holder.namespace}:herd")  # type: ignore[attr-defined]
        watched: dict[str, int] = {}
        current = ""
        for line in four_letter(zookeeper_server.port, "wchp").splitlines():
            if line.startswith("/"):
                current = line.strip()
            elif line.strip() and current.startswith(parent):
                watched[current] = watched.get(current, 0) + 1
        nodes = _contenders(holder, "herd")
        # One watch per node but the last, each by one session: a release wakes one waiter.
        assert parent not in watched, "a waiter watches the whole key (a herd on release)"
        assert sorted(watched) == sorted(f"{parent}/{n}" for n in nodes[:-1])
        assert set(watched.values()) == {1}
    done.set()
    for t in threads:
        t.join(30)


def test_admin_lists_holders_with_their_node_data_and_force_releases(
    kits: list[LockKit], namespace: str
) -> None:
    a, b, admin_kit = kits[0], kits[1], kits[2]
    held = a.lock("report:1")
    assert held.acquire()
    waiting = threading.Thread(target=lambda: b.lock("report:1", timeout=10).acquire())
    waiting.start()
    deadline = time.monotonic() + 10
    while len(_contenders(a, "report:1")) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert a.lock("report:2").acquire()
    listed = admin_kit.admin.list("report:")
    assert [i.key for i in listed] == ["report:1", "report:2"]
    first = listed[0]
    assert first.token == held.token
    assert first.holder is not None
    assert f"pid {os.getpid()}" in first.holder
    assert f"thread {threading.current_thread().name}" in first.holder
    assert first.holder.endswith("1 waiting")
    assert first.ttl_remaining is not None and 0 < first.ttl_remaining <= a.config.ttl
    # force-release deletes the holder's node: the waiter is next, with a higher token.
    assert admin_kit.admin.force_release("report:1") is True
    waiting.join(10)
    after = admin_kit.admin.info("report:1")
    assert after is not None and held.token is not None and after.token is not None
    assert after.token > held.token
    assert after.owner_hint != first.owner_hint


def test_a_free_key_leaves_nothing_and_tokens_rise_across_parents(
    kits: list[LockKit], namespace: str
) -> None:
    kit = kits[0]
    backend = kit.backend
    assert isinstance(backend, ZooKeeperBackend)
    client = backend.session.client()
    tokens = []
    for _ in range(5):
        with kit.lock("once") as held:
            tokens.append(held.token)
            (node,) = _contenders(kit, "once")
            assert node.endswith("-0000000000")  # a new parent numbers from 0 again
        time.sleep(0.05)
        assert client.exists(backend.tree.parent(f"{namespace}:once")) is None
    assert tokens == sorted(set(tokens)), "czxid tokens must rise when the parent is remade"
    assert kit.admin.list() == []


def test_url_options_are_validated(zookeeper_server: ZooKeeperServer) -> None:
    base = zookeeper_server.url
    with pytest.raises(ConfigError, match=r"'colour'.*known options"):
        LockKit(base + "?colour=blue")
    with pytest.raises(ConfigError, match="auth"):
        LockKit(base + "?auth=kerberos")
    with pytest.raises(ConfigError, match="acl"):
        LockKit(base + "?acl=everyone")
    with pytest.raises(ConfigError, match="needs credentials"):
        LockKit(base + "?acl=creator")
    with pytest.raises(ConfigError, match="username and password"):
        LockKit(base + "?auth=digest")
    with pytest.raises(ConfigError, match="use_ssl"):
        LockKit(base + "?certfile=/tmp/c.pem&use_ssl=false")
    with pytest.raises(ConfigError, match="session_timeout"):
        LockKit(base + "?session_timeout=0")
    with pytest.raises(ConfigError, match="host:port"):
        LockKit("zookeeper://127.0.0.1:2181,nohost/")
    with pytest.raises(ConfigError, match="names no server"):
        LockKit("zookeeper:///chroot")


def test_digest_auth_and_creator_acls_keep_others_out(
    zookeeper_server: ZooKeeperServer, namespace: str
) -> None:
    host = f"127.0.0.1:{zookeeper_server.port}"
    chroot = f"/acl-{namespace}"
    owner_url = f"zookeeper://app:s3cret@{host}{chroot}?socket_timeout=2"
    with (
        LockKit(owner_url, namespace=namespace) as owner,
        LockKit(f"zookeeper://{host}{chroot}?socket_timeout=2", namespace=namespace) as anon,
        LockKit(
            f"zookeeper://app:wrong@{host}{chroot}?socket_timeout=2", namespace=namespace
        ) as wrong,
        LockKit(owner_url, namespace=namespace) as peer,
    ):
        assert "s3cret" not in repr(owner)
        held = owner.lock("secured")
        assert held.acquire()
        for outsider in (anon, wrong):
            with pytest.raises(BackendUnavailable, match="credentials"):
                outsider.admin.force_release("secured")
            with pytest.raises(BackendUnavailable, match="credentials"):
                outsider.lock("secured").acquire(timeout=0)
        assert peer.lock("secured").acquire(blocking=False) is False
        held.release()
        assert peer.lock("secured").acquire(blocking=False) is True

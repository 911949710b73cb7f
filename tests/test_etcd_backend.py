"""etcd:// specifics on a real etcd: the stored layout (no secret, nothing left when free),
fencing across kits, user/password auth, and URLs that are refused with a clear error."""

from __future__ import annotations

import base64
import json
import logging
import uuid
import warnings
from collections.abc import Iterator

import pytest

from lockkit_core import BackendUnavailable, ConfigError, LockKit
from lockkit_core.backends.base import Capability, Grade, owner_id
from lockkit_core.backends.etcd import EtcdBackend
from lockkit_core.errors import InsecureTransportWarning
from lockkit_core.registry import create_backend
from lockkit_core.testing.etcd import EtcdServer, etcd_request

pytestmark = pytest.mark.etcd


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _everything(server: EtcdServer, token: str | None = None) -> dict[str, str]:
    answer = etcd_request(
        server.port(),
        "kv/range",
        {"key": _b64("lockkit/"), "range_end": _b64("lockkit0")},
        token=token,
    )
    return {
        base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", "")).decode()
        for kv in answer.get("kvs") or []
    }


@pytest.fixture
def kit(etcd_server: EtcdServer) -> Iterator[LockKit]:
    with LockKit(etcd_server.url, namespace=f"t{uuid.uuid4().hex[:10]}") as made:
        yield made


def test_declares_consensus_grade_and_capabilities(kit: LockKit) -> None:
    backend = kit.backend
    assert isinstance(backend, EtcdBackend)
    assert backend.grade is Grade.CONSENSUS
    for flag in (
        Capability.TTL,
        Capability.FENCING,
        Capability.FAIR,
        Capability.NOTIFY,
        Capability.CROSS_HOST,
        Capability.LIST,
    ):
        assert flag in backend.capabilities


def test_the_store_keeps_the_owner_id_never_the_token_and_nothing_once_free(
    etcd_server: EtcdServer, kit: LockKit
) -> None:
    lock = kit.lock("order:1", ttl=5)
    assert lock.acquire()
    assert lock.owner is not None
    stored = {k: v for k, v in _everything(etcd_server).items() if kit.namespace in k}
    assert list(stored) == [f"lockkit/l/{kit.namespace}:order:1"]
    record = json.loads(next(iter(stored.values())))
    assert record["owner"] == owner_id(lock.owner)
    assert lock.owner not in json.dumps(stored)
    assert record["holder"].endswith(f"pid {__import__('os').getpid()}")
    lock.release()
    assert not [k for k in _everything(etcd_server) if kit.namespace in k]


def test_tokens_are_create_revisions_rising_across_kits(
    etcd_server: EtcdServer, kit: LockKit
) -> None:
    tokens = []
    with LockKit(etcd_server.url, namespace=kit.namespace) as other:
        for i in range(6):
            with (kit if i % 2 else other).lock("fence") as held:
                assert held.token is not None
                tokens.append(held.token)
                info = kit.admin.info("fence")
                assert info is not None and info.token == held.token
    assert tokens == sorted(set(tokens))


@pytest.mark.filterwarnings("ignore::lockkit_core.errors.InsecureTransportWarning")
def test_user_and_password_from_the_url() -> None:
    with EtcdServer() as server:
        port = server.port()
        etcd_request(port, "auth/user/add", {"name": "root", "password": "s3cret"})
        etcd_request(port, "auth/user/grant", {"user": "root", "role": "root"})
        etcd_request(port, "auth/enable", {})
        good = f"etcd://root:s3cret@127.0.0.1:{port}?socket_timeout=2"
        with LockKit(good, namespace="auth") as kit, kit.lock("k", timeout=2) as held:
            assert held.owned()
            assert kit.admin.info("k") is not None
        assert "s3cret" not in LockKit(good).backend.describe()
        for bad in (f"etcd://root:wrong@127.0.0.1:{port}", f"etcd://127.0.0.1:{port}"):
            with LockKit(bad, namespace="auth") as kit, pytest.raises(BackendUnavailable) as caught:
                kit.lock("k").acquire(blocking=False)
            assert "wrong" not in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "etcd://root:s3cret@127.0.0.1:2379",
        "etcd://127.0.0.1:2379?username=root&password=s3cret",
        "etcd://root:s3cret@127.0.0.1:2379?tls=0",
    ],
)
def test_a_password_over_plain_http_is_warned_about_at_construction(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="lockkit.etcd"),
        pytest.warns(InsecureTransportWarning, match=r"plain HTTP.*\?tls=1") as caught,
    ):
        LockKit(url).close()
    assert caught[0].filename == __file__, "the warning should name the line that built the kit"
    assert "s3cret" not in str(caught[0].message)
    logged = [r.getMessage() for r in caplog.records if r.name == "lockkit.etcd"]
    assert any("plain HTTP" in text for text in logged), logged


def test_no_clear_text_warning_over_tls_or_without_a_password() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", InsecureTransportWarning)
        LockKit("etcd://root:s3cret@127.0.0.1:2379?tls=1").close()
        LockKit("etcd://127.0.0.1:2379").close()


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("etcd://h1:2379,:2380", "bad etcd member"),
        ("etcd://h1:2379,h2:notaport", "bad etcd member"),
        ("etcd://h1:2379?password=x", "password without a username"),
        ("etcd://h1:2379?socket_timeout=0", "positive seconds"),
        ("etcd://h1:2379?retries=3", "unknown option 'retries'"),
        ("etcd://h1:2379?ca_file=/nonexistent/ca.pem", "TLS files"),
    ],
)
def test_bad_urls_are_config_errors_naming_the_fix(url: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        create_backend(url)
    assert words in str(caught.value)


def test_several_members_parse_with_default_ports() -> None:
    backend = create_backend("etcd://a.example:2379,b.example,[::1]:2381")
    assert isinstance(backend, EtcdBackend)
    assert backend.client.endpoints == [("a.example", 2379), ("b.example", 2379), ("::1", 2381)]

"""``rediss://`` against a real TLS redis-server: client certificates through OPTIONS, an ACL
user and password in the URL, and the typed errors for bad TLS settings."""

from __future__ import annotations

import threading
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest
import redis

from lockkit_core import BackendUnavailable, ConfigError, LockKit
from lockkit_core.errors import InsecureTransportWarning
from lockkit_core.testing.redis_tls import TlsRedisServer

pytestmark = pytest.mark.redis


def _kit(server: TlsRedisServer, **options: Any) -> LockKit:
    return LockKit(
        server.tls_url,
        namespace=f"tls{uuid.uuid4().hex[:6]}",
        ttl=5,
        options={**server.client_options, **options},
    )


def test_locks_and_hand_over_over_tls_as_the_acl_user(tls_server: TlsRedisServer) -> None:
    first = _kit(tls_server)
    second = LockKit(
        tls_server.tls_url, namespace=first.namespace, ttl=5, options=tls_server.client_options
    )
    try:
        held = first.lock("order:1")
        assert held.acquire(timeout=0)
        assert held.token is not None
        other = second.lock("order:1", reentrant=False)
        assert not other.acquire(timeout=0)
        got: list[bool] = []
        waiter = threading.Thread(target=lambda: got.append(other.acquire(timeout=10)))
        waiter.start()
        # the waiter is queued (its entry is in the store) before we release
        plain = redis.Redis(port=tls_server.plain_port)
        queue = f"lockkit:{{{first.namespace}:order:1}}:q"
        for _ in range(500):
            if plain.zcard(queue):
                break
            threading.Event().wait(0.01)
        held.release()
        waiter.join(10)
        assert got == [True]  # handed over by a notice on the TLS listener connection
        # every connection of ours is TLS and logged in as the ACL user
        clients = [c for c in plain.client_list() if c.get("user") == tls_server.user]
        assert clients, plain.client_list()
        other.release()
    finally:
        first.close()
        second.close()


def test_a_client_without_its_certificate_is_refused(tls_server: TlsRedisServer) -> None:
    kit = LockKit(
        tls_server.tls_url,
        options={"ssl_ca_certs": tls_server.client_options["ssl_ca_certs"]},
    )
    with pytest.raises(BackendUnavailable, match="cannot reach redis"):
        kit.lock("x").acquire(timeout=0)
    kit.close()


def test_a_wrong_password_is_refused(tls_server: TlsRedisServer) -> None:
    url = tls_server.tls_url.replace(tls_server.password, "wrong")
    kit = LockKit(url, options=tls_server.client_options)
    with pytest.raises(BackendUnavailable) as caught:
        kit.lock("x").acquire(timeout=0)
    assert "wrong" not in str(caught.value)  # the password is never shown
    kit.close()


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"ssl_cert_reqs": "sometimes"}, "ssl_cert_reqs"),
        ({"ssl_ca_certs": "/nonexistent/ca.crt"}, "ssl_ca_certs"),
        ({"ssl_certfile": "/nonexistent/client.crt"}, "ssl_certfile"),
        ({"ssl_keyfile": "KEY"}, "ssl_keyfile"),  # a key without its certificate
        ({"ssl_check_hostname": True, "ssl_cert_reqs": "none"}, "ssl_check_hostname"),
    ],
)
def test_bad_tls_options_are_config_errors_naming_the_option(
    tls_server: TlsRedisServer, options: dict[str, Any], named: str
) -> None:
    if options.get("ssl_keyfile") == "KEY":
        options = {"ssl_keyfile": tls_server.client_options["ssl_keyfile"]}
    with pytest.raises(ConfigError, match=named):
        LockKit(tls_server.tls_url, options=options)


def test_tls_options_on_a_plain_url_are_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"ssl_ca_certs.*rediss://"):
        LockKit("redis://127.0.0.1:6379/0", options={"ssl_ca_certs": str(tmp_path)})


def test_a_password_sent_in_plain_text_to_another_host_warns() -> None:
    # 192.0.2.0/24 is TEST-NET-1: nothing answers there, and nothing is sent (no lock taken)
    with pytest.warns(InsecureTransportWarning, match="192.0.2.10"):
        LockKit("redis://:pw@192.0.2.10:6379/0").close()
    with pytest.warns(InsecureTransportWarning):
        LockKit("redis://192.0.2.10:6379/0", options={"password": "pw"}).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LockKit("redis://:pw@127.0.0.1:6379/0").close()  # loopback: nothing crosses a network
        LockKit("redis://localhost:6379/0", options={"password": "pw"}).close()
        LockKit("redis://192.0.2.10:6379/0").close()  # no password to leak

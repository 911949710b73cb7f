"""Where a backend option may come from, and what happens when two places disagree.

The rule (README "Configuration", ``lockkit_core.config``): an explicit ``LockKit(...)``
argument replaces the same setting of a mapping; inside the URL and ``OPTIONS`` each backend
option has one value, which may be given in the URL (its query, or the part of the URL that
carries it: user and password, redis's ``/db``) or in ``OPTIONS``, or in both alike. Two
different values for one option are a ``ConfigError`` naming both places, never a silent pick.
"""

from __future__ import annotations

import uuid

import pytest
import redis

from lockkit_core import ConfigError, LockKit, LockKitConfig
from lockkit_core.testing import RedisServer


def _redis_url(server: RedisServer, tail: str) -> str:
    return f"redis://127.0.0.1:{server.port}{tail}"


def _keys_in_db(server: RedisServer, db: int) -> list[bytes]:
    client = redis.Redis(port=server.port, db=db)
    try:
        return list(client.scan_iter(match="lockkit:*"))
    finally:
        client.close()


@pytest.mark.redis
def test_options_db_against_the_url_db_is_a_config_error_naming_both(
    redis_server: RedisServer,
) -> None:
    with pytest.raises(ConfigError) as caught:
        LockKit(_redis_url(redis_server, "/9"), options={"db": 6})
    message = str(caught.value)
    assert "'db'" in message and "9" in message and "6" in message
    assert "URL" in message and "OPTIONS" in message


@pytest.mark.redis
@pytest.mark.parametrize(
    ("tail", "options"),
    [("/", {"db": 6}), ("/6", {}), ("/6", {"db": 6}), ("/?db=6", {}), ("", {"db": "6"})],
)
def test_the_db_given_once_or_alike_is_where_the_locks_are(
    redis_server: RedisServer, tail: str, options: dict[str, object]
) -> None:
    key = f"where-{uuid.uuid4().hex[:8]}"
    with LockKit(_redis_url(redis_server, tail), options=options) as kit, kit.lock(key):
        assert any(key.encode() in name for name in _keys_in_db(redis_server, 6))
        assert not any(key.encode() in name for name in _keys_in_db(redis_server, 0))


@pytest.mark.redis
def test_the_url_path_and_query_disagreeing_on_db_is_a_config_error(
    redis_server: RedisServer,
) -> None:
    with pytest.raises(ConfigError, match=r"'db'.*9.*3|'db'.*3.*9"):
        LockKit(_redis_url(redis_server, "/9?db=3"))


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:1/0?socket_timeout=2",
        "etcd://127.0.0.1:1?socket_timeout=2",
        "zookeeper://127.0.0.1:1?socket_timeout=2",
    ],
)
def test_query_and_options_disagreeing_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        LockKit(url, options={"socket_timeout": 3})
    message = str(caught.value)
    assert "'socket_timeout'" in message and "2" in message and "3" in message


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:1/0?socket_timeout=2",
        "etcd://127.0.0.1:1?socket_timeout=2",
        "zookeeper://127.0.0.1:1?socket_timeout=2&session_timeout=4",
    ],
)
def test_query_and_options_agreeing_is_fine(url: str) -> None:
    kit = LockKit(url, options={"socket_timeout": 2.0})
    try:
        assert kit.backend.options["socket_timeout"] == 2.0
    finally:
        kit.close()


@pytest.mark.parametrize(
    "url",
    [
        "redis://user:url-secret@127.0.0.1:1/0",
        "etcd://user:url-secret@127.0.0.1:1",
        "zookeeper://user:url-secret@127.0.0.1:1/",
    ],
)
def test_a_password_in_the_url_and_another_in_options_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        LockKit(url, options={"password": "options-secret"})
    message = str(caught.value)
    assert "'password'" in message and "URL" in message and "OPTIONS" in message
    # Naming both places must not print either secret.
    assert "url-secret" not in message and "options-secret" not in message


def test_an_explicit_options_argument_replaces_the_mapping_options() -> None:
    url = "redis://127.0.0.1:1/0"
    config = LockKitConfig.from_mapping({"URL": url, "OPTIONS": {"socket_timeout": 1}})
    kit = LockKit(config=config, options={"socket_connect_timeout": 2})
    try:
        assert kit.backend.options["socket_connect_timeout"] == 2.0
        assert "socket_timeout" not in kit.backend.options
    finally:
        kit.close()

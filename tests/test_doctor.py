"""``lockkit doctor`` on real servers: an evicting Redis is unsafe (exit 1), a good one is
not (exit 0), ``--json`` parses; replicas, redlock nodes, ZooKeeper's session, etcd's
leader and credentials, PostgreSQL through a proxy; Django's ``check --deploy`` and the
Celery worker's start-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery
from click.testing import CliRunner

from lockkit_celery import doctor_app
from lockkit_core.cli import cli
from lockkit_core.doctor import Level, Report, diagnose
from lockkit_core.errors import InsecureTransportWarning
from lockkit_core.testing import RedisServer, TcpProxy
from lockkit_core.testing.etcd import EtcdServer
from lockkit_core.testing.mariadb import MariaDBServer
from lockkit_core.testing.postgres import PostgresServer
from lockkit_core.testing.redlock import RedlockNodes
from lockkit_core.testing.servers import free_port
from lockkit_core.testing.zookeeper import ZooKeeperServer


def _policy(server: RedisServer, policy: str) -> None:
    with redis.Redis(port=server.port) as client:
        client.config_set("maxmemory-policy", policy)


@pytest.fixture(scope="module")
def doctor_redis() -> Iterator[RedisServer]:
    """A redis-server of this module's own: its settings are changed by the tests."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def evicting(doctor_redis: RedisServer) -> Iterator[RedisServer]:
    _policy(doctor_redis, "allkeys-lru")
    yield doctor_redis
    _policy(doctor_redis, "noeviction")


def _levels(report: Report) -> dict[str, Level]:
    return {f.check: f.level for f in report.findings}


@pytest.mark.redis
def test_an_evicting_redis_is_unsafe_with_exit_1(evicting: RedisServer) -> None:
    result = CliRunner().invoke(cli, ["doctor", evicting.url])
    assert result.exit_code == 1, result.output
    assert "UNSAFE  maxmemory-policy" in result.output
    assert "CONFIG SET maxmemory-policy noeviction" in result.output
    assert "verdict: UNSAFE" in result.output


@pytest.mark.redis
def test_volatile_policies_evict_lock_keys_too(doctor_redis: RedisServer) -> None:
    _policy(doctor_redis, "volatile-ttl")
    try:
        report = diagnose(doctor_redis.url)
    finally:
        _policy(doctor_redis, "noeviction")
    assert _levels(report)["maxmemory-policy"] is Level.UNSAFE
    assert report.exit_code == 1


@pytest.mark.redis
def test_a_good_redis_exits_0_and_json_parses(doctor_redis: RedisServer) -> None:
    result = CliRunner().invoke(cli, ["doctor", doctor_redis.url, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["level"] == "warn"  # the test server persists nothing: a warning only
    checks = {f["check"]: f["level"] for f in data["findings"]}
    assert checks["maxmemory-policy"] == "ok"
    assert checks["persistence"] == "warn"
    assert {"replication", "round-trip", "clock"} <= set(checks)


@pytest.mark.redis
def test_fsynced_aof_is_ok_for_fencing(doctor_redis: RedisServer) -> None:
    with redis.Redis(port=doctor_redis.port) as client:
        client.config_set("appendonly", "yes")
        client.config_set("appendfsync", "always")
        try:
            report = diagnose(doctor_redis.url)
        finally:
            client.config_set("appendonly", "no")
            client.config_set("appendfsync", "everysec")
    assert _levels(report)["persistence"] is Level.OK
    assert report.level is Level.OK and report.exit_code == 0


@pytest.mark.redis
def test_replicas_warn_and_a_replica_is_unsafe(doctor_redis: RedisServer) -> None:
    with RedisServer() as replica, redis.Redis(port=replica.port) as client:
        client.replicaof("127.0.0.1", doctor_redis.port)
        try:
            master = diagnose(doctor_redis.url)
            for _ in range(100):  # until the replica is connected
                if _levels(master)["replication"] is Level.WARN:
                    break
                master = diagnose(doctor_redis.url)
            assert _levels(master)["replication"] is Level.WARN
            assert _levels(diagnose(replica.url))["replication"] is Level.UNSAFE
        finally:
            client.replicaof("no", "one")


@pytest.mark.redis
def test_unreachable_store_and_bad_url() -> None:
    result = CliRunner().invoke(cli, ["doctor", f"redis://127.0.0.1:{free_port()}/0"])
    assert result.exit_code == 1
    assert "cannot check" in result.output
    bad = CliRunner().invoke(cli, ["doctor", "nosuch://x"])
    assert bad.exit_code == 2 and "unknown lock backend scheme" in bad.output


@pytest.mark.redis
def test_redlock_checks_every_node(fault_nodes: RedlockNodes) -> None:
    _policy(fault_nodes.nodes[1], "allkeys-lfu")
    report = diagnose(fault_nodes.url())
    evicting = [
        f for f in report.findings if f.check == "maxmemory-policy" and f.level is Level.UNSAFE
    ]
    assert [f.where for f in evicting] == [f"127.0.0.1:{fault_nodes.nodes[1].port}"]
    assert _levels(report)["quorum"] is Level.OK
    _policy(fault_nodes.nodes[1], "noeviction")
    fault_nodes.nodes[0].kill()
    report = diagnose(fault_nodes.url())
    assert _levels(report)["quorum"] is Level.WARN and report.exit_code == 0
    fault_nodes.nodes[2].kill()
    assert _levels(diagnose(fault_nodes.url()))["quorum"] is Level.UNSAFE


@pytest.mark.zookeeper
def test_zookeeper_session_timeout_against_the_ttl(zookeeper_server: ZooKeeperServer) -> None:
    url = zookeeper_server.url + "?session_timeout=2"
    short = diagnose(url, ttl=0.5)
    assert _levels(short)["session-timeout"] is Level.WARN
    assert _levels(diagnose(url, ttl=30))["session-timeout"] is Level.OK


@pytest.mark.etcd
def test_etcd_leader_members_and_credentials_in_clear(etcd_server: EtcdServer) -> None:
    report = diagnose(etcd_server.url)
    assert _levels(report)["leader"] is Level.OK
    assert _levels(report)["members"] is Level.WARN  # one member
    host = etcd_server.url.removeprefix("etcd://")
    with pytest.warns(InsecureTransportWarning):
        with_password = diagnose(f"etcd://app:secret@{host}")
    assert _levels(with_password)["credentials"] is Level.UNSAFE
    assert "secret" not in json.dumps(with_password.as_dict())


@pytest.mark.postgresql
def test_postgres_isolation_and_a_proxy_in_between(postgres_server: PostgresServer) -> None:
    direct = diagnose(postgres_server.url)
    assert _levels(direct)["isolation"] is Level.OK
    assert _levels(direct)["pooler"] is Level.OK
    proxy = TcpProxy("127.0.0.1", postgres_server.port)
    try:
        via = postgres_server.url.replace(f":{postgres_server.port}/", f":{proxy.port}/")
        assert _levels(diagnose(via))["pooler"] is Level.WARN
    finally:
        proxy.close()


@pytest.mark.redis
def test_celery_worker_start_refuses_an_unsafe_store(evicting: RedisServer) -> None:
    app = Celery("doctor", set_as_current=False)
    app.conf.lockkit_url = evicting.url
    report = doctor_app(app)  # "log", the default: reported, not refused
    assert report is not None and report.exit_code == 1
    app.conf.lockkit_doctor = "refuse"
    with pytest.raises(SystemExit):
        doctor_app(app)
    app.conf.lockkit_doctor = "off"
    assert doctor_app(app) is None


@pytest.mark.mysql
def test_mysql_isolation_and_connection(mariadb_server: MariaDBServer) -> None:
    report = diagnose(mariadb_server.url)
    assert _levels(report)["isolation"] is Level.OK  # REPEATABLE READ, MariaDB's default
    assert _levels(report)["pooler"] is Level.OK


@pytest.mark.redis
def test_a_real_worker_refuses_to_start_on_an_unsafe_store(
    evicting: RedisServer, tmp_path: Path
) -> None:
    (tmp_path / "doctorapp.py").write_text(
        "from celery import Celery\n"
        "import lockkit_celery  # noqa: F401\n"
        "app = Celery('doctorapp', broker='memory://')\n"
        f"app.conf.lockkit_url = {evicting.url!r}\n"
        "app.conf.lockkit_doctor = 'refuse'\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    worker = subprocess.run(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "doctorapp",
            "worker",
            "--pool",
            "solo",
            "--loglevel",
            "warning",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert worker.returncode == 1, worker.stderr[-2000:]
    assert "the worker will not start" in worker.stderr
    assert "maxmemory-policy" in worker.stderr

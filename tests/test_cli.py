"""The ``lockkit`` command on a real ``file://`` store, and ``lockkit demo`` end to end."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from lockkit_core import Lock, LockKit, LockNotOwned, known_schemes
from lockkit_core.backends.base import owner_hint
from lockkit_core.cli import cli


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"file://{tmp_path / 'locks'}"


@pytest.fixture
def held(url: str) -> Iterator[dict[str, Lock]]:
    """Two locks held by this process without a namespace, one under the namespace "shop"."""
    plain = LockKit(url)
    shop = LockKit(url, namespace="shop")
    locks = {
        "order:42": plain.lock("order:42", ttl=60, auto_renew=False),
        "order:7": plain.lock("order:7", ttl=60, auto_renew=False),
        "shop:cart:1": shop.lock("cart:1", ttl=60, auto_renew=False),
    }
    for lock in locks.values():
        assert lock.acquire(timeout=5)
    yield locks
    for lock in locks.values():
        with contextlib.suppress(LockNotOwned):  # a test may have force-released it
            lock.release()
    plain.close()
    shop.close()


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), prog_name="lockkit")


def lines(result: Result) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.strip()]


# -- list ----------------------------------------------------------------------------------


def test_list_prints_an_aligned_table(url: str, held: dict[str, Lock]) -> None:
    result = run("--url", url, "list")
    assert result.exit_code == 0, result.output
    header, *rows = lines(result)
    assert header.split() == ["KEY", "TOKEN", "TTL", "LEFT", "AGE", "HOLDER", "OWNER", "HINT"]
    assert [row.split()[0] for row in rows] == ["order:42", "order:7", "shop:cart:1"]
    for column in ("TOKEN", "TTL LEFT", "AGE", "HOLDER", "OWNER HINT"):
        start = header.index(column)
        assert all(row[start - 2 : start] == "  " and row[start] != " " for row in rows), column
    row = rows[0]
    lock = held["order:42"]
    assert lock.owner is not None
    assert f"  {lock.token}  " in row
    assert row.endswith(owner_hint(lock.owner))
    assert f"pid {os.getpid()}" in row
    age = row[header.index("AGE") :].split("  ")[0]
    assert age.endswith(" s") and 0 <= float(age[:-2]) < 60, age
    ttl_left = float(row.split()[2])
    assert 50 < ttl_left <= 60


def test_list_filters_by_prefix_and_namespace(url: str, held: dict[str, Lock]) -> None:
    result = run("--url", url, "list", "order:4")
    assert result.exit_code == 0, result.output
    assert [row.split()[0] for row in lines(result)[1:]] == ["order:42"]

    result = run("--url", url, "--namespace", "shop", "list")
    assert result.exit_code == 0, result.output
    assert [row.split()[0] for row in lines(result)[1:]] == ["cart:1"]


def test_list_json(url: str, held: dict[str, Lock]) -> None:
    result = run("--url", url, "list", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [item["key"] for item in data] == ["order:42", "order:7", "shop:cart:1"]
    first = data[0]
    lock = held["order:42"]
    assert lock.owner is not None
    assert first["token"] == lock.token
    assert first["owner_hint"] == owner_hint(lock.owner)
    assert first["stored_key"] == "order:42"
    assert 50 < first["ttl_remaining"] <= 60
    assert abs(first["started"] - time.time()) < 60  # taken by the fixture, moments ago
    assert set(first) == {
        "key",
        "stored_key",
        "owner_hint",
        "token",
        "ttl_remaining",
        "holder",
        "started",
        "waiters",
    }


def test_list_empty(url: str) -> None:
    result = run("--url", url, "list")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "no locks held"
    result = run("--url", url, "list", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == []


def test_url_and_namespace_come_from_the_environment(
    url: str, held: dict[str, Lock], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCKKIT_URL", url)
    monkeypatch.setenv("LOCKKIT_NAMESPACE", "shop")
    result = run("list", "--json")
    assert result.exit_code == 0, result.output
    assert [item["key"] for item in json.loads(result.stdout)] == ["cart:1"]


# -- info ----------------------------------------------------------------------------------


def test_info_on_a_held_key(url: str, held: dict[str, Lock]) -> None:
    lock = held["order:7"]
    result = run("--url", url, "info", "order:7")
    assert result.exit_code == 0, result.output
    header, row = lines(result)
    assert header.startswith("KEY")
    assert row.split()[:2] == ["order:7", str(lock.token)]

    result = run("--url", url, "info", "order:7", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["key"] == "order:7"
    assert data["token"] == lock.token


def test_info_on_a_free_key(url: str, held: dict[str, Lock]) -> None:
    result = run("--url", url, "info", "order:99")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "order:99 is free"
    result = run("--url", url, "info", "order:99", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) is None


# -- release -------------------------------------------------------------------------------


def test_release_refuses_without_force(url: str, held: dict[str, Lock]) -> None:
    result = run("--url", url, "release", "order:42")
    assert result.exit_code == 1
    assert "Error: refusing to release 'order:42' without --force" in result.output
    assert held["order:42"].owned()
    assert LockKit(url).admin.info("order:42") is not None


def test_release_force_frees_the_key(url: str, held: dict[str, Lock]) -> None:
    lock = held["order:42"]
    assert lock.owner is not None
    result = run("--url", url, "release", "order:42", "--force")
    assert result.exit_code == 0, result.output
    expected = f"released order:42 (owner {owner_hint(lock.owner)}, token {lock.token})"
    assert result.stdout.strip() == expected
    kit = LockKit(url)
    assert kit.admin.info("order:42") is None
    assert kit.admin.info("order:7") is not None
    other = kit.lock("order:42", ttl=5, auto_renew=False)
    assert other.acquire(blocking=False)
    assert other.token is not None and lock.token is not None
    assert other.token > lock.token
    other.release()

    result = run("--url", url, "release", "order:42", "--force")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "order:42 was already free"


def test_release_force_json(url: str, held: dict[str, Lock]) -> None:
    lock = held["shop:cart:1"]
    result = run("--url", url, "--namespace", "shop", "release", "cart:1", "--force", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["key"] == "cart:1"
    assert data["released"] is True
    assert data["previous"]["token"] == lock.token
    assert data["previous"]["stored_key"] == "shop:cart:1"

    result = run("--url", url, "--namespace", "shop", "release", "cart:1", "--force", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"key": "cart:1", "released": False, "previous": None}


# -- errors --------------------------------------------------------------------------------


def test_lockkit_errors_are_one_clean_line(url: str) -> None:
    result = run("--url", "bogus://x", "list")
    assert result.exit_code == 1
    assert result.output.startswith("Error: unknown lock backend scheme 'bogus://'")
    assert "file://" in result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)

    result = run("--url", url, "info", "")
    assert result.exit_code == 1
    assert result.output.startswith("Error: lock key must be a non-empty string")


# -- backends ------------------------------------------------------------------------------


def test_backends_table(url: str) -> None:
    result = run("--url", url, "backends")
    assert result.exit_code == 0, result.output
    out = lines(result)
    rows = {line.split()[1 if line.startswith("*") else 0]: line for line in out[1:-1]}
    advisory = {"postgresql://?mode=advisory", "postgres://?mode=advisory"}
    assert set(rows) == {scheme + "://" for scheme in known_schemes()} | advisory
    assert "no_lease" in rows["postgresql://?mode=advisory"]
    assert "hand_off" not in rows["postgresql://?mode=advisory"]
    assert rows["file://"].startswith("*")
    assert "single-node" in rows["file://"]
    assert "cross_process" in rows["file://"]
    assert "in-process" in rows["memory://"]
    assert "fair" in rows["memory://"]
    assert "single-node" in rows["redis://"]
    assert out[-1] == "* the backend that --url / LOCKKIT_URL selects (file://)"


def test_backends_json() -> None:
    result = run("--url", "memory://", "backends", "--json")
    assert result.exit_code == 0, result.output
    data = {row["scheme"] + row["variant"]: row for row in json.loads(result.stdout)}
    advisory = {"postgresql?mode=advisory", "postgres?mode=advisory"}
    assert set(data) == set(known_schemes()) | advisory
    memory = data["memory"]
    assert memory["current"] is True
    assert memory["grade"] == "in-process"
    assert memory["installed"] is True
    assert "cross_process" not in memory["capabilities"]
    assert data["file"]["current"] is False
    assert data["file"]["capabilities"] == [
        "ttl",
        "fencing",
        "fair",
        "cross_process",
        "list",
        "hand_off",
        "shared",
        "no_lease",
    ]
    assert data["redis"]["grade"] == "single-node"
    assert data["zookeeper"]["grade"] == "consensus"
    assert "hand_off" not in data["zookeeper"]["capabilities"]
    assert {"cross_process", "cross_host"} <= set(data["redis"]["capabilities"])


NEEDS_DRIVER_BACKEND = """
from lockkit_core.backends.memory import MemoryBackend


class NeedsDriver(MemoryBackend):
    schemes = ("needsdriver",)
    extra = "needsdriver"
    requires = "lockkit_test_driver_that_is_not_installed"
"""


def plugin_env(
    tmp_path: Path, modules: dict[str, str], entry_points: dict[str, str]
) -> dict[str, str]:
    """An environment in which a fake installed package declares ``lockkit.backends`` entry
    points (scheme -> "module:Class") and provides ``modules`` (name -> source)."""
    for name, source in modules.items():
        (tmp_path / f"{name}.py").write_text(source)
    dist = tmp_path / "lockkit_test_plugins-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: lockkit-test-plugins\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text(
        "[lockkit.backends]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items())
    )
    path = [str(tmp_path), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}


def run_lockkit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed ``lockkit`` command (``python -m lockkit_core.cli`` if it is not)."""
    script = Path(sys.executable).with_name("lockkit")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "lockkit_core.cli"]
    return subprocess.run(
        [*command, *args], check=False, capture_output=True, text=True, timeout=120, env=env
    )


def test_backends_survives_missing_drivers_and_broken_plugins(tmp_path: Path) -> None:
    env = plugin_env(
        tmp_path,
        {"lockkit_needs_driver": NEEDS_DRIVER_BACKEND},
        {
            "needsdriver": "lockkit_needs_driver:NeedsDriver",
            "broken": "lockkit_test_module_that_does_not_exist:Backend",
        },
    )
    proc = run_lockkit("backends", "--json", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = {row["scheme"]: row for row in json.loads(proc.stdout)}
    assert data["needsdriver"]["installed"] is False
    assert data["needsdriver"]["grade"] == "in-process"
    assert data["needsdriver"]["note"] == 'pip install "lockkit[needsdriver]"'
    assert data["broken"]["grade"] is None
    assert data["broken"]["note"].startswith("cannot load:")
    assert data["file"]["installed"] is True

    proc = run_lockkit("backends", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'pip install "lockkit[needsdriver]"' in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


# -- demo ----------------------------------------------------------------------------------


def demo_rows(stdout: str) -> dict[str, list[int]]:
    """The tally table: run name -> [orders, SMS sent, orders with 2+ SMS, orders with none]."""
    rows = {}
    for line in stdout.splitlines():
        for name in ("without a lock", "with kit.lock()"):
            rest = line[len(name) :].split()
            if line.startswith(name) and len(rest) == 6 and rest[-1] == "s":
                rows[name] = [int(cell) for cell in rest[:4]]
    return rows


def test_demo_sends_exactly_one_sms_per_order_with_the_lock(url: str) -> None:
    proc = run_lockkit("--url", url, "demo", "--orders", "60", "--workers", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = demo_rows(proc.stdout)
    assert rows["with kit.lock()"] == [60, 60, 0, 0]
    orders, sent, _, missing = rows["without a lock"]
    assert (orders, missing) == (60, 0)
    assert sent >= 60
    assert "Verdict:" in proc.stdout
    assert "FAILED" not in proc.stdout


def test_demo_rejects_memory_urls() -> None:
    result = run("--url", "memory://", "demo")
    assert result.exit_code == 1
    assert "memory:// backend only locks among the threads of one process" in result.output


LEAKY_BACKEND = '''
from lockkit_core.backends.base import Backend, Capability, Grant


class LeakyBackend(Backend):
    """Says yes to everyone: a lock that does not exclude."""

    schemes = ("leaky",)
    capabilities = Capability.CROSS_PROCESS

    def try_acquire(self, key, owner, ttl):
        return Grant(True, 1)

    def release(self, key, owner):
        return True

    def extend(self, key, owner, ttl):
        return True

    def list(self, prefix):
        return []

    def info(self, key):
        return None

    def force_release(self, key):
        return False
'''


def test_demo_fails_when_the_lock_does_not_exclude(tmp_path: Path) -> None:
    """With a plug-in backend that grants every request, the locked run double-sends too:
    the demo must say so and exit 1. (Also shows the defaults reliably produce the race.)"""
    env = plugin_env(
        tmp_path, {"leaky_backend": LEAKY_BACKEND}, {"leaky": "leaky_backend:LeakyBackend"}
    )
    proc = run_lockkit("--url", "leaky://", "demo", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    orders, sent, duplicated, missing = demo_rows(proc.stdout)["with kit.lock()"]
    assert (orders, missing) == (200, 0)
    assert duplicated > 0
    assert sent > 200
    assert "Verdict: FAILED" in proc.stdout


def test_ages_read_as_seconds_minutes_and_hours() -> None:
    from lockkit_core.cli import age_text

    assert [age_text(s) for s in (None, 0.04, 59.94, 61, 3599, 3600, 7384)] == [
        "-",
        "0.0 s",
        "59.9 s",
        "1m 01s",
        "59m 59s",
        "1h 00m",
        "2h 03m",
    ]

"""Credentials in a store URL or in ``OPTIONS`` never reach a human: not through ``repr()`` of
the kit, its config or the parsed URL, not through ``kit.admin``, the ``lockkit`` command or
``manage.py lockkit check``, not through any backend's errors, and not through the error about
a malformed URL. One redaction function does it (``lockkit_core.redact``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lockkit_core import BackendError, ConfigError, LockKit, LockKitConfig, parse_url
from lockkit_core.testing import free_port

SECRET = "s3cr3t-Pa55word"
TESTS = Path(__file__).resolve().parent


# URL templates, a free port filled in by the test: a port in the test's id would differ between
# pytest-xdist workers, which must collect the same tests.
UNREACHABLE_URLS = [
    f"redis://127.0.0.1:{{port}}/0?password={SECRET}&socket_timeout=0.5",
    f"redis://user:{SECRET}@127.0.0.1:{{port}}/0?socket_timeout=0.5",
    f"redis://:{SECRET}@127.0.0.1:{{port}}/0?socket_timeout=0.5",
    f"etcd://127.0.0.1:{{port}}?username=u&password={SECRET}&socket_timeout=0.5",
    f"etcd://u:{SECRET}@127.0.0.1:{{port}}?socket_timeout=0.5",
    f"zookeeper://u:{SECRET}@127.0.0.1:{{port}}/?socket_timeout=0.5&session_timeout=1",
    f"zookeeper://127.0.0.1:{{port}}/?username=u&password={SECRET}&socket_timeout=0.5"
    "&session_timeout=1",
]


@pytest.mark.parametrize("template", UNREACHABLE_URLS)
def test_a_password_never_shows(template: str) -> None:
    url = template.format(port=free_port())
    kit = LockKit(url)
    try:
        shown = [
            repr(kit),
            repr(kit.config),
            str(kit.config),
            repr(parse_url(url)),
            parse_url(url).redacted(),
            kit.backend.describe(),
            repr(kit.admin.backend_info()),
        ]
        with pytest.raises(BackendError) as caught:
            kit.lock("k").acquire(timeout=0)
        shown.append(str(caught.value))
        for text in shown:
            assert SECRET not in text, text
        assert "***" in repr(kit)
    finally:
        kit.close()


def test_a_password_in_options_never_shows() -> None:
    config = LockKitConfig(url="redis://127.0.0.1:1/0", options={"password": SECRET})
    assert SECRET not in repr(config) and "'password': '***'" in repr(config)
    kit = LockKit(config=config)
    try:
        assert SECRET not in repr(kit) and SECRET not in repr(kit.config)
    finally:
        kit.close()


@pytest.mark.parametrize(
    "url",
    [
        f"redis://user:{SECRET}@127.0.0.1:99999/0",  # bad port
        f"redis://user:{SECRET}@127.0.0.1:6379/0#frag",  # a fragment
        f"redis://127.0.0.1:6379/0?password={SECRET}&password=x",  # an option twice
        f"user:{SECRET}@127.0.0.1:6379/0",  # no scheme
        f"bogus://user:{SECRET}@127.0.0.1/",  # unknown scheme
        f"redis://user:{SECRET}@127.0.0.1:6379/0?sokcet_timeout=1",  # unknown option
        f"redis://user:{SECRET}@127.0.0.1:6379/0?socket_timeout=soon",  # bad option value
        f"redis://:ab#{SECRET}@127.0.0.1:6379/0",  # a raw '#' in the password
        f"redis://:pa/{SECRET}@127.0.0.1/0",  # a raw '/'
        f"redis://:pa?{SECRET}@127.0.0.1/0",  # a raw '?'
    ],
)
def test_a_malformed_url_error_hides_the_password(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        LockKit(url).close()
    assert SECRET not in str(caught.value), caught.value
    assert "***" in str(caught.value) or "user:" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:abc#def@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("redis://u:pa/ss@h/0?db=1", "redis://u:***@h/0?db=1"),
        ("redis://u:pa?ss@h/0", "redis://u:***@h/0"),
        ("redis://u:p@ss@h/0#x", "redis://u:***@h/0#x"),
        ("redis://h/0?q=a@b", "redis://h/0?q=a@b"),  # an '@' after the path is no userinfo
        ("file:///tmp/a@b/locks", "file:///tmp/a@b/locks"),
    ],
)
def test_userinfo_runs_to_the_last_at_before_the_host(url: str, shown: str) -> None:
    from lockkit_core.redact import redact_url

    assert redact_url(url) == shown


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "credentials", [(f"u:{SECRET}@", ""), ("", f"&password={SECRET}")], ids=["userinfo", "query"]
)
def test_the_lockkit_command_hides_the_password(credentials: tuple[str, str]) -> None:
    userinfo, query = credentials
    url = f"redis://{userinfo}127.0.0.1:{free_port()}/0?socket_timeout=0.5{query}"
    for verb in (["info", "k"], ["list"], ["backends"]):
        done = _run("-m", "lockkit_core.cli", *verb, env={"LOCKKIT_URL": url})
        assert SECRET not in done.stdout + done.stderr, (verb, done.stdout, done.stderr)


@pytest.mark.django_db
def test_manage_py_lockkit_check_hides_the_password() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0?password={SECRET}&socket_timeout=0.5"
    done = _run(
        "-m",
        "django",
        "lockkit",
        "check",
        env={
            "PYTHONPATH": str(TESTS),
            "DJANGO_SETTINGS_MODULE": "djproject.settings",
            "DJPROJECT_LOCKKIT_URL": url,
        },
    )
    output = done.stdout + done.stderr
    assert "password=***" in output, output
    assert SECRET not in output

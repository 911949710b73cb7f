"""The admin lock page in a real browser: Debian's chromium, driven by chromedriver through
Selenium, against pytest-django's live server, with the locks on the session's redis-server.

A staff user with the permissions logs in, finds a lock that another process holds, releases
it after the confirmation page, and sees it gone (the store agrees, and the holder learns it
no longer owns it); a user who is not staff is refused."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as when
from selenium.webdriver.support.ui import WebDriverWait

from lockkit_core import LockKit
from lockkit_core.testing import RedisServer

pytestmark = [
    pytest.mark.browser,
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
NAMESPACE = "browser"
TESTS = Path(__file__).parent
# Without these chromium hangs on a machine with no network.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    """One headless chromium for the module, with a profile of its own."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists():
            pytest.fail(f"{path} is missing: scripts/test installs chromium and chromium-driver")
    profile = tempfile.mkdtemp(prefix="lockkit-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def lock_store(settings: Any, redis_server: RedisServer) -> Iterator[LockKit]:
    """settings.LOCKKIT on the session's redis-server, and a kit of our own to look with."""
    settings.LOCKKIT = {"URL": redis_server.url, "NAMESPACE": NAMESPACE}
    with LockKit(redis_server.url, namespace=NAMESPACE) as kit:
        yield kit
        for info in kit.admin.list():
            kit.admin.force_release(info.key)


class Holder:
    """tests/holder_process.py: holds a key in another process until told otherwise."""

    def __init__(self, url: str, key: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(TESTS / "holder_process.py"), url, NAMESPACE, key, "60", "1"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.notices: list[str] = []
        word, token, _owner = self.read().split()
        assert word == "acquired"
        self.token = int(token)

    def read(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def ask(self, command: str) -> str:
        """The answer to ``command``; ``on_lost`` notices before it are kept in ``notices``."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        line = self.read()
        while line == "on_lost":
            self.notices.append(line)
            line = self.read()
        return line

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def holder(lock_store: LockKit, redis_server: RedisServer) -> Iterator[Holder]:
    started = Holder(redis_server.url, "report:nightly")
    try:
        yield started
    finally:
        started.close()


def log_in(browser: WebDriver, base: str, user: str, then: str) -> None:
    browser.delete_all_cookies()
    browser.get(f"{base}/admin/login/?next={then}")
    browser.find_element(By.ID, "id_username").send_keys(user)
    browser.find_element(By.ID, "id_password").send_keys("pw")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()


def wait_for(browser: WebDriver, css: str) -> Any:
    return WebDriverWait(browser, 15).until(
        when.presence_of_element_located((By.CSS_SELECTOR, css))
    )


def user(name: str, *, staff: bool) -> User:
    made = User.objects.create_user(name, password="pw", is_staff=staff)
    made.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_lock", "release_lock"])
    )
    return made


def test_staff_release_a_lock_another_process_holds(
    browser: WebDriver, live_server: Any, lock_store: LockKit, holder: Holder
) -> None:
    user("operator", staff=True)
    log_in(browser, live_server.url, "operator", "/admin/lockkit/lock/")
    row = wait_for(browser, 'tr.lockkit-lock[data-key="report:nightly"]')
    assert row.find_element(By.CSS_SELECTOR, ".lockkit-pid").text == str(holder.proc.pid)
    assert row.find_element(By.CSS_SELECTOR, ".lockkit-token").text == str(holder.token)

    row.find_element(By.CSS_SELECTOR, "a.lockkit-release").click()
    assert wait_for(browser, "#lockkit-confirm-key").text == "report:nightly"
    assert lock_store.admin.info("report:nightly") is not None  # the page only asked
    browser.find_element(By.ID, "lockkit-confirm").click()

    message = wait_for(browser, "ul.messagelist li.success").text
    assert "Released the lock 'report:nightly'" in message
    assert f"token {holder.token}" in message
    assert browser.find_element(By.ID, "lockkit-none").text.startswith("No locks held")
    assert browser.find_elements(By.CSS_SELECTOR, "tr.lockkit-lock") == []
    assert lock_store.admin.info("report:nightly") is None
    assert holder.ask("release") in {"lost", "notowned"}  # the holder no longer owns it
    assert holder.notices == ["on_lost"], "the holder's on_lost ran once"


def test_a_user_who_is_not_staff_is_refused(
    browser: WebDriver, live_server: Any, lock_store: LockKit, holder: Holder
) -> None:
    user("clerk", staff=False)
    log_in(browser, live_server.url, "clerk", "/admin/lockkit/lock/")
    assert "staff account" in wait_for(browser, ".errornote").text
    for page in ("/admin/lockkit/lock/", "/admin/lockkit/lock/release/?key=report:nightly"):
        browser.get(live_server.url + page)
        assert browser.current_url.startswith(f"{live_server.url}/admin/login/")
        assert browser.find_elements(By.ID, "id_username")  # the login form, not the page
        assert browser.find_elements(By.CSS_SELECTOR, "tr.lockkit-lock, #lockkit-confirm") == []
    assert lock_store.admin.info("report:nightly") is not None

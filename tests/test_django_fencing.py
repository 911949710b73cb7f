"""fenced_update and optimistic_update with real lock tokens, on SQLite (in memory and in a
file), a real PostgreSQL (the ``pg`` alias, tests/postgres_fixtures.py) and a real MariaDB
(``my``, tests/mariadb_fixtures.py). The race between processes on PostgreSQL is in
test_django_fence_race.py."""

from __future__ import annotations

import pytest
from django.db import connections
from djproject.models import Account

from lockkit_core import ConfigError, LockKit, LockNotOwned
from lockkit_django.fencing import fenced_update, optimistic_update

VENDORS = {"default": "sqlite", "lite": "sqlite", "pg": "postgresql", "my": "mysql"}

#: each database the helpers are tested on, with the django_db mark that opens it
DATABASES = [
    pytest.param("default", marks=pytest.mark.django_db, id="sqlite"),
    pytest.param("lite", marks=pytest.mark.django_db(databases=["lite"]), id="sqlite-file"),
    pytest.param(
        "pg",
        marks=[pytest.mark.postgresql, pytest.mark.django_db(databases=["pg"])],
        id="postgresql",
    ),
    pytest.param(
        "my",
        marks=[pytest.mark.mysql, pytest.mark.django_db(databases=["my"])],
        id="mariadb",
    ),
]

#: the databases that are also the lock store (``django://ALIAS``); committed rows
#: (``transaction=True``): SQLite lets one writer at a time, and the store writes on a
#: connection of its own
OWN_STORES = [
    pytest.param(
        "lite", marks=pytest.mark.django_db(databases=["lite"], transaction=True), id="sqlite"
    ),
    pytest.param(
        "pg",
        marks=[pytest.mark.postgresql, pytest.mark.django_db(databases=["pg"], transaction=True)],
        id="postgresql",
    ),
    pytest.param(
        "my",
        marks=[pytest.mark.mysql, pytest.mark.django_db(databases=["my"], transaction=True)],
        id="mariadb",
    ),
]


@pytest.mark.parametrize("alias", DATABASES)
def test_a_stale_holder_cannot_overwrite_a_newer_holder(alias: str) -> None:
    assert connections[alias].vendor == VENDORS[alias]
    account = Account.objects.using(alias).create(balance=100)
    row = Account.objects.using(alias).filter(pk=account.pk)
    with LockKit("memory://fence") as kit:
        stale = kit.lock("account:1", auto_renew=False, reentrant=False)
        assert stale.acquire()
        old_token = stale.token
        assert old_token is not None
        kit.admin.force_release("account:1")  # its lease ends while it still works
        with kit.lock("account:1", reentrant=False) as fresh:
            new_token = fresh.token
            assert new_token is not None and new_token > old_token
            assert fenced_update(row, new_token, balance=50)
        assert not fenced_update(row, old_token, balance=999)  # the stale write is refused
        with pytest.raises(LockNotOwned):
            stale.release()
    account.refresh_from_db(using=alias)
    assert (account.balance, account.fence) == (50, new_token)


@pytest.mark.parametrize("alias", OWN_STORES)
def test_the_databases_own_lock_fences_a_holder_whose_lease_ran_out(alias: str) -> None:
    """The lock in the same database (``django://ALIAS``): the stale holder's lease ends by the
    database clock, a successor takes the row over with a higher fence, and the stale
    holder's write is refused."""
    assert connections[alias].vendor == VENDORS[alias]
    row = Account.objects.using(alias).filter(
        pk=Account.objects.using(alias).create(balance=100).pk
    )
    with (
        LockKit(f"django://{alias}", namespace="fence") as a,
        LockKit(f"django://{alias}", namespace="fence") as b,
    ):
        stale = a.lock("account:1", ttl=0.5, auto_renew=False, reentrant=False)
        assert stale.acquire(timeout=0)
        old_token = stale.token
        assert old_token is not None
        assert fenced_update(row, old_token, balance=90)
        with b.lock("account:1", timeout=10, reentrant=False) as fresh:  # after the expiry
            new_token = fresh.token
            assert new_token is not None and new_token > old_token
            assert fenced_update(row, new_token, balance=50)
            assert not fenced_update(row, old_token, balance=999)  # while the successor holds
        assert not fenced_update(row, old_token, balance=999)  # and after it left
        with pytest.raises(LockNotOwned):
            stale.release()
    account = row.get()
    assert (account.balance, account.fence) == (50, new_token)


@pytest.mark.parametrize("alias", DATABASES)
def test_the_same_token_writes_again_only_with_a_newer_one(alias: str) -> None:
    row = Account.objects.using(alias).filter(pk=Account.objects.using(alias).create().pk)
    assert fenced_update(row, 10, balance=1)
    assert not fenced_update(row, 10, balance=2)
    assert fenced_update(row, 11, balance=3)
    assert row.get().balance == 3


@pytest.mark.parametrize("alias", DATABASES)
def test_optimistic_update_detects_a_concurrent_write(alias: str) -> None:
    row = Account.objects.using(alias).filter(pk=Account.objects.using(alias).create().pk)
    seen = row.get().version
    assert optimistic_update(row, seen, balance=5)
    assert not optimistic_update(row, seen, balance=6)  # written since we read it
    account = row.get()
    assert (account.balance, account.version) == (5, seen + 1)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda row: fenced_update(row, None, balance=1), "no fencing token"),
        (lambda row: fenced_update(row, "7", balance=1), "must be an int"),
        (lambda row: fenced_update(row, 7, fence_field="nope"), "has no field 'nope'"),
        (lambda row: fenced_update(row, 7, fence_field="small_fence"), "64-bit"),
        (lambda row: fenced_update(row, 7, fence=3), "leave it out"),
        (lambda row: optimistic_update(row, True, balance=1), "must be an int"),
        (lambda row: optimistic_update(row, 1, version_field="rev"), "has no field 'rev'"),
    ],
)
@pytest.mark.django_db
def test_bad_arguments_are_config_errors(call: object, message: str) -> None:
    row = Account.objects.filter(pk=Account.objects.create().pk)
    with pytest.raises(ConfigError, match=message):
        call(row)  # type: ignore[operator]

"""Django's system checks as lockkit_django's tests run them: ``run_checks`` without the
checks that query a database.

Django 6 runs the model checks against every database alias when no ``databases`` is given
(Django 5.2 against none), so a bare ``run_checks()`` asks SQLite whether it supports
JSONField, a query pytest-django refuses outside a ``django_db`` test: it passed only after some
earlier test had made Django cache the answer. ``databases=[]`` is what a bare call meant on
Django 5.2."""

from __future__ import annotations

from django.core.checks import CheckMessage
from django.core.checks import run_checks as _run_checks

__all__ = ["run_checks"]


def run_checks(include_deployment_checks: bool = False) -> list[CheckMessage]:
    """Every registered check but the database ones (lockkit's need no database)."""
    return list(_run_checks(include_deployment_checks=include_deployment_checks, databases=[]))

"""pytest plugin: record what ``@pytest.mark.fault(scenario, outcome)`` tests showed.

With ``LOCKKIT_FAULT_RESULTS=PATH``, each fault test's scenario, store, outcome and result is
appended to PATH as a JSON line (tests/fault_scenarios.py renders them); the store is the
test's ``store`` parameter or its module's name. The marker travels
in the report's user_properties, so under pytest-xdist the controller writes every line.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from fault_scenarios import check_marker

_STORE = re.compile(r"test_([a-z]+)(?:_[a-z]+)?_faults\.py")


def _store(item: pytest.Item) -> str:
    """The store a fault test ran on: its ``store`` parameter (tests/test_sql_faults.py runs
    one scenario set on two databases), else its module's name (``test_<store>_faults.py``, or
    ``test_<store>_<subject>_faults.py`` for a store whose fault tests are split by subject)."""
    callspec = getattr(item, "callspec", None)
    param = callspec.params.get("store") if callspec is not None else None
    if isinstance(param, str):
        return param
    found = _STORE.search(item.nodeid)
    return found.group(1) if found else "?"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("fault")
        if marker is None:
            continue
        scenario, outcome = check_marker(marker.args)
        store = _store(item)
        item.user_properties.append(("fault", (scenario, store, outcome)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = os.environ.get("LOCKKIT_FAULT_RESULTS")
    # On a pytest-xdist worker the controller writes the line, from the report it is sent.
    if not path or "PYTEST_XDIST_WORKER" in os.environ:
        return
    fault = dict(report.user_properties).get("fault")
    if fault is None:
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        scenario, store, outcome = fault
        result = "skipped" if report.skipped else report.outcome
        row = {"scenario": scenario, "store": store, "outcome": outcome,
               "test": report.nodeid.split("::", 1)[1], "result": result}  # fmt: skip
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(row) + "\n")

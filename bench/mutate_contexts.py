"""A pytest plugin for the mutation lane's coverage run (bench/mutate.py, issue 48): each test's setup, call and
teardown are recorded by coverage.py under the test's node id (coverage's own `switch_context`, as pytest-cov's
`--cov-context=test` does), so a fixture's work counts for the test that asked for it; code run outside any test
(imports at collection) keeps the empty context. The node ids of the tests that fail are written to the file named
by MUTATE_FAILED_FILE: the lane does not let a test that fails unmutated judge a mutation."""

from __future__ import annotations

import os

import coverage
import pytest

_FAILED: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cov = coverage.Coverage.current()
    if cov is None:
        yield
        return
    cov.switch_context(item.nodeid)
    try:
        yield
    finally:
        cov.switch_context("")


def pytest_runtest_logreport(report):
    if report.failed and report.nodeid not in _FAILED:
        _FAILED.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    target = os.environ.get("MUTATE_FAILED_FILE")
    if target:
        with open(target, "w", encoding="utf-8") as handle:
            handle.write("".join(f"{nodeid}\n" for nodeid in _FAILED))

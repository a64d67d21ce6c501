"""Every way a test can end x every style of test x the score the sandbox gives (issue 48; round 16's S1), with the
host's real pytest and unittest as the oracle: each row's solution and test file are run by both the sandbox
(run_many, as code_execution_reward scores a completion) and, on the same files, pytest (every row) and unittest
(the TestCase rows). The score a row must get is what they say, never written here: 1.0 where the run ends well
and at least one test's body ran and passed (an expected failure counts: it ran and failed as expected), else 0.0.

One departure, the project's own rule (references/reward-functions.md): a test whose body never ran (a generator
test method, which unittest and pytest pass with a warning) scores 0.0 whatever the oracle says. Tests that take
pytest fixtures as arguments are not supported by the sandbox (it has no pytest; such a test fails): no row.

Styles: pytest functions (plain; async; with setup_module / setup_function / teardown_function /
teardown_module; asyncio.run of an async solution), pytest classes (plain; async; with setup_class /
setup_method / teardown_method / teardown_class), unittest TestCase (plain; with setUpModule / setUpClass /
setUp / tearDown / tearDownClass / tearDownModule), IsolatedAsyncioTestCase (on a sync solution; awaiting an
async solution, with asyncSetUp; gathering an async solution's coroutines)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from conftest import skip_unless_ci

from mcp_server.rewards.sandbox import Limits, run_many

pytestmark = [pytest.mark.usefixtures("bwrap"), pytest.mark.slow]  # every row starts a sandbox


@pytest.fixture(scope="module")
def bwrap() -> None:
    if shutil.which("bwrap") is None:
        skip_unless_ci("bubblewrap is not installed (apt-get install bubblewrap)")


SYNC, ASYNC = "def add(a, b):\n    return a + b\n", "async def add(a, b):\n    return a + b\n"
WRONG = {SYNC: SYNC.replace("a + b", "a - b"), ASYNC: ASYNC.replace("a + b", "a - b")}
MODULE_SETUPS = """\
STATE = {}
def setup_module(module):
    module.STATE['module'] = 5
def teardown_module(module):
    assert not TEARDOWN_FAILS, 'teardown_module'
def setup_function(function):
    assert 'five' not in STATE, 'teardown_function did not run'
    STATE['five'] = STATE['module']
def teardown_function(function):
    del STATE['five']
"""
PYTEST_CLASS_SETUPS = """\
class TestAdd:
    @classmethod
    def setup_class(cls):
        cls.base = 5
    @classmethod
    def teardown_class(cls):
        assert not TEARDOWN_FAILS, 'teardown_class'
    def setup_method(self, method):
        assert 'five' not in vars(self), 'an instance shared between tests'
        self.five = self.base
    def teardown_method(self, method):
        del self.five
"""
UNITTEST_SETUPS = """\
MODULE = {}
def setUpModule():
    MODULE['five'] = 5
def tearDownModule():
    assert not TEARDOWN_FAILS, 'tearDownModule'
class T(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.base = MODULE['five']
    @classmethod
    def tearDownClass(cls):
        assert not TEARDOWN_FAILS, 'tearDownClass'
    def setUp(self):
        self.five = self.base
    def tearDown(self):
        del self.five
"""
ASYNC_SETUP = """\
class T(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        await asyncio.sleep(0)
        self.five = 5
    async def asyncTearDown(self):
        assert not TEARDOWN_FAILS, 'asyncTearDown'
"""
# style: (solution, the lines before the tests (a class's header and setups), tests in a class?, async def tests?,
# how a body gets add(2, 3), what equals 5 only where the setups ran, has a teardown?)
STYLES = {
    "pytest function": (SYNC, "", False, False, "add(2, 3)", "5", False),
    "pytest function, async": (SYNC, "", False, True, "add(2, 3)", "5", False),
    "pytest function, setup_module/setup_function": (SYNC, MODULE_SETUPS, False, False, "add(2, 3)", "STATE['five']",
                                                     True),
    "pytest function, asyncio.run of an async solution": (ASYNC, "", False, False, "asyncio.run(add(2, 3))", "5",
                                                          False),
    "pytest class": (SYNC, "class TestAdd:\n", True, False, "add(2, 3)", "5", False),
    "pytest class, async": (SYNC, "class TestAdd:\n", True, True, "add(2, 3)", "5", False),
    "pytest class, setup_class/setup_method": (SYNC, PYTEST_CLASS_SETUPS, True, False, "add(2, 3)", "self.five",
                                               True),
    "unittest TestCase": (SYNC, "class T(unittest.TestCase):\n", True, False, "add(2, 3)", "5", False),
    "unittest TestCase, setUpModule/setUpClass/setUp": (SYNC, UNITTEST_SETUPS, True, False, "add(2, 3)", "self.five",
                                                        True),
    "unittest IsolatedAsyncioTestCase": (SYNC, "class T(unittest.IsolatedAsyncioTestCase):\n", True, True,
                                         "add(2, 3)", "5", False),
    "unittest IsolatedAsyncioTestCase, await an async solution": (ASYNC, ASYNC_SETUP, True, True, "await add(2, 3)",
                                                                  "self.five", True),
    "unittest IsolatedAsyncioTestCase, gather an async solution": (
        ASYNC, "class T(unittest.IsolatedAsyncioTestCase):\n", True, True,
        "(await asyncio.gather(add(2, 3), add(1, 1)))[0]", "5", False),
}
UNITTEST_ONLY = {"expected failure", "unexpected success"}
WITH_TEARDOWN = {"a teardown that fails"}
NEVER_RAN = "a body that never ran (generator)"
# outcome: its tests as (decorator, body lines); ADD and FIVE stand for the style's call and its five
ENDINGS = {
    "pass": [(None, ["assert ADD == FIVE"])],
    "wrong solution": [(None, ["assert ADD == FIVE"])],
    "assertion failure": [(None, ["assert ADD == 6"])],
    "error": [(None, ["ADD", "raise KeyError('missing')"])],
    "skip (nothing else ran)": [(None, ["raise unittest.SkipTest('later')"])],
    "skip beside a pass": [(None, ["raise unittest.SkipTest('later')"]), (None, ["assert ADD == FIVE"])],
    "expected failure": [("@unittest.expectedFailure", ["assert ADD == 6"])],
    "unexpected success": [("@unittest.expectedFailure", ["assert ADD == FIVE"])],
    "a teardown that fails": [(None, ["assert ADD == FIVE"])],
    NEVER_RAN: [(None, ["assert ADD == FIVE", "yield"])],
}
ROWS = [(style, outcome) for style in STYLES for outcome in ENDINGS
        if (outcome not in UNITTEST_ONLY or style.startswith("unittest"))
        and (outcome not in WITH_TEARDOWN or STYLES[style][6])]


def _files(style: str, outcome: str) -> tuple[str, str]:
    """The row's solution and its test file (the same text for the sandbox and the oracle)."""
    solution, head, in_class, is_async, call, five, _ = STYLES[style]
    lines = ["from solution import *", "import asyncio", "import unittest",
             f"TEARDOWN_FAILS = {outcome in WITH_TEARDOWN}"] + head.splitlines()
    indent = "    " if in_class else ""
    for i, (decorator, body) in enumerate(ENDINGS[outcome]):
        if decorator:
            lines.append(indent + decorator)
        lines.append(f"{indent}{'async def' if is_async else 'def'} test_t{i}({'self' if in_class else ''}):")
        lines += [f"{indent}    {line.replace('ADD', call).replace('FIVE', five)}" for line in body]
    return (WRONG[solution] if outcome == "wrong solution" else solution), "\n".join(lines) + "\n"


# The oracle: pytest.main and unittest in one process of the host's Python, a folder per row (its own pytest.ini,
# so nothing above it is read), the row's modules dropped between rows. No plugin but pytest's own loads.
ORACLE = r"""
import io, json, os, sys, unittest
import pytest

class Seen:
    def __init__(self):
        self.good = 0
    def pytest_runtest_logreport(self, report):
        if report.when == "call" and (report.passed or hasattr(report, "wasxfail")):
            self.good += 1

def fresh(folder):
    for name in ("solution", "test_solution"):
        sys.modules.pop(name, None)
    os.chdir(folder)
    sys.path.insert(0, folder)

verdicts = []
for folder, with_unittest in json.load(open(sys.argv[1])):
    fresh(folder)
    seen = Seen()
    code = pytest.main(["-q", "-p", "no:cacheprovider", "test_solution.py"], plugins=[seen])
    verdict = {"pytest": float(code == 0 and seen.good > 0)}
    if with_unittest:
        fresh(folder)
        suite = unittest.defaultTestLoader.loadTestsFromName("test_solution")
        result = unittest.TextTestRunner(stream=io.StringIO()).run(suite)
        verdict["unittest"] = float(result.wasSuccessful() and result.testsRun > len(result.skipped))
    sys.path.remove(folder)
    verdicts.append(verdict)
print("ORACLE " + json.dumps(verdicts))
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("endings")
    rows = []
    for i, row in enumerate(ROWS):
        folder = base / f"row{i}"
        folder.mkdir()
        solution, tests = _files(*row)
        (folder / "solution.py").write_text(solution)
        (folder / "test_solution.py").write_text(tests)
        (folder / "pytest.ini").write_text("[pytest]\n")
        rows.append([str(folder), row[0].startswith("unittest")])
    (base / "rows.json").write_text(json.dumps(rows))
    started = time.monotonic()
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-c", ORACLE, str(base / "rows.json")], capture_output=True, text=True,
                          env=env, timeout=600, cwd=base)
    oracle = json.loads(done.stdout.rsplit("ORACLE ", 1)[1])
    oracle_s = time.monotonic() - started
    scored = run_many([_files(*row) for row in ROWS], Limits(timeout_s=30.0, cpu_s=10.0), workers=4)
    sandbox_s = time.monotonic() - started - oracle_s
    print(f"\nendings: {len(ROWS)} rows; oracle {oracle_s:.1f} s, sandbox {sandbox_s:.1f} s")
    return {row: (verdict, result) for row, verdict, result in zip(ROWS, oracle, scored)}


@pytest.mark.parametrize(("style", "outcome"), ROWS, ids=[f"{s}-{o}" for s, o in ROWS])
def test_every_way_a_test_ends_gets_the_score_pytest_and_unittest_give(results, style, outcome):
    verdict, result = results[(style, outcome)]
    score = 1.0 if result.passed else 0.0
    if "unittest" in verdict:  # the two runners agree on every row (or the oracle itself is in doubt)
        assert verdict["unittest"] == verdict["pytest"], (verdict, _files(style, outcome)[1])
    expected = 0.0 if outcome == NEVER_RAN else verdict["pytest"]  # the departure the docstring names
    assert score == expected, (style, outcome, verdict, _files(style, outcome)[1], result.error,
                               result.output[-800:])


def test_the_oracle_tells_the_rows_apart(results):
    """The oracle is no constant: every style has a row it passes and a row it fails (the wrong solution), so a
    style whose rows all pass or all fail would show here (and the sandbox's scores follow it)."""
    for style in STYLES:
        verdicts = {outcome: results[(style, outcome)][0]["pytest"] for s, outcome in ROWS if s == style}
        if style.endswith(", async") and not style.startswith("unittest"):  # pytest fails every async def test
            assert set(verdicts.values()) == {0.0}, (style, verdicts)
            continue
        assert verdicts["pass"] == 1.0 and verdicts["wrong solution"] == 0.0, (style, verdicts)


def test_every_ending_has_a_row_for_every_style():
    """An ending or a style added to the tables without its rows fails here."""
    for outcome in ENDINGS:
        styles = {s for s, o in ROWS if o == outcome}
        assert styles == {s for s in STYLES if (outcome not in UNITTEST_ONLY or s.startswith("unittest"))
                          and (outcome not in WITH_TEARDOWN or STYLES[s][6])}, outcome

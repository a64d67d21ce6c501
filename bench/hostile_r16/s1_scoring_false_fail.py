# ruff: noqa
"""S1: correct solutions the sandbox scores as failed, where pytest / unittest pass them (harness_tests.py: "how one
collected test is called and judged ran, skipped or failed, as pytest and unittest would"). Each row: a correct
solution, its tests, what the harness says. (A wrong-solution control per shape shows the tests do discriminate.)
Run: PYTHONPATH=<checkout> <checkout>/.venv/bin/python bench/hostile_r16/s1_scoring_false_fail.py"""
import subprocess, sys, tempfile, os, time
from mcp_server.rewards.sandbox import run_many, Limits
ROWS = [
 ("unittest IsolatedAsyncioTestCase, async solution", "async def add(a, b): return a + b\n",
  "import unittest\nclass T(unittest.IsolatedAsyncioTestCase):\n    async def test_a(self):\n        self.assertEqual(await add(2, 3), 5)\n"),
 ("asyncio.run in a plain test, async solution", "async def add(a, b): return a + b\n",
  "import asyncio\ndef test_a():\n    assert asyncio.run(add(2, 3)) == 5\n"),
 ("unittest setUpClass", "def add(a, b): return a + b\n",
  "import unittest\nclass T(unittest.TestCase):\n    @classmethod\n    def setUpClass(cls):\n        cls.k = 5\n    def test_a(self):\n        self.assertEqual(add(2, 3), self.k)\n"),
 ("pytest setup_method", "def add(a, b): return a + b\n",
  "class TestA:\n    def setup_method(self, method):\n        self.k = 5\n    def test_a(self):\n        assert add(2, 3) == self.k\n"),
 ("higher-order: the test passes a lambda", "def my_map(f, xs): return [f(x) for x in xs]\n",
  "def test_m():\n    assert my_map(lambda x: x * 2, [1, 2]) == [2, 4]\n"),
 ("higher-order: the test passes a builtin (len)", "def my_map(f, xs): return [f(x) for x in xs]\n",
  "def test_m():\n    assert my_map(len, ['a', 'bb']) == [1, 2]\n"),
 ("sort with key= from the tests", "def sort_by(xs, key): return sorted(xs, key=key)\n",
  "def test_s():\n    assert sort_by(['ccc', 'a', 'bb'], key=len) == ['a', 'bb', 'ccc']\n"),
]
jobs = [(code, tests) for _, code, tests in ROWS]
res = run_many(jobs, Limits())
for (name, code, tests), r in zip(ROWS, res):
    with tempfile.TemporaryDirectory() as d:  # the same files under the host's unittest / pytest, for comparison
        open(os.path.join(d, "solution.py"), "w").write(code)
        open(os.path.join(d, "test_solution.py"), "w").write("from solution import *\n" + tests)
        ut = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_solution.py"], cwd=d, capture_output=True, text=True)
        runner = ("pytest: passed" if ut.returncode == 0 else f"pytest rc={ut.returncode}: " + ut.stdout.strip().splitlines()[-1][:60]) if "No module named pytest" not in ut.stderr else "pytest absent"
    print(f"{'FALSE FAIL' if not r.passed else 'ok':10s} {name}: sandbox passed={r.passed}; {runner}; error={(r.error or '')[:90]!r}")

"""The mutation lane's own contract (bench/mutate.py, issue 48): a mutation whose text moved, or that is found twice,
or an area or module mapped to a test file that does not exist, is named before any test runs and the lane exits
2; the set it keeps spans every area it declares. Built on a constructed tree: whether today's code still matches
each mutation is the lane's own check (`make mutate`, or `python bench/mutate.py --check`), not the suite's, so a
refactor is not held up by it."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

LANE = Path(__file__).resolve().parent.parent / "bench" / "mutate.py"


@pytest.fixture(scope="module")
def lane():
    spec = importlib.util.spec_from_file_location("mutate_lane", LANE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while the file executes
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def tree(tmp_path: Path, text: str) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "rule.py").write_text(text)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_rule.py").write_text("")
    return tmp_path


@pytest.mark.parametrize("text, says", [
    ("if x < LIMIT:\n    return 1\n", None),
    ("if x <= LIMIT:\n    return 1\n", "found 0 times"),
    ("if x < LIMIT:\n    return 1\nif x < LIMIT:\n    return 2\n", "found 2 times"),
])
def test_a_mutation_that_no_longer_applies_is_named(lane, tmp_path, text, says):
    root = tree(tmp_path, text)
    areas = {"rules": lane.Area("rules", "rules", ("tests/test_rule.py",))}
    mutation = lane.Mutation("rule-boundary", "rules", "pkg/rule.py", "if x < LIMIT:", "if x <= LIMIT:", "effect")
    problems = lane.stale(root, (mutation,), areas, modules={})
    if says is None:
        assert problems == [] and lane.mutated_text(root, mutation).startswith("if x <= LIMIT:")
    else:
        assert len(problems) == 1 and problems[0].startswith("rule-boundary: ") and says in problems[0]


def test_unknown_areas_missing_files_and_twice_declared_ids_are_named(lane, tmp_path):
    root = tree(tmp_path, "a = 1\nb = 2\n")
    areas = {"rules": lane.Area("rules", "rules", ("tests/test_rule.py", "tests/test_gone.py"))}
    mutations = (lane.Mutation("m", "rules", "pkg/rule.py", "a = 1", "a = 2", "e"),
                 lane.Mutation("m", "rules", "pkg/rule.py", "b = 2", "b = 3", "e"),
                 lane.Mutation("n", "nowhere", "pkg/rule.py", "a = 1", "a = 0", "e"),
                 lane.Mutation("o", "rules", "pkg/missing.py", "a = 1", "a = 0", "e"))
    problems = "\n".join(lane.stale(root, mutations, areas, modules={"pkg/rule.py": ("tests/test_none.py",)}))
    for says in ("n: unknown area 'nowhere'", "o: pkg/missing.py does not exist", "m: declared twice",
                 "area rules: no test file tests/test_gone.py", "pkg/rule.py: no test file tests/test_none.py"):
        assert says in problems


def test_the_kept_mutations_span_every_area(lane):
    """At least 25 mutations, every area with some, each with the effect a user would see, each module's test
    files inside the repository's tests/."""
    assert len(lane.MUTATIONS) >= 25
    per_area = {name: sum(m.area == name for m in lane.MUTATIONS) for name in lane.AREAS}
    assert all(count >= 3 for count in per_area.values()), per_area
    assert all(m.effect and m.old != m.new for m in lane.MUTATIONS)
    assert all(t.startswith("tests/test_") for tests in lane.MODULE_TESTS.values() for t in tests)


# ---------------------------------------------------------------------- which tests judge a mutation
RULE = '''LIMIT = 3


def over(x):
    if (x
            > LIMIT):
        return True
    return False


def unused(x):
    return x + 1
'''


def test_the_mutated_lines_are_widened_to_their_statement(lane, tmp_path):
    """A tracer records a multi-line condition at some of its lines: the mutation's lines are the whole statement
    (a compound statement's header, not its body)."""
    root = tree(tmp_path, RULE)
    mutation = lane.Mutation("m", "rules", "pkg/rule.py", "> LIMIT", ">= LIMIT", "e")
    assert lane.mutated_lines(root, mutation) == {5, 6}
    body = lane.Mutation("b", "rules", "pkg/rule.py", "        return True\n", "        return False\n", "e")
    assert lane.mutated_lines(root, body) == {7}


@pytest.mark.parametrize("ran, marker, tests, files, how", [
    # the tests that ran the line judge it; a test that fails unmutated does not
    ({5: {"tests/test_a.py::t1", "tests/test_b.py::t2[x]", "tests/test_c.py::bad"}, 6: {"tests/test_a.py::t1"}},
     "not slow", ("tests/test_a.py::t1", "tests/test_b.py::t2[x]"), (), "judged by 2 tests that run this line"),
    # an area whose judges are slow (they start processes coverage does not follow) adds its files
    ({5: {"tests/test_a.py::t1"}}, "", ("tests/test_a.py::t1",), ("tests/test_rule.py",),
     "judged by 1 test that runs this line and the area's slow files"),
    # a line run only at import (no test's context): every test that runs a line of its module (not one that
    # fails unmutated); a slow area's files too; where no test runs its module, the area's files
    ({5: {""}, 8: {"tests/test_c.py::bad"}, 9: {"tests/test_a.py::t1", "tests/test_b.py::t2[x]"}}, "not slow",
     ("tests/test_a.py::t1", "tests/test_b.py::t2[x]"), (), "judged by the 2 tests that run its module"),
    ({5: {""}, 9: {"tests/test_a.py::t1"}}, "", ("tests/test_a.py::t1",), ("tests/test_rule.py",),
     "judged by the 1 test that runs its module (its line runs only at import) and the area's slow files"),
    ({5: {""}, 6: {""}}, "not slow", (), ("tests/test_rule.py",),
     "by the area's files: its line runs only at import and no test runs its module"),
    # a line no fast test runs: the slow area's files, a fast area's nothing (its files' fast tests do not run it)
    ({9: {"tests/test_a.py::t1"}}, "", (), ("tests/test_rule.py",), "by the area's files: no fast test runs"),
    ({9: {"tests/test_a.py::t1"}}, "not slow", (), (), "no test runs this line and no area covers it"),
])
def test_a_mutation_is_judged_by_the_tests_that_run_its_line(lane, tmp_path, ran, marker, tests, files, how):
    areas = {"rules": lane.Area("rules", "rules", ("tests/test_rule.py",), marker=marker)}
    mutation = lane.Mutation("m", "rules", "pkg/rule.py", "> LIMIT", ">= LIMIT", "e")
    judges = lane.judges_of(mutation, ran, {5, 6}, failed=("tests/test_c.py::bad",), areas=areas, modules={})
    assert (judges.tests, judges.files, judges.marker) == (tests, files, marker)
    assert judges.how.startswith(how)


@pytest.mark.slow
def test_the_coverage_map_names_the_tests_that_run_each_line(lane, tmp_path):
    """The lane's coverage run on a constructed package: a line run in a fixture counts for the test that asked
    for it, a module constant runs only at import, an unreached function is run by nobody; a failing test is
    named; a second run of the same content reuses the map."""
    root = tmp_path / "tree"
    for folder in ("mcp_server", "tests", "bench"):  # the lane measures the package folder: a constructed one
        (root / folder).mkdir(parents=True)
    (root / "mcp_server" / "__init__.py").write_text("")
    (root / "mcp_server" / "rule.py").write_text(RULE)
    shutil.copy(LANE.parent / "mutate_contexts.py", root / "bench")
    (root / "tests" / "test_rule.py").write_text(
        "import pytest\nfrom mcp_server.rule import over\n\n\n@pytest.fixture\ndef big():\n    return over(9)\n\n\n"
        "def test_big(big):\n    assert big\n\n\n@pytest.mark.parametrize('x', [1, 2])\ndef test_small(x):\n"
        "    assert not over(x)\n\n\ndef test_broken():\n    assert over(0)\n")
    covered = lane.coverage_map(root, 120, cache=tmp_path / "cache")
    ran = covered.lines("mcp_server/rule.py")
    assert covered.failed == ("tests/test_rule.py::test_broken",)
    assert ran[7] == {"tests/test_rule.py::test_big"}  # `return True`, run in test_big's fixture
    assert ran[8] >= {"tests/test_rule.py::test_small[1]", "tests/test_rule.py::test_small[2]"}
    assert ran[1] == {""} and 12 not in ran  # LIMIT at import only; unused() never
    assert not covered.cached and lane.coverage_map(root, 120, cache=tmp_path / "cache").cached


@pytest.mark.slow
def test_a_pytest_killed_by_a_signal_is_an_error_not_a_catch(lane, tmp_path):
    """A judging pytest killed by a signal (the OOM killer's SIGKILL) gave no verdict: an error naming the signal,
    which caught() does not count."""
    root = tmp_path / "tree"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_killed.py").write_text(
        "import os\nimport signal\n\n\ndef test_killed():\n    os.kill(os.getpid(), signal.SIGKILL)\n")
    area = lane.Area("rules", "rules", ("tests/test_killed.py",))
    outcome, _ = lane.run_tests(root, area, 120)
    assert outcome == "error (killed by signal 9)" and not lane.caught(outcome)


@pytest.mark.parametrize("said, tests, files", [
    # a node id the mutation removed (a row generated from the tuple it edits): its whole file, the file's other
    # node ids dropped (the file runs them), the other files' ids kept
    ("ERROR: not found: {root}/tests/test_a.py::test_row\n(no match in any of [<Module test_a.py>])\n",
     ("tests/test_a.py::test_row[3]", "tests/test_a.py::test_other", "tests/test_b.py::t"),
     ("tests/test_b.py::t", "tests/test_a.py")),
    ("ERROR: not found: tests/test_a.py::test_row[3]\n", ("tests/test_a.py::test_row[3]", "tests/test_c.py"),
     ("tests/test_c.py", "tests/test_a.py")),
    # nothing said missing, or a file none of the node ids is of: no rerun (the error stands)
    ("no tests ran\n", ("tests/test_a.py::test_row[3]",), ()),
    ("ERROR: not found: {root}/tests/test_z.py::t\n", ("tests/test_a.py::test_row[3]",), ()),
])
def test_node_ids_a_mutation_removed_are_judged_by_their_whole_files(lane, tmp_path, said, tests, files):
    assert lane.whole_files(tmp_path, tests, said.format(root=tmp_path).encode()) == files


@pytest.mark.slow
@pytest.mark.parametrize("declared, outcome", [("(1, 2, 3)", "fail"), ("(1, 2)", "pass")])
def test_a_mutation_that_removes_its_judges_rows_gets_a_verdict(lane, tmp_path, declared, outcome):
    """A mutation that drops a row of the tuple a test parametrizes over (ROWS = (1, 2)) made pytest exit 4 on the
    row's node id: an error, no verdict. Judged by that file whole: caught where another of its tests fails."""
    root = tmp_path / "tree"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_rows.py").write_text(
        f"import pytest\n\nROWS = (1, 2)\n\n\n@pytest.mark.parametrize('row', ROWS)\ndef test_row(row):\n"
        f"    assert row\n\n\ndef test_declared():\n    assert ROWS == {declared}\n")
    area = lane.Area("rules", "rules", ("tests/test_rows.py",))
    found, _ = lane.run_tests(root, area, 120, ("tests/test_rows.py::test_row[3]", "tests/test_rows.py::test_row[1]"))
    assert found == outcome, found

"""The mutation lane's own contract (bench/mutate.py, issue 48): a mutation whose text moved, or that is found twice,
or an area or module mapped to a test file that does not exist, is named before any test runs and the lane exits
2; the set it keeps spans every area it declares. Built on a constructed tree: whether today's code still matches
each mutation is the lane's own check (`make mutate`, or `python bench/mutate.py --check`), not the suite's, so a
refactor is not held up by it."""

from __future__ import annotations

import importlib.util
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

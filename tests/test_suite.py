"""The suite's own rules: a skip that would hide a failure is a failure under CI, and CI sets CI."""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import ROOT, skip_unless_ci


@pytest.mark.parametrize("value", ["1", "true"])
def test_a_missing_prerequisite_fails_under_ci(monkeypatch, value):
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match="no npm here.*CI is set"):
        skip_unless_ci("no npm here")


@pytest.mark.parametrize("value", [None, "", "0", "false"])
def test_a_missing_prerequisite_skips_elsewhere(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.skip.Exception, match="no npm here"):
        skip_unless_ci("no npm here")


@pytest.mark.slow
def test_ci_script_runs_make_test_with_ci_set(tmp_path):
    """.ci/run, with a stand-in `make` first on PATH that records its arguments and CI."""
    fake = tmp_path / "make"
    fake.write_text('#!/bin/sh\necho "make $* CI=$CI" > "$RECORD"\n')
    fake.chmod(0o755)
    record = tmp_path / "record"
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(PATH=f"{tmp_path}{os.pathsep}{env['PATH']}", RECORD=str(record))
    proc = subprocess.run([str(ROOT / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert record.read_text().strip() == "make test CI=1"


GUARDED = '''
import subprocess, sys
import pytest

def test_unmarked_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

@pytest.mark.slow
def test_marked_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

@pytest.fixture()
def starts_one():
    subprocess.run(["true"], check=True)

def test_unmarked_whose_fixture_starts_one(starts_one):
    pass

def test_unmarked_starts_nothing():
    assert True
'''


@pytest.mark.slow
def test_a_test_that_starts_a_process_must_be_marked_slow(pytester):
    """The lanes' rule (issue 45), enforced by the suite's own conftest on every run: a test that starts a process,
    in its body or in a fixture, without `@pytest.mark.slow` fails at teardown naming what it started; `make check`
    (`-m "not slow"`) therefore never starts one."""
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makepyfile(test_guarded=GUARDED)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4, errors=2)
    result.stdout.fnmatch_lines(["*test_unmarked_starts_a_process started 1 process(es) but is not marked slow*",
                                 "*test_unmarked_whose_fixture_starts_one started 1 process(es)*"])
    fast = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-m", "not slow")
    fast.assert_outcomes(passed=3, errors=2, deselected=1)


def test_make_check_is_the_fast_lane_and_make_test_runs_everything():
    makefile = (ROOT / "Makefile").read_text()
    check = makefile.split("\ncheck:", 1)[1].split("\n\n", 1)[0]
    test = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert '-m "not slow" tests' in check and "ruff check" in check
    assert "pytest -q --durations=10 -n $(TEST_JOBS) --dist loadfile tests" in test
    assert "-m" not in test.split("pytest", 1)[1]


def test_the_files_make_test_hands_out_first_are_files_of_the_suite():
    """HEAVY_FILES (tests/conftest.py) orders xdist's queue by file name, longest first: a renamed or removed file
    would drop to the queue's end unseen (and a long file started last leaves the other worker idle), so every name
    is one of the suite's files, named once."""
    from conftest import HEAVY_FILES

    names = {path.name for path in (ROOT / "tests").glob("test_*.py")}
    assert len(set(HEAVY_FILES)) == len(HEAVY_FILES), HEAVY_FILES
    assert set(HEAVY_FILES) <= names, sorted(set(HEAVY_FILES) - names)

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

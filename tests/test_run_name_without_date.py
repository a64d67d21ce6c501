"""Issue 49's sixth walk: `emit-config --run-name upper-small` made `runs/2026-12-06-upper-small/`, then
`sample-completions upper-small` said there was no such run. A run's name without its date is accepted when it
names exactly one run; when it names several, the refusal lists them."""

from __future__ import annotations

from conftest import run_cli


def test_a_run_is_found_by_the_name_it_was_given(workspace):
    (workspace / "runs" / "2026-12-06-upper-small").mkdir(parents=True)
    (workspace / "runs" / "2026-12-06-upper").mkdir()
    shown = run_cli("training-status", "upper-small")
    assert shown.returncode == 0 and "2026-12-06-upper-small has not been launched" in shown.stdout, shown.stderr
    (workspace / "runs" / "2026-12-07-upper-small-2").mkdir()
    both = run_cli("training-status", "upper-small")
    assert both.returncode == 2 and "'upper-small' names 2 runs" in both.stderr, both.stderr
    assert "2026-12-06-upper-small, 2026-12-07-upper-small-2" in both.stderr, both.stderr
    none = run_cli("training-status", "lower")
    assert none.returncode == 2 and "no run directory 'lower'" in none.stderr, none.stderr

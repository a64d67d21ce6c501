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


def test_a_run_emitted_without_a_name_is_named_after_its_data_then_its_model(workspace):
    """Issue 49: every run emitted without --run-name was named after its model, so two tasks on one model were
    `...-tiny` and `...-tiny-2`. Through the CLI: named after the data (its file, or the folder above a file named for
    its role), then the model; the README's `emit-config` line names none."""
    import json

    from support import ANY_TEXT_REWARDS

    row = '{"prompt": [{"role": "user", "content": "2+2?"}], "answer": "4"}\n'
    (workspace / "json-field").mkdir()
    (workspace / "json-field" / "data.jsonl").write_text(row * 8)
    (workspace / "last_letter.jsonl").write_text(row * 8)
    made = []
    for data in ("json-field/data.jsonl", "last_letter.jsonl"):
        proc = run_cli("emit-config", "--model", "tiny", "--dataset", str(workspace / data), "--gpu", "cpu",
                       "--rewards", json.dumps(ANY_TEXT_REWARDS), "--json", cwd=workspace)
        assert proc.returncode == 0, proc.stderr
        made.append(json.loads(proc.stdout)["run_dir"].rsplit("/", 1)[-1])
    assert [name[11:] for name in made] == ["json-field-tiny", "last-letter-tiny"], made
    shown = run_cli("training-status", "json-field-tiny", cwd=workspace)  # the name finds it, as a given one does
    assert shown.returncode == 0 and "has not been launched" in shown.stdout, shown.stderr

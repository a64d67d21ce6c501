"""Issue 49, the twelfth new-user walk: a reward of the person's own reads a data column the data lacks.

- `emit-config --rewards @rewards.json` with `wc_rewards.word_count_reward(completions, answer, **kw)` on a file
  with no `answer` column said "VALID ... no findings" and wrote the run, while validate-config on that config said
  NOT VALID (the rehearsal's TypeError: missing 1 required positional argument 'answer'). Emission now reads the
  reward's parameters from its source (never importing it) and refuses, writing nothing, with a fix that holds for a
  function of one's own: rename the column (params and --answer-column apply to registry rewards only).
- That fix said "give the reward the column's name (its spec's params)", and params on a dotted-path reward are
  refused ("params apply to registry rewards only"), whose own fix line said "use a registry name or an importable
  dotted path": each now names the actual problem.
"""

from __future__ import annotations

import json

import pytest

from conftest import run_cli

READER = "def count_reward(completions, answer, **columns):\n    return [float(a == '4') for a in answer]\n"
OVERRIDES = ("--override", "max_steps=1", "--override", "num_generations=2",
             "--override", "per_device_train_batch_size=2", "--override", "gradient_accumulation_steps=1",
             "--override", "max_completion_length=8")
SENTENCES = ("We slept at night.", "She ran.", "A big red dog.", "Rain fell.", "The cat sat on the mat.", "Go now.")


def _workspace(workspace, column: str):
    """The reward module beside a data file whose gold column is `column`."""
    (workspace / "w12_count.py").write_text(READER)
    data = workspace / f"by_{column}.jsonl"
    data.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": f"How many words are in '{s}'?"}],
                                        column: str(len(s.split()))}) + "\n" for s in SENTENCES))
    return data


def _emit(workspace, data, rewards, *extra):
    return run_cli("emit-config", "--model", "tiny", "--dataset", str(data), "--gpu", "cpu", "--rewards",
                   json.dumps(rewards), *OVERRIDES, *extra, cwd=workspace)


def test_a_dotted_reward_whose_parameter_is_no_column_is_refused_writing_nothing(workspace):
    data = _workspace(workspace, "count")
    refused = _emit(workspace, data, [{"name": "w12_count.count_reward"}])
    assert refused.returncode == 2, refused.stdout + refused.stderr  # before: 0, "VALID for CPU ... no findings"
    error = refused.stderr.strip().splitlines()[-1]
    assert error.startswith("error: rewards: column 'answer', which w12_count.count_reward reads, is not in"), error
    assert "(columns: prompt, count)" in error and "rename the column that holds it to 'answer'" in error, error
    assert "`emit-config --answer-column NAME`" not in error and "spec's params" not in error, error
    assert not (workspace / "runs").exists() or not any((workspace / "runs").iterdir())


@pytest.mark.slow  # the twin is emitted in full: TRL's checks in the training interpreter
def test_the_refusals_fix_is_what_emits_and_params_on_a_dotted_reward_name_the_problem(workspace):
    data = _workspace(workspace, "answer")  # the fix applied: the column renamed to the parameter's name
    fixed = _emit(workspace, data, [{"name": "w12_count.count_reward"}])
    assert fixed.returncode == 0 and "VALID for CPU" in fixed.stdout, fixed.stdout + fixed.stderr
    params = _emit(workspace, data, [{"name": "w12_count.count_reward", "params": {"answer_column": "count"}}],
                   "--run-name", "params")
    lines = params.stdout.splitlines()
    error = next(i for i, line in enumerate(lines) if "reward_unresolvable" in line)
    assert "[rewards[0].params]" in lines[error] and "params apply to registry rewards only" in lines[error], lines
    fix = lines[error + 1].strip()
    assert fix.startswith("fix: drop params: name the function's parameter after the data column"), fix
    assert "use a registry name" not in fix, fix  # before: the fix for a misspelt name

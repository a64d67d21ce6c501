"""The rehearsal (issue 44): validate_grpo_config builds the run as train/train.py builds it and trains it one step
on a miniature of its model, so what would crash only once the model, data and rewards load is an error before any
GPU is rented, named by the field that causes it. Each defect below comes with its fixed twin, which must pass.

Through the core API of validate_grpo_config (memory.verdict.validate_config) on runs emitted for the tiny model
with a reward that reads the data set's `answer` column; the CLI's --no-rehearse through the CLI.
"""

from __future__ import annotations

import pytest
import yaml

from mcp_server.memory.verdict import validate_config
from mcp_server.recipe.models import ValidateRequest

pytestmark = pytest.mark.slow  # each case trains a step (a second or more on a 2-core machine)

READS_ANSWER = [{"name": "correctness_reward", "params": {}, "weight": 1.0}]
# (the change that breaks the run, its fixed twin, the field the finding names)
DEFECTS = {
    "a reward's column dropped by remove_unused_columns": (
        {"remove_unused_columns": True}, {"remove_unused_columns": False}, "remove_unused_columns"),
    "a scheduler that needs its kwargs": (
        {"lr_scheduler_type": "cosine_with_min_lr"},
        {"lr_scheduler_type": "cosine_with_min_lr", "lr_scheduler_kwargs": {"min_lr_rate": 0.1}},
        "lr_scheduler_kwargs"),
    # train.py passes the test split as `trl grpo` does: with test_split_size the same config starts
    "evaluation without an eval split": ({"eval_strategy": "steps", "eval_steps": 2},
                                         {"eval_strategy": "steps", "eval_steps": 2, "test_split_size": 0.5},
                                         "eval_strategy"),
}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_model):
    from support import emit_run, module_workspace

    with module_workspace(tmp_path_factory, "ws"):
        yield emit_run("rehearsed", rewards=READS_ANSWER)


def _validated(run_dir, change: dict):
    config = run_dir / "train" / "config.yaml"
    original = config.read_text()
    try:
        config.write_text(yaml.safe_dump({**yaml.safe_load(original), **change}, sort_keys=False))
        return validate_config(ValidateRequest(config_path=str(config)))
    finally:
        config.write_text(original)


def _codes(result) -> dict:
    return {(f.code, f.field): f for f in result.findings}


def test_an_emitted_run_is_rehearsed_and_valid(run_dir):
    result = _validated(run_dir, {})
    assert result.valid, result.findings
    rehearsed = [f for f in result.findings if f.code == "rehearsed"]
    assert rehearsed and "trained one step on a miniature" in rehearsed[0].message, result.findings


@pytest.mark.parametrize("name", DEFECTS)
def test_a_crash_after_load_is_an_error_naming_its_field_and_the_twin_passes(run_dir, name):
    broken, fixed, field = DEFECTS[name]
    bad = _validated(run_dir, broken)
    assert not bad.valid and ("rehearsal_failed", field) in _codes(bad), bad.findings
    good = _validated(run_dir, fixed)
    assert "rehearsal_failed" not in {f.code for f in good.findings}, good.findings


def test_a_datasets_columns_list_that_drops_a_rewards_column_names_datasets(run_dir):
    """trl/scripts/utils.py get_dataset: `dataset.select_columns(dataset_config.columns)` keeps only the listed
    columns, and the reward then finds no `answer`."""
    config = yaml.safe_load((run_dir / "train" / "config.yaml").read_text())
    entry = dict(config["datasets"][0])
    bad = _validated(run_dir, {"datasets": [{**entry, "columns": ["prompt"]}]})
    assert ("rehearsal_failed", "datasets") in _codes(bad), bad.findings
    good = _validated(run_dir, {"datasets": [{**entry, "columns": ["prompt", "answer"]}]})
    assert "rehearsal_failed" not in {f.code for f in good.findings}, good.findings


def test_a_data_set_not_on_this_machine_is_said_not_rehearsed(run_dir):
    result = _validated(run_dir, {"datasets": [{"path": "someone/not-downloaded"}]})
    skipped = [f for f in result.findings if f.code == "rehearsal_skipped"]
    assert skipped and skipped[0].severity == "info" and "not on this machine" in skipped[0].message


def test_the_cli_can_skip_the_rehearsal(run_dir):
    from conftest import run_cli

    proc = run_cli("validate-config", str(run_dir / "train" / "config.yaml"), "--no-rehearse", "--json")
    assert proc.returncode == 0, proc.stderr
    assert '"rehearsed"' not in proc.stdout and "rule_rehearsal" not in proc.stdout


def test_a_reward_that_blocks_stops_the_rehearsal_with_a_warning(run_dir, monkeypatch):
    """A reward that never returns would hold validation (and every launch) forever: the rehearsal stops at its
    deadline (LLM_FINETUNING_REHEARSAL_TIMEOUT_S, 180 s by default) and says so."""
    import json

    (run_dir / "blocking_reward.py").write_text(
        "import time\n\ndef blocking(completions, **kwargs):\n    while True:\n        time.sleep(0.1)\n")
    rewards = run_dir / "train" / "rewards.json"
    original = rewards.read_text()
    monkeypatch.setenv("LLM_FINETUNING_REHEARSAL_TIMEOUT_S", "5")
    try:
        rewards.write_text(json.dumps([{"name": "blocking_reward.blocking", "params": {}, "weight": 1.0}]))
        result = _validated(run_dir, {"reward_funcs": None})
    finally:
        rewards.write_text(original)
        (run_dir / "blocking_reward.py").unlink()
    stopped = [f for f in result.findings if f.code == "rehearsal_timeout"]
    assert stopped and stopped[0].severity == "warning" and "past 5 s" in stopped[0].message, result.findings


@pytest.mark.parametrize("name, fix", [
    ("count_reader.reads_count", "reads_count's parameter 'count' is filled from the data column of that name: "
                                 "rename the column that holds it to 'count'"),
    ("correctness_reward", "add the column 'count', or name the column that holds it with correctness_reward's "
                           "params.answer_column (emit-config --answer-column NAME)")])
def test_a_rewards_missing_column_gets_the_fix_of_that_kind_of_reward(run_dir, name, fix):
    """Walk 12: a person's own reward (a dotted path) reading a column the data lacks was told to "give the reward
    the column's name (its spec's params)", and params on a dotted path are refused: its fix is the column's name
    (or the parameter's); a registry reward's is still its params."""
    import json

    (run_dir / "count_reader.py").write_text(
        "def reads_count(completions, count, **kwargs):\n    return [0.0 for _ in completions]\n")
    rewards = run_dir / "train" / "rewards.json"
    original = rewards.read_text()
    params = {"answer_column": "count"} if name == "correctness_reward" else {}
    try:
        rewards.write_text(json.dumps([{"name": name, "params": params, "weight": 1.0}]))
        result = _validated(run_dir, {"reward_funcs": None})
    finally:
        rewards.write_text(original)
        (run_dir / "count_reader.py").unlink()
    failed = _codes(result).get(("rehearsal_failed", "reward_funcs"))
    assert failed is not None and "count" in failed.message, result.findings
    assert fix in failed.fix and "spec's params" not in failed.fix, failed.fix


def test_a_run_with_dynamic_sampling_is_rehearsed_with_the_subclass_it_trains_with(run_dir):
    """train/train.py builds DAPO's dynamic-sampling subclass when train/dynamic_sampling.json exists, and so does
    the rehearsal: a config only the subclass refuses (scale_rewards 'batch': one std over the whole round, dropped
    groups included) fails its GRPOTrainer.__init__ there, an error on that field beside the validator's rule, and
    the twin (scale_rewards 'group') trains its step through the subclass. Before, the rehearsal built TRL's
    GRPOTrainer, which takes 'batch', and said nothing."""
    from support import emit_run

    ds_run = emit_run("rehearsed-ds", rewards=READS_ANSWER, dynamic_sampling={"max_extra_rounds": 1})
    bad = _validated(ds_run, {"scale_rewards": "batch"})
    failed = _codes(bad).get(("rehearsal_failed", "scale_rewards"))
    assert failed is not None and "dynamic sampling cannot run here" in failed.message, bad.findings
    assert "GRPOTrainer.__init__" in failed.message
    good = _validated(ds_run, {"scale_rewards": "group"})
    assert good.valid and "rehearsal_failed" not in {f.code for f in good.findings}, good.findings
    # the same config without the option: TRL's own class, which takes 'batch'
    plain = _validated(run_dir, {"scale_rewards": "batch"})
    assert "rehearsal_failed" not in {f.code for f in plain.findings}, plain.findings

"""Issue 33, "The suite lets realistic bugs through": the gate/evaluation survivors of the mutation audit, each a
rule the README promises, checked directly at its boundary (values known by construction), so a refreshed
fixture cannot hide a bug: delta against 1 + epsilon_high (not epsilon), a data set of exactly one generation
batch (accepted), dtype auto on a full fine-tune (refused), a drift rerun accepted only within 1 point, and an
item passing only when every grader scores it."""

from __future__ import annotations

import json

import pytest

from mcp_server.evaluation.evaluate import item_passed
from mcp_server.evaluation.promote import judge_drift, judge_rerun
from mcp_server.memory.verdict import validate_config
from mcp_server.recipe.models import ValidateRequest
from mcp_server.recipe.variants import BASE_RECIPE

GOOD = dict(BASE_RECIPE, model_name_or_path="Qwen/Qwen2.5-0.5B-Instruct",
            reward_funcs=["mcp_server.rewards.format_reward", "mcp_server.rewards.correctness_reward"])


def codes(overrides: dict) -> dict:
    result = validate_config(ValidateRequest(config={**GOOD, **overrides}, gpu="H100", num_gpus=1))
    return {f.code: f for f in result.findings}


@pytest.mark.parametrize("delta, warned", [(1.25, True), (1.28, True), (1.3, False)])
def test_delta_is_compared_with_one_plus_epsilon_high(delta, warned):
    # epsilon 0.2, epsilon_high 0.28: a delta of 1.25 lies above 1 + epsilon but not above 1 + epsilon_high.
    found = codes({"epsilon": 0.2, "epsilon_high": 0.28, "delta": delta, "steps_per_generation": 8})
    assert ("delta_below_clip" in found) is warned, found.keys()


@pytest.mark.parametrize("prompts, refused", [(3, True), (4, False), (5, False)])
def test_a_data_set_of_exactly_one_generation_batch_trains(tmp_path, prompts, refused):
    # The seed recipe: 8 per device x 1 GPU x 4 steps per generation = 32 completions, 8 each: 4 prompts a batch.
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"q{i}", "answer": "1"}) + "\n" for i in range(prompts)))
    found = codes({"datasets": [{"path": "json", "data_files": str(data), "split": "train"}]})
    assert ("dataset_smaller_than_generation_batch" in found) is refused, found.keys()


@pytest.mark.parametrize("dtype", ["auto", "bfloat16"])
def test_a_full_fine_tune_in_the_checkpoints_half_precision_is_refused(dtype):
    found = codes({"dtype": dtype, "use_peft": False, "learning_rate": 1e-6})
    assert found["full_finetune_low_precision_weights"].severity == "error"
    assert "full_finetune_low_precision_weights" not in codes({"dtype": "float32", "use_peft": False,
                                                                "learning_rate": 1e-6})


def test_the_drift_budget_bands_and_the_rerun_rule():
    assert [judge_drift(0.5, ckpt) for ckpt in (0.5, 0.49, 0.48, 0.45, 0.44)] == [
        "noise", "noise", "rerun", "rerun", "hard_fail"]
    # The reruns' mean drop must be noise (<= 1 point); 2 or 5 points are a real drop, however far from 5.
    assert judge_rerun({"1": 1.0, "2": 0.0, "3": 2.0}) == (1.0, True)
    assert judge_rerun({"1": 2.0, "2": 2.0}) == (2.0, False)
    assert judge_rerun({"1": 5.0}) == (5.0, False)


def test_an_item_passes_only_when_every_grader_scores_it():
    assert item_passed({"format": 1.0, "correctness": 2.0})
    assert not item_passed({"format": 1.0, "correctness": 0.0})
    assert not item_passed({"format": 0.0, "correctness": 2.0})
    assert not item_passed({})

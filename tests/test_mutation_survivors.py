"""Issue 33, "The suite lets realistic bugs through": the gate/evaluation survivors of the mutation audit, each a
rule the README promises, checked directly at its boundary (values known by construction), so a refreshed
fixture cannot hide a bug: delta against 1 + epsilon_high (not epsilon), a data set of exactly one generation
batch (accepted), dtype auto on a full fine-tune (refused), a drift rerun judged by its mean drop and its paired
test, and an item passing only when every grader scores it."""

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


def reruns(n: int, lost: list[int], gained: list[int] | None = None) -> tuple[dict, dict]:
    """Per-item rerun results over an n-item suite, one entry per seed: the checkpoint loses `lost[i]` items the base
    passes and gains `gained[i]` the base fails (the base passes all but the first gained[i] items)."""
    gained = gained or [0] * len(lost)
    base, ckpt = {}, {}
    for seed, (k, g) in enumerate(zip(lost, gained), start=1):
        base[str(seed)] = [i >= g for i in range(n)]
        ckpt[str(seed)] = [(i < g) or (g + k <= i) for i in range(n)]
    return base, ckpt


def test_the_drift_budget_bands_and_the_rerun_rule():
    assert [judge_drift(0.5, ckpt) for ckpt in (0.5, 0.49, 0.48, 0.45, 0.44)] == [
        "noise", "noise", "rerun", "rerun", "hard_fail"]
    # A mean drop within the 1-point budget is noise, however consistent (1000 items, 10 lost on each seed).
    within = judge_rerun(*reruns(1000, [10, 10, 10]))
    assert (within.mean_drop, within.lost, within.noise) == (1.0, 30, True) and within.p_value < 1e-8
    # Over 1 point and beyond noise: 3 of 100 items lost on each of 3 seeds, none gained (p = 2 / 2**9).
    real = judge_rerun(*reruns(100, [3, 3, 3]))
    assert (real.drops, real.mean_drop, real.noise) == ({"1": 3.0, "2": 3.0, "3": 3.0}, 3.0, False)
    assert real.p_value == 2 / 2**9
    # The tiny demo's case (bench_kernels): 2 of 40 items lost on one seed of 3 is a 1.7-point mean that 120
    # sampled answers cannot tell from noise (p = 0.5); one more lost on each seed could (6 lost: p = 0.031).
    small = judge_rerun(*reruns(40, [2, 0, 0]))
    assert (small.mean_drop, small.lost, small.gained, small.noise) == (1.67, 2, 0, True) and small.p_value == 0.5
    assert not judge_rerun(*reruns(40, [3, 2, 1])).noise
    # A 2-point mean drop inside heavy churn (10 lost, 8 gained per seed) is noise; the same mean without churn is not.
    assert judge_rerun(*reruns(100, [10, 10, 10], [8, 8, 8])).noise
    assert not judge_rerun(*reruns(100, [2, 2, 2] + [2, 2, 2])).noise


def test_an_item_passes_only_when_every_grader_scores_it():
    assert item_passed({"format": 1.0, "correctness": 2.0})
    assert not item_passed({"format": 1.0, "correctness": 0.0})
    assert not item_passed({"format": 0.0, "correctness": 2.0})
    assert not item_passed({})

"""Emission as ordered Recipe -> Recipe steps (emission/steps.py): each step returns a new recipe and leaves the one it
was given as it was, the order is the STEPS list, and a value set twice keeps what it replaced. Driven through the
core API (emit.resolve, steps.STEPS) on the tiny model and a CPU target: nothing is downloaded or trained."""

from __future__ import annotations

import copy

from conftest import ANY_TEXT_REWARDS

from mcp_server.config.recipe import Recipe
from mcp_server.emission.emit import resolve
from mcp_server.emission.steps import STEPS, build
from mcp_server.recipe.models import GRPORecipeRequest
from mcp_server.runs import Run


def _given(workspace, **fields):
    run_dir = workspace / "runs" / "steps"
    run_dir.mkdir(parents=True)
    request = GRPORecipeRequest(model="tiny", gpu="cpu", rewards=ANY_TEXT_REWARDS, run_dir=str(run_dir), **fields)
    return resolve(request, Run(run_dir))


def test_each_step_leaves_the_recipe_it_was_given_as_it_was(workspace):
    given = _given(workspace, overrides={"num_generations": 4}, override_reason="a short rehearsal")
    recipe = Recipe(rewards=given.request.rewards)
    for step in STEPS:
        before = (copy.deepcopy(recipe.values), recipe.reasons, recipe.rewards)
        after = step(recipe, given)
        assert (recipe.values, recipe.reasons, recipe.rewards) == before, f"{step.__name__} changed its input"
        assert isinstance(after, Recipe), step.__name__
        recipe = after
    assert recipe == build(given)  # the fold is the steps in their order, and nothing else


def test_a_replaced_value_keeps_what_it_replaced_and_says_so(workspace):
    recipe = build(_given(workspace, overrides={"num_generations": 4}, override_reason="a short rehearsal"))
    group = recipe.setting("num_generations")
    assert group.value == 4 and group.source == "override"
    assert group.replaced.value == 8 and group.replaced.source == "recipe"
    assert group.reason == "override: a short rehearsal (instead of 8 from the recipe)"
    length = recipe.setting("max_completion_length")  # never silent: a CPU target's rehearsal budget
    assert length.source == "target" and length.reason.startswith("CPU target: 128 tokens")
    assert "use_vllm" not in recipe and recipe.get("use_cpu") is True  # the target step dropped the vLLM fields


def test_a_step_left_out_is_a_value_left_out(workspace):
    """The order is data: the same fold without the learning-rate schedule writes no schedule."""
    given = _given(workspace)
    full = build(given)
    without = build(given, [step for step in STEPS if step.__name__ != "learning_schedule"])
    assert full.get("lr_scheduler_type") == "constant_with_warmup" and "lr_scheduler_type" not in without


def test_written_leaves_out_only_copied_values_at_trl_default():
    recipe = (Recipe.of({"seed": 42}, {"seed": "the recipe's"}, "recipe")
              .with_values({"dataset_train_split": "train"}, source="data")
              .with_values({"model_name_or_path": "m"}, {"model_name_or_path": "the policy"}, "model", first=True))
    assert list(recipe.values) == ["model_name_or_path", "seed", "dataset_train_split"]
    defaults = {"seed": 42, "dataset_train_split": "train"}
    assert recipe.written(defaults).values == {"model_name_or_path": "m", "seed": 42}  # the recipe's 42 stays
    assert recipe.written({}).values == recipe.values  # no TRL answered: every value is written

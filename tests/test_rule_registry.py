"""The validation rules' one registry (recipe.registry), through the core API: every rule defined in a topic module
is registered once, a rule runs when what it needs is supplied and is named with what it lacked when not, findings
come errors first in registry order, and the planner and the validator share one batch arithmetic."""

from __future__ import annotations

import inspect

import pytest

from mcp_server.errors import UserInputError
from mcp_server.memory import planner
from mcp_server.config.target import Target
from mcp_server.memory.verdict import validate as validate_run
from mcp_server.recipe.runspec import RunSpec
from mcp_server.recipe import registry
from mcp_server.recipe.context import NEEDS, Rule
from mcp_server.recipe.validate import validate_values
from mcp_server.recipe.variants import BASE_RECIPE

GOOD = dict(BASE_RECIPE, model_name_or_path="Qwen/Qwen2.5-0.5B-Instruct",
            reward_funcs=["mcp_server.rewards.format_reward", "mcp_server.rewards.correctness_reward"])
NOT_REHEARSED = {"rule_rehearsal": ["rehearsal"]}  # validate(spec) rehearses only when asked (recipe.rehearsal)
ARCHITECTURE_RULES = {"rule_completion_beyond_context", "rule_startup_architecture", "rule_vllm_cpu_head_size"}


def validate(values: dict, gpu: str, num_gpus: int):
    """The one validation entry point on a config held in memory, for a target."""
    return validate_run(RunSpec(values=values, target=Target(gpu, num_gpus)))


def test_every_rule_of_a_topic_module_is_registered_once():
    registered = [rule.name for rule in registry.REGISTRY]
    assert len(registered) == len(set(registered))
    modules = {inspect.getmodule(rule.check) for rule in registry.REGISTRY}
    defined = {name for module in modules for name, value in vars(module).items()
               if name.startswith("rule_") and inspect.isfunction(value) and value.__module__ == module.__name__}
    assert defined - set(registered) == set(), "a rule_* function no RULES lists never runs"
    assert {need for rule in registry.REGISTRY for need in rule.needs} == set(NEEDS)


def test_a_need_outside_NEEDS_is_refused_where_the_rule_is_declared():
    with pytest.raises(ValueError, match="gpu_count"):
        Rule(lambda ctx: [], needs=("gpu_count",))


def test_a_check_of_one_change_names_the_rules_it_could_not_run():
    result = validate_values(dict(GOOD), "H100", 1)
    assert {name: needs for name, needs in result.not_run.items()} == {
        **{name: ["architecture"] for name in ARCHITECTURE_RULES}, "rule_memory_fits": ["memory_plan"],
        "rule_rehearsal": ["rehearsal"]}
    assert "memory_fits" not in {f.code for f in result.findings}


def test_the_entry_point_runs_every_rule_whose_needs_it_supplies():
    on_gpu = validate(dict(GOOD), "H100", 1)
    assert on_gpu.not_run == NOT_REHEARSED and "memory_fits" in {f.code for f in on_gpu.findings}
    on_cpu = validate({**GOOD, "use_vllm": False, "bf16": False}, "cpu", 1)
    assert on_cpu.not_run == {"rule_memory_fits": ["memory_plan"], **NOT_REHEARSED}


def test_the_launch_gate_plans_no_memory(tmp_path):
    import yaml

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    result = validate_run(RunSpec.read(path, gpu="H100", num_gpus=1), memory=False)
    assert result.not_run == {"rule_memory_fits": ["memory_plan"], **NOT_REHEARSED}


def test_an_unknown_model_runs_no_architecture_rule_and_says_memory_was_not_planned():
    result = validate({**GOOD, "model_name_or_path": "someone/unknown-model-xyz"}, "H100", 1)
    assert set(result.not_run) == ARCHITECTURE_RULES | set(NOT_REHEARSED)
    assert {f.code for f in result.findings} >= {"memory_not_planned"}


def test_an_unknown_gpu_runs_no_rule():
    result = validate(dict(GOOD), "NOPE-GPU", 1)
    assert [f.code for f in result.findings] == ["unknown_gpu"] and not result.valid
    assert set(result.not_run) == {rule.name for rule in registry.REGISTRY}


def test_findings_come_errors_first_then_in_registry_order():
    # fields (unknown_field), run (lr_out_of_range far: error), architecture (completion_beyond_context)
    result = validate({**GOOD, "learnin_rate": 1.0, "learning_rate": 1e-3, "max_completion_length": 40000},
                      "H100", 1)
    codes = [f.code for f in result.findings]
    errors = [c for c, f in zip(codes, result.findings) if f.severity == "error"]
    assert errors[:3] == ["unknown_field", "lr_out_of_range", "completion_beyond_context"], codes
    assert codes[:len(errors)] == errors and not result.valid
    # the completion past the context is said once: not again as a memory plan that failed on it
    assert "memory_not_planned" not in codes


@pytest.mark.parametrize("per_device,gpus,accumulation,generations", [
    (8, 1, 1, 6), (8, 1, 1, 8), (4, 2, 3, 8), (4, 2, 3, 6), (2, 3, 1, 4), (2, 3, 2, 4), (8, 1, 1, 1)])
def test_planner_and_validator_share_one_batch_arithmetic(per_device, gpus, accumulation, generations):
    values = {**GOOD, "per_device_train_batch_size": per_device, "gradient_accumulation_steps": accumulation,
              "num_generations": generations}
    found = {f.code for f in validate_values(values, "H100", gpus).findings if f.severity == "error"}
    refused = {"generation_batch_not_divisible", "num_generations_too_small"} & found
    try:
        planner.plan(RunSpec(values=values, target=Target("H100", gpus)))
        planned = True
    except UserInputError as exc:
        planned = exc.field != "num_generations"
    assert planned == (not refused), (found, planned)
    assert bool(refused) == (generations < 2 or (per_device * gpus * accumulation) % generations != 0)


def test_the_worked_example_in_the_docs_is_the_real_rule():
    """docs/development.md "Adding a validation rule" shows rule_vllm_cpu_head_size and its registration: every line
    it shows is in the source."""
    from conftest import ROOT

    from mcp_server.recipe import architecture_rules

    section = (ROOT / "docs" / "development.md").read_text(encoding="utf-8").split("## Adding a validation rule", 1)[1]
    shown = section.split("```python\n", 1)[1].split("```", 1)[0]
    source = set(inspect.getsource(architecture_rules).splitlines())
    lines = [line for line in shown.splitlines() if line.strip() and line.strip() != "..."]
    assert len(lines) > 10 and [line for line in lines if line not in source] == []

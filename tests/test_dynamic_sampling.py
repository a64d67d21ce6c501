"""DAPO's dynamic sampling (issue 47) through the public doors: the TRL methods the trainer's subclass relies on still
exist as it calls them, emission writes the option (on by default for DAPO) and the validator refuses what the
trainer cannot honour, naming the field; a run launched through every gate logs a zero-spread share above 0 before
filtering and exactly 0 in what it trains on, by construction (a reward that gives some groups spread and others
none, on a data set each generation batch covers whole); editing the option after the verdict makes the trainer
refuse."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from support import emit_config, emit_run, module_workspace, pass_inspection, trainer_or_refusal, wait_for


@pytest.fixture()
def cpu_only(monkeypatch):
    """No GPU for the processes the test starts: a CPU run on any machine."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


@pytest.fixture(scope="module")
def ws(tmp_path_factory, tiny_model):
    """One workspace for the module's launched runs (independent directories inside it)."""
    with module_workspace(tmp_path_factory, "dynamic-sampling-ws") as root:
        yield root


# GRPOTrainer methods and helpers recipe/dynamic_sampling_trainer.py overrides or calls, with the parameters it
# passes them: a TRL release that renames or reshapes one fails here, not in a user's run.
TRL_SIGNATURES = {
    "_generate_and_score_completions": ["self", "inputs"],
    "_calculate_rewards": ["self", "inputs", "prompts", "completions", "completion_ids_list"],
    "_prepare_inputs": ["self", "generation_batch"],
}


def test_the_trl_methods_dynamic_sampling_overrides_still_exist_with_the_signatures_it_relies_on():
    from trl import GRPOTrainer
    from trl.trainer.utils import nanstd

    from mcp_server.recipe.dynamic_sampling_trainer import OVERRIDDEN, RELIED_ON, DynamicSamplingGRPOTrainer

    assert set(TRL_SIGNATURES) == set(OVERRIDDEN) | set(RELIED_ON)
    for name, params in TRL_SIGNATURES.items():
        assert list(inspect.signature(getattr(GRPOTrainer, name)).parameters) == params, name
    for name in OVERRIDDEN:  # overridden here, not inherited by accident
        assert name in vars(DynamicSamplingGRPOTrainer) and name in vars(GRPOTrainer), name
    assert callable(nanstd)
    # the attributes the subclass reads, set by GRPOTrainer.__init__ (read from its source: no model is built)
    source = inspect.getsource(GRPOTrainer.__init__)
    for attribute in ("self._metrics", "self.num_generations", "self.reward_weights", "self._step",
                      "self.environment_factories", "self.tools"):
        assert f"{attribute} =" in source, attribute
    # the output keys TRL returns for a text-only run are the ones the merge knows how to pad
    from mcp_server.recipe.dynamic_sampling_trainer import COUNTED, PADDING

    produced = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    for key in [*PADDING, COUNTED]:
        assert f'"{key}"' in produced, key


def test_dapo_trains_with_dynamic_sampling_unless_turned_off(workspace):
    dapo = emit_config(model="tiny", gpu="cpu", variant="dapo", run_name="dapo-ds")
    run = Path(dapo.run_dir)
    assert json.loads((run / "train" / "dynamic_sampling.json").read_text()) == {"max_extra_rounds": 3}
    header = (run / "train" / "config.yaml").read_text().split("# ---")[0]
    assert "dynamic sampling (sec. 3.2) runs in train.py" in header and "1 to 4 times" in header
    assert any(f.code == "dynamic_sampling_cost" for f in dapo.validation.findings)
    off = emit_config(model="tiny", gpu="cpu", variant="dapo", dynamic_sampling={"enabled": False}, run_name="dapo-off")
    assert not (Path(off.run_dir) / "train" / "dynamic_sampling.json").exists()
    assert "dynamic sampling is off" in Path(off.config_path).read_text()
    plain = emit_config(model="tiny", gpu="cpu", run_name="grpo-plain")
    assert not (Path(plain.run_dir) / "train" / "dynamic_sampling.json").exists()
    asked = emit_config(model="tiny", gpu="cpu", dynamic_sampling={"max_extra_rounds": 5}, run_name="grpo-ds")
    assert json.loads((Path(asked.run_dir) / "train" / "dynamic_sampling.json").read_text()) == {
        "max_extra_rounds": 5}


@pytest.mark.parametrize("target, overrides, field", [
    (("cpu", 1), {"scale_rewards": "batch"}, "scale_rewards"),
    (("cpu", 1), {"multi_objective_aggregation": "normalize_then_sum"}, "multi_objective_aggregation"),
    # a streamed data set has no index to draw the refill rounds' prompts from
    (("cpu", 1), {"dataset_streaming": True}, "dataset_streaming"),
    # two training processes with 2 rows each, groups of 4: TRL accepts it (4 rows in all), each group spans both
    (("H100", 2), {"use_vllm": False, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1,
                   "num_generations": 4}, "per_device_train_batch_size"),
])
def test_the_validator_refuses_what_dynamic_sampling_cannot_honour_naming_the_field(workspace, target, overrides,
                                                                                      field):
    gpu, num_gpus = target
    result = emit_config(model="tiny", gpu=gpu, num_gpus=num_gpus, dynamic_sampling={"max_extra_rounds": 2},
                         overrides=overrides, run_name="ds-refused")
    errors = [f for f in result.validation.findings if f.severity == "error" and f.code.startswith("dynamic_sampling")]
    assert not result.validation.valid and [f.field for f in errors] == [field], result.validation.findings
    plain = emit_config(model="tiny", gpu=gpu, num_gpus=num_gpus, overrides=overrides, run_name="no-ds")
    assert not any(f.code.startswith("dynamic_sampling") for f in plain.validation.findings)


def parity_data(workspace: Path) -> Path:
    """Four tiny-task prompts, two with an even gold answer and two with an odd one (fixture_rewards'
    parity_spread_reward: even -> a group without spread, odd -> a group with spread)."""
    from mcp_server.tiny import split_task

    rows, _ = split_task()
    even = [r for r in rows if int(r["answer"]) % 2 == 0][:2]
    odd = [r for r in rows if int(r["answer"]) % 2 == 1][:2]
    path = workspace / "parity.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in even + odd))
    return path


# Groups of 4, 2 groups per micro-batch, 2 micro-batches per generation batch: each generation batch holds 4 prompts,
# the whole data set, so its first round has exactly 2 groups without spread and 2 with; a refill round draws the
# data set again (a permutation of it), so one extra round fills the batch with spread: raw 0.5, kept 0.
PARITY_OVERRIDES = {"max_steps": 2, "per_device_train_batch_size": 8, "num_generations": 4,
                    "gradient_accumulation_steps": 2, "max_completion_length": 8, "logging_steps": 1,
                    "save_steps": 2}
PARITY_REWARDS = [{"name": "fixture_rewards.parity_spread_reward", "params": {}, "weight": 1.0}]


@pytest.mark.slow
def test_a_launched_run_trains_only_on_groups_with_spread(ws, cpu_only):
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest

    run_dir = emit_run("dyn-sampling", dataset=str(parity_data(ws)), rewards=PARITY_REWARDS, base=PARITY_OVERRIDES,
                       dynamic_sampling={"max_extra_rounds": 2})
    pass_inspection(run_dir)
    launched = launch_training(LaunchRequest(run=str(run_dir)))
    assert launched.launched, launched.message
    status = wait_for(run_dir, lambda s: s.state not in ("starting", "running"))
    assert status.state == "succeeded", status
    lines = [json.loads(line) for line in (run_dir / "train" / "logs" / "progress.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    for line in lines:
        assert line["dynamic_sampling/zero_std_raw"] == 0.5  # two of the four prompts give a group no spread
        assert line["dynamic_sampling/zero_std_kept"] == 0.0  # and none of them is trained on
        assert line["dynamic_sampling/extra_rounds"] == 1.0 and line["dynamic_sampling/extra_completions"] == 16.0


@pytest.mark.slow
def test_editing_the_option_after_the_verdict_makes_the_trainer_refuse(ws, capsys):
    run_dir = emit_run("dyn-pinned", dataset=str(parity_data(ws)), rewards=PARITY_REWARDS, base=PARITY_OVERRIDES,
                       dynamic_sampling={"max_extra_rounds": 2})
    pass_inspection(run_dir)
    (run_dir / "train" / "dynamic_sampling.json").write_text(json.dumps({"max_extra_rounds": 9}))
    trainer, refusal = trainer_or_refusal(run_dir, capsys)
    assert trainer is None and "train/dynamic_sampling.json (dynamic sampling) changed" in refusal


def test_diagnosis_of_a_high_zero_spread_share_proposes_dynamic_sampling_with_its_cost(tmp_path):
    from support import diagnose_series, healthy_rows, with_series

    rows = with_series(healthy_rows(), "frac_reward_zero_std", [0.8] * 12)
    found = {f.code: f for f in diagnose_series(tmp_path, rows).findings}
    advice = found["no_reward_signal"].explanation  # 1 / (1 - 0.8): 5 generation batches to fill one with spread
    assert "dynamic_sampling: {max_extra_rounds: 5}" in advice and "5.0x TRL's per step" in advice
    # a run with dynamic sampling trains on the kept groups: a high raw share with none kept is no finding
    kept = with_series(with_series(rows, "dynamic_sampling/zero_std_kept", [0.0] * 12),
                       "dynamic_sampling/zero_std_raw", [0.8] * 12)
    assert "no_reward_signal" not in {f.code for f in diagnose_series(tmp_path, kept).findings}
    capped = with_series(rows, "dynamic_sampling/zero_std_kept", [0.8] * 12)
    assert "reached its cap" in {f.code: f for f in diagnose_series(tmp_path, capped).findings}[
        "no_reward_signal"].explanation


def test_the_memory_and_speed_plans_count_the_extra_generation_rounds(workspace):
    """The plan of a run with dynamic sampling holds the earlier rounds' rows at the generation peak and prices the
    extra rounds, in proportion to max_extra_rounds; the same run without it plans neither."""
    from mcp_server.memory.models import MemoryPlanRequest
    from mcp_server.memory.planner import plan_memory

    plans = {}
    for rounds in (None, 1, 3):
        option = {"dynamic_sampling": {"max_extra_rounds": rounds}} if rounds else {}
        run = emit_config(model="Qwen/Qwen2.5-1.5B-Instruct", gpu="H100", run_name=f"ds-plan-{rounds}",
                          overrides={"use_vllm": False, "max_completion_length": 4096}, **option).run_dir
        plans[rounds] = plan_memory(MemoryPlanRequest(config_path=run))
    held = {r: {c.name: c.gib for c in p.breakdown}.get("dynamic_sampling_rounds", 0.0) for r, p in plans.items()}
    # tens of MiB on an H100 (ids and per-token rows of up to 3 generation batches), shown in GiB to 2 places
    assert held[None] == 0.0 and 0 < held[1] < held[3] and held[3] == pytest.approx(3 * held[1], abs=0.015), held
    assert plans[3].generation_peak_gib >= plans[None].generation_peak_gib + held[3] - 0.01
    speed = {r: p.speed for r, p in plans.items()}
    assert speed[None].step_s_at_cap is None and speed[None].dynamic_sampling_rounds == 0
    assert speed[1].step_s == speed[None].step_s and speed[3].step_s == speed[None].step_s  # one round at best
    extra = {r: speed[r].step_s_at_cap - speed[r].step_s for r in (1, 3)}
    assert extra[1] > 0 and extra[3] == pytest.approx(3 * extra[1], rel=0.05)
    assert "up to 3 extra generation rounds" in speed[3].verdict


def test_emission_sizes_the_batch_with_the_plan_that_counts_the_held_rounds(workspace):
    """Emission grows the batch while its memory plan fits with 10% headroom; with dynamic sampling that plan holds
    the earlier rounds' rows, as validation's and the launch's do, so what emission sized validation finds fitting
    (before, emission planned without them and its own validation called the batch it chose tight)."""
    from mcp_server.memory.models import MemoryPlanRequest
    from mcp_server.memory.planner import plan_memory

    # an A10G whose 0.5B run with 1152-token completions sits within the held rounds of the headroom line
    request = {"model": "Qwen/Qwen2.5-0.5B-Instruct", "gpu": "A10G",
               "overrides": {"use_vllm": False, "max_completion_length": 1152}}
    sized = {}
    for rounds in (None, 16):
        option = {"dynamic_sampling": {"max_extra_rounds": rounds}} if rounds else {}
        result = emit_config(run_name=f"ds-sized-{rounds}", **request, **option)
        memory = [f.code for f in result.validation.findings if f.code.startswith("memory_")]
        assert memory == ["memory_fits"], (rounds, result.validation.findings)
        assert plan_memory(MemoryPlanRequest(config_path=result.run_dir)).status == "fits"
        config = Path(result.config_path).read_text()
        sized[rounds] = [line for line in config.splitlines() if line.startswith(
            ("per_device_train_batch_size:", "gradient_accumulation_steps:"))]
    assert sized[16] != sized[None], sized  # the held rounds took part of the room the batch grew into

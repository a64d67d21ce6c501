"""The memory plan and the launcher agree: the layout plan_memory assumes (strategy, ZeRO stage, processes, the
`trl vllm-serve` flags) is the one the launch files written by launch_training use, and a run that will not fit
is refused with the plan's reason. Files only: nothing trains here."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from mcp_server.memory.models import MemoryPlanRequest
from mcp_server.memory.planner import plan_memory
from mcp_server.runs import Run
from mcp_server.training.launch import build_launch_plan, launch_training, write_plan_files
from mcp_server.training.models import LaunchRequest
from conftest import run_cli
from support import emit_config, emitted_run_dir


def _launch_files(run_dir: Path) -> tuple[dict | None, str]:
    """What launch_training writes for this run (the same two calls): train/accelerate.yaml and train/launch.sh."""
    written = write_plan_files(Run(run_dir), build_launch_plan(Run(run_dir), LaunchRequest(run=str(run_dir))))
    accel = yaml.safe_load(Path(written["accelerate_config"]).read_text()) if "accelerate_config" in written else None
    return accel, Path(written["script"]).read_text()


def _assert_agree(run_dir: Path):
    plan = plan_memory(MemoryPlanRequest(config_path=str(run_dir), validate_levers=False))
    layout = plan.launch
    accel, script = _launch_files(run_dir)
    assert plan.run["zero_stage"] == layout.zero_stage  # the plan's peak is computed with the launched sharding
    if layout.strategy == "single":
        assert accel is None and "accelerate" not in script
    else:
        assert accel["num_processes"] == layout.training_processes
        if layout.zero_stage:
            assert accel["distributed_type"] == "DEEPSPEED"
            assert accel["deepspeed_config"]["zero_stage"] == layout.zero_stage
        else:
            assert accel["distributed_type"] == "MULTI_GPU"
    server = layout.vllm_server
    serve = next((line for line in script.splitlines() if "vllm_serve --model" in line), None)
    if server is None:
        assert serve is None
    else:
        assert f"--tensor_parallel_size {server.tensor_parallel_size} " in serve
        assert f"--data_parallel_size {server.data_parallel_size} " in serve
        assert f"--gpu_memory_utilization {server.gpu_memory_utilization:g} " in serve
        visible = re.search(r"CUDA_VISIBLE_DEVICES=([\d,]+) ", serve).group(1)
        assert len(visible.split(",")) == server.gpus
    return plan


def test_moe_full_and_lora_on_8_h100_and_1_5b_server_mode_launch_as_planned(workspace):
    # 30B-A3B full fine-tune: ZeRO-2 does not fit 7 training H100s, ZeRO-3 does; vLLM serves on the 8th at 0.9
    full = _assert_agree(emitted_run_dir("moe-full", model="Qwen/Qwen3-30B-A3B", gpu="H100", num_gpus=8))
    assert full.launch.strategy == "zero3" and full.launch.fits and "zero2" in full.launch.reason
    assert full.launch.vllm_server.gpu_memory_utilization == 0.9 and full.server.fits
    lora = _assert_agree(emitted_run_dir("moe-lora", model="Qwen/Qwen3-30B-A3B", gpu="H100", num_gpus=8,
                                         finetune="lora"))
    assert lora.launch.strategy == "ddp" and lora.launch.training_processes == 7 and lora.launch.fits
    small = _assert_agree(emitted_run_dir("q15", model="Qwen/Qwen2.5-1.5B-Instruct", gpu="H100", num_gpus=4))
    assert small.launch.strategy == "zero2" and small.launch.training_processes == 3 and small.fits
    assert any("vllm-serve" in a and "0.9" in a for a in small.assumptions)


def test_7b_qlora_on_t4_keeps_a_4bit_vllm_and_a_run_that_cannot_fit_is_refused(workspace):
    # TRL starts the colocated vLLM with quantization="bitsandbytes" under QLoRA: emission keeps vLLM, asleep while
    # training, in a share sized by the plan, and the run fits the T4
    emitted = emitted_run_dir("t4", model="Qwen/Qwen2.5-7B-Instruct", gpu="T4", finetune="qlora")
    plan = _assert_agree(emitted)
    config = yaml.safe_load((emitted / "train/config.yaml").read_text())
    assert plan.fits and config["use_vllm"] is True and config["vllm_enable_sleep_mode"] is True
    assert any(c.name == "vllm_weights" and "NF4" in c.note for c in plan.breakdown) or plan.peak_phase == "training"
    # vLLM pinned at 0.95 of the card by an override: the plan's levers are not applied over it, so the run does not
    # fit, and the emission writes nothing (issue 49); its result holds the config it would have written and the fix,
    # the lever plan_memory names for that config on the same target
    pinned = emit_config(run_name="t4-pinned", model="Qwen/Qwen2.5-7B-Instruct", gpu="T4", finetune="qlora",
                         overrides={"use_vllm": True, "vllm_gpu_memory_utilization": 0.95})
    assert [f.code for f in pinned.validation.findings if f.severity == "error"] == ["memory_does_not_fit"]
    assert not Path(pinned.run_dir).exists() and pinned.kept.startswith("NOT VALID: nothing was written")
    plan = plan_memory(MemoryPlanRequest(config=pinned.config, gpu="T4", validate_levers=False))
    fix = next(f.fix for f in pinned.validation.findings if f.code == "memory_does_not_fit")
    assert not plan.fits and plan.recommended and str(plan.recommended.patch) in fix, fix
    # the same pin made by hand in the emitted run's config (a person's edit): the run that cannot fit is refused by
    # the launcher with the plan's reason
    config = emitted / "train/config.yaml"
    edited, pins = re.subn(r"^vllm_gpu_memory_utilization: .*$", "vllm_gpu_memory_utilization: 0.95",
                           config.read_text(), flags=re.M)
    assert pins == 1
    config.write_text(edited)
    on_disk = _assert_agree(emitted)
    assert not on_disk.fits and not on_disk.launch.fits and on_disk.recommended
    result = launch_training(LaunchRequest(run=str(emitted)))
    memory = [r for r in result.refusals if r.gate == "memory"]
    assert not result.launched and memory and on_disk.launch.reason in memory[0].message
    # the CLI never calls it VALID with an exit code 0: "valid but will not fit" is its own verdict
    proc = run_cli("emit-config", "--model", "Qwen/Qwen2.5-7B-Instruct", "--dataset", "tiny", "--gpu", "T4",
                   "--finetune", "qlora", "--run-name", "t4-cli", "--override", "vllm_gpu_memory_utilization=0.95",
                   "--override", "use_vllm=true",
                   env={"LLM_FINETUNING_WORKSPACE": str(workspace)})
    assert proc.returncode == 1 and "VALID BUT WILL NOT FIT for 1x T4" in proc.stdout, proc.stdout + proc.stderr
    assert not re.search(r"^VALID for", proc.stdout, re.M)
    assert not list((workspace / "runs").glob("*t4-cli*")), list((workspace / "runs").iterdir())
    # the recommended levers applied over the pinned request's overrides and emitted again (what its result says
    # to do): it fits, on one process, as the launcher runs it
    fixed = _assert_agree(emitted_run_dir("t4-fixed", model="Qwen/Qwen2.5-7B-Instruct", gpu="T4", finetune="qlora",
                                          overrides={"use_vllm": True, "vllm_gpu_memory_utilization": 0.95,
                                                     **plan.recommended.patch}))
    assert fixed.fits and fixed.launch.strategy == "single" and fixed.launch.fits


def test_levers_validate_without_deepspeed_vllm_or_bitsandbytes():
    # a ZeRO/offload lever, vLLM and 8-bit AdamW validated on a machine that may lack the packages: a note,
    # never a traceback
    import importlib.util

    proc = run_cli("plan-memory", "--model", "qwen2.5-32b", "--gpu", "H100", "--num-gpus", "4")
    assert proc.returncode == 1 and "DOES NOT FIT" in proc.stdout, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "error" not in proc.stderr
    assert "cpu_offload_optimizer" in proc.stdout and "adamw_8bit" in proc.stdout and "INVALID" not in proc.stdout
    if importlib.util.find_spec("deepspeed") is None:
        assert "deepspeed is not installed here" in proc.stdout
    # the offload lever applied to a config, validated (as the launch gate does): TRL's checks run, no crash
    from mcp_server.recipe.validate import validate_values

    offload = next(lv for lv in plan_memory(MemoryPlanRequest(model="qwen2.5-32b", gpu="H100", num_gpus=4,
                                                              validate_levers=False)).levers
                   if lv.name == "cpu_offload_optimizer")
    result = validate_values({"model_name_or_path": "Qwen/Qwen2.5-32B-Instruct", "output_dir": "out",
                              "reward_funcs": ["mcp_server.rewards.format_reward"], "loss_type": "grpo",
                              **offload.patch}, "H100", 4)
    assert result.valid, result.findings


def test_the_launch_plans_prompts_from_the_signed_samples_record_only(workspace, tiny_model, monkeypatch):
    """A launch plans prompts at the longest one the inspection measured (samples.meta.json's prompt_tokens_max),
    from the record the sampler signed only (evidence.signed_samples_meta): that number edited in by hand, the
    signature kept, or a record written by hand, plans what no record plans."""
    import json

    from conftest import ANY_TEXT_REWARDS
    from mcp_server.inspection.sample_files import write_samples_meta
    from mcp_server.userfiles import sha256_file
    from support import TINY_OVERRIDES

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    run = Run(emitted_run_dir("prompts", model="tiny", dataset="tiny", gpu="H100", num_gpus=1, finetune="lora",
                              rewards=ANY_TEXT_REWARDS, overrides=TINY_OVERRIDES))

    def planned() -> tuple:
        plan = build_launch_plan(run, LaunchRequest(run=str(run.dir)))
        return plan.memory, plan.notes

    unmeasured = planned()  # the planner's default prompt (512) is over the tiny model's context
    run.samples.parent.mkdir(parents=True, exist_ok=True)
    run.samples.write_text('{"completion": "1"}\n')
    write_samples_meta(run, run.samples_meta, sha256_file(run.samples), {"lengths": {"prompt_tokens_max": 30}})
    measured = planned()
    assert measured != unmeasured and measured[0] is not None and measured[0].fits, (measured, unmeasured)
    signed = json.loads(run.samples_meta.read_text())
    edited = {**signed, "lengths": {"prompt_tokens_max": 2_000_000}}
    for forged in (edited, {k: v for k, v in edited.items() if k != "mac"}):
        run.samples_meta.write_text(json.dumps(forged))
        assert planned() == unmeasured, planned()

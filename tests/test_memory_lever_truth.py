"""Every lever the planner offers reports what planning the config with its patch gives (issue: lever-truth).

A lever's peak_gib and fits_alone, and the recommended set's peak, are what plan_memory answers for the run's config
with the lever's patch merged in: the same door a user takes when applying it. The table covers every lever the
planner declares (levers.LEVER_COST): a lever no fixture offers fails the test."""

from __future__ import annotations

import json

import yaml

from mcp_server.errors import UserInputError
from mcp_server.memory.levers import LEVER_COST
from mcp_server.memory.models import MemoryPlanRequest
from mcp_server.inspection.sample_files import write_samples_meta
from mcp_server.userfiles import sha256_file
from mcp_server.memory.planner import plan_memory
from mcp_server.runs import Run

BF16 = {"model_init_kwargs": {"dtype": "bfloat16"}}
# (name, config, the request's target and settings): models x GPUs x layouts of the planner's tests, none fits
FIXTURES = [
    # the reported case: a full fine-tune of Qwen3-8B on 4x A10G, colocated vLLM, bf16 weights (auto sharding)
    ("qwen3-8b 4xA10G colocate bf16", {"model_name_or_path": "Qwen/Qwen3-8B", "use_vllm": True,
                                       "vllm_mode": "colocate", **BF16}, {"gpu": "A10G", "num_gpus": 4}),
    ("qwen2.5-3b 4090 colocate fp32 no-ckpt", {"model_name_or_path": "Qwen/Qwen2.5-3B-Instruct", "use_vllm": True,
                                               "vllm_mode": "colocate", "gradient_checkpointing": False,
                                               "dtype": "float32", "beta": 0.0, "gradient_accumulation_steps": 1},
     {"gpu": "RTX 4090", "num_gpus": 1}),
    ("qwen2.5-3b L4 lora fp32 hf-generate", {"model_name_or_path": "Qwen/Qwen2.5-3B-Instruct", "use_vllm": False,
                                                 "use_peft": True, "lora_r": 16, "dtype": "float32",
                                                 "per_device_train_batch_size": 8, "num_generations": 8,
                                                 "max_completion_length": 2048, "gradient_checkpointing": False},
     {"gpu": "L4", "num_gpus": 1}),
    ("qwen2.5-1.5b T4 beta fp32", {"model_name_or_path": "qwen2.5-1.5b", "use_vllm": True, "vllm_mode": "colocate",
                                   "beta": 0.04, "per_device_train_batch_size": 8, "num_generations": 8,
                                   "max_completion_length": 1024, "dtype": "float32"},
     {"gpu": "T4", "num_gpus": 1}),
    # an older TRL (its Liger chunked loss; planned as that release's defaults)
    ("qwen2.5-1.5b T4 TRL 0.26", {"model_name_or_path": "qwen2.5-1.5b", "use_vllm": True, "vllm_mode": "colocate",
                                  "per_device_train_batch_size": 8, "num_generations": 8,
                                  "max_completion_length": 1024, **BF16},
     {"gpu": "T4", "num_gpus": 1, "trl_version": "0.26.0"}),
    ("qwen3-32b 8xH100 colocate zero2", {"model_name_or_path": "Qwen/Qwen3-32B", "use_vllm": True,
                                         "vllm_mode": "colocate", "per_device_train_batch_size": 4,
                                         "num_generations": 8, **BF16,
                                         "deepspeed": {"zero_optimization": {"stage": 2}}},
     {"gpu": "H100", "num_gpus": 8}),
    ("qwen3-8b 2xA100-40GB colocate bf16", {"model_name_or_path": "Qwen/Qwen3-8B", "use_vllm": True,
                                            "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.3, **BF16},
     {"gpu": "A100-40GB", "num_gpus": 2}),
]
INSPECTED = ("qwen2.5-3b L4 inspected", {"model_name_or_path": "Qwen/Qwen2.5-3B-Instruct", "use_vllm": False,
                                         "max_completion_length": 2048, "per_device_train_batch_size": 8,
                                         "num_generations": 8, **BF16}, {"gpu": "L4", "num_gpus": 1})


def _plan(config: dict, target: dict, **request) -> object:
    return plan_memory(MemoryPlanRequest(config=config, validate_levers=False, **target, **request))


def _inspected_run(tmp_path) -> str:
    """A run directory whose inspection samples are short and untruncated: the shorter_completions lever applies."""
    run_dir = tmp_path / "inspected"
    (run_dir / "train").mkdir(parents=True)
    (run_dir / "inspection").mkdir()
    (run_dir / "train" / "config.yaml").write_text(yaml.safe_dump(INSPECTED[1]))
    (run_dir / "inspection" / "samples.jsonl").write_text("".join(
        json.dumps({"id": i, "completion_ids": list(range(200 + i)), "truncated": False}) + "\n" for i in range(8)))
    write_samples_meta(Run(run_dir), Run(run_dir).samples_meta, sha256_file(Run(run_dir).samples), {})  # as signed
    return str(run_dir)


def _rows(tmp_path):
    rows = []
    for name, config, target in FIXTURES:
        plan = _plan(config, target)
        assert plan.status == "does_not_fit", (name, plan.peak_gib, plan.capacity_gib)
        rows += [(name, config, target, lever) for lever in plan.levers]
        if plan.recommended is not None:
            rows.append((name, config, target, plan.recommended))
    plan = plan_memory(MemoryPlanRequest(config_path=_inspected_run(tmp_path), validate_levers=False,
                                         **INSPECTED[2]))
    rows += [(INSPECTED[0], INSPECTED[1], INSPECTED[2], lever) for lever in plan.levers]
    return rows


def test_every_lever_reports_the_plan_of_its_patched_config(tmp_path):
    rows = _rows(tmp_path)
    offered = {getattr(row[3], "name", None) for row in rows}
    assert set(LEVER_COST) <= offered, f"levers no fixture offers: {sorted(set(LEVER_COST) - offered)}"
    # the reported case stays in the table: QLoRA of a full fine-tune that the plan shards with ZeRO-3
    assert any(row[0] == FIXTURES[0][0] and getattr(row[3], "name", None) == "qlora" for row in rows)
    wrong = []
    for name, config, target, lever in rows:
        label = getattr(lever, "name", None) or "recommended " + "+".join(lever.levers)
        try:
            planned = _plan({**config, **lever.patch}, target)
        except UserInputError as exc:  # a lever whose config the planner (and TRL) refuses is no lever
            wrong.append(f"{label} on {name}: reports {lever.peak_gib} GiB, planning refuses it: {exc}")
            continue
        fits = getattr(lever, "fits_alone", None)
        if abs(planned.peak_gib - lever.peak_gib) > 0.01 or (fits is not None and fits != planned.fits):
            wrong.append(f"{label} on {name}: reports {lever.peak_gib} GiB (fits {fits}), planned "
                         f"{planned.peak_gib} GiB (fits {planned.fits})")
    print(f"{len(rows)} rows")
    assert not wrong, "\n".join(wrong)


def test_levers_are_validated_in_the_world_the_plan_was_asked_for():
    """A lever's patch is validated on the run's world (issue 46: one decision of the world): 4 A10G with a
    2-GPU vLLM server train on 2 processes, where a generation batch of 2 holds a group of 2. The lever
    validator used to build a bare target (the default 1-GPU server: 3 processes, a batch of 3) and called the
    run's config already invalid for a divisibility it does not have."""
    plan = plan_memory(MemoryPlanRequest(
        model="Qwen/Qwen2.5-7B-Instruct", gpu="A10G", num_gpus=4, use_vllm=True, vllm_mode="server",
        vllm_server_gpus=2, per_device_train_batch_size=1, num_generations=2, gradient_accumulation_steps=1,
        validate_levers=True, finetune="full"))
    assert plan.status == "does_not_fit" and plan.levers, plan
    assert not [note for note in plan.notes if "already invalid" in note], plan.notes

"""A safety net for refactoring emission (issue 35): the files emit_grpo_config and the launch plan write, for
requests spanning the targets, variants, LoRA/full, agentic and SLURM, byte for byte as checked in under
tests/fixtures/emitted/<case>/. A change of any emitted byte fails here, so a refactor that should change nothing
proves it changed nothing; a change meant to alter what is emitted regenerates the fixtures on purpose and shows
the diff in review:

    UPDATE_EMITTED=1 python -m pytest -q tests/test_emitted_bytes.py -p no:cacheprovider

Machine-specific text (the workspace, this checkout, the training interpreter, the model cache) is replaced by a
placeholder before comparing, and so is a SLURM job's tag (random per launch: how the launcher finds its own job);
everything else is compared as written. The fixtures hold what the installed TRL
emits (its version is in every config's header and in VERSIONS.json): another TRL version is named as the cause.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import sys
from pathlib import Path

import pytest
from conftest import ANY_TEXT_REWARDS

from mcp_server.agentic.tiny import ensure_agentic_model, split_rows, write_rows
from mcp_server.emission.emit import emit_grpo_config
from mcp_server.recipe.models import GRPORecipeRequest
from mcp_server.runs import Run
from mcp_server.training.launch import build_launch_plan, write_plan_files
from mcp_server.training.launchers.slurm.scheduler import commands as scheduler_commands
from mcp_server.training.models import LaunchRequest
from mcp_server.tiny import cache_root

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "emitted"
CHECKOUT = Path(__file__).resolve().parent.parent
JOB_TAG = re.compile(rb"llm-finetuning:[0-9a-f]{16}")
UNRESOLVED_SCHEDULER = re.compile(rb"# \S+ and \S+ were not found where this was written[^\n]*\n")
UPDATE = os.environ.get("UPDATE_EMITTED") == "1"
TINY = {"max_steps": 4, "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 12}
CORRECT = [{"name": "correctness_reward", "params": {}, "weight": 1.0}]
SOFT = [{"name": "format_reward", "params": {}, "weight": 1.0},
        {"name": "soft_overlong_punishment", "params": {"max_completion_len": 512, "soft_punish_cache": 128},
         "weight": 0.5}]
Q05, Q15, Q3, Q7 = (f"Qwen/Qwen2.5-{s}-Instruct" for s in ("0.5B", "1.5B", "3B", "7B"))

# name -> (the request's fields, the launch plan's fields or None). Models are names of the memory catalog or the
# embedded tiny ones: nothing is downloaded, nothing but the tiny models is loaded.
CASES: dict[str, tuple[dict, dict | None]] = {
    "h100-base": ({"model": Q05}, None),
    "cpu-tiny": ({"model": "tiny", "gpu": "cpu", "rewards": ANY_TEXT_REWARDS, "overrides": TINY}, {}),
    "cpu-tiny-slurm": ({"model": "tiny", "gpu": "cpu", "rewards": ANY_TEXT_REWARDS, "overrides": TINY},
                       {"launcher": "slurm"}),
    "t4-lora": ({"model": Q15, "gpu": "T4", "finetune": "lora"}, None),
    "t4-qlora": ({"model": Q3, "gpu": "T4", "finetune": "qlora"}, None),
    "a10g-full": ({"model": Q05, "gpu": "A10G"}, None),
    "a10g-lora-r32": ({"model": Q15, "gpu": "A10G", "finetune": "lora", "lora_r": 32,
                       "lora_target_modules": ["q_proj", "v_proj"]}, None),
    "l4-qlora-7b": ({"model": Q7, "gpu": "L4", "finetune": "qlora"}, None),
    "l4-lora-dapo": ({"model": "Qwen/Qwen3-1.7B", "gpu": "L4", "finetune": "lora", "variant": "dapo"}, None),
    "h100-dr-grpo": ({"model": Q15, "variant": "dr_grpo"}, None),
    "h100-gspo": ({"model": Q15, "variant": "gspo"}, None),
    "h100-symptom-length": ({"model": Q15, "symptom": "length_bias"}, None),
    "h100-symptom-truncated": ({"model": Q15, "symptom": "truncated_completions"}, None),
    "h100-thinking": ({"model": "Qwen/Qwen3-4B", "thinking": True, "finetune": "lora"}, None),
    "h100-overrides": ({"model": Q15, "overrides": {"max_completion_length": 256, "learning_rate": 3e-6},
                        "override_reason": "short answers"}, None),
    "h100-soft-overlong": ({"model": Q05, "rewards": SOFT, "report_to": ["trackio"], "guard": "stop"}, None),
    "h200-llama": ({"model": "meta-llama/Llama-3.2-1B-Instruct", "gpu": "H200"}, None),
    "h100x8-moe-lora": ({"model": "Qwen/Qwen3-30B-A3B", "num_gpus": 8, "finetune": "lora"}, {}),
    "h100x8-full-7b": ({"model": Q7, "num_gpus": 8}, {}),
    "a100x4-full-3b": ({"model": Q3, "gpu": "A100", "num_gpus": 4}, {}),
    "h100x16-slurm": ({"model": Q7, "num_gpus": 16, "finetune": "lora"}, {"launcher": "slurm", "num_nodes": 2}),
    # one micro-batch per step: 23 training GPUs' generation batch (23 x 4 completions) fits the tiny task's 75
    # prompts (a NOT VALID emission writes nothing, issue 49)
    "h100x24-slurm-tiny": ({"model": "tiny", "num_gpus": 24, "finetune": "lora", "rewards": ANY_TEXT_REWARDS,
                            "overrides": {**TINY, "gradient_accumulation_steps": 1}},
                           {"launcher": "slurm", "num_nodes": 3}),
    "cpu-agentic": ({"model": "<agentic>", "gpu": "cpu", "environment": "mcp_server.agentic.tiny:VaultEnv",
                     "rewards": CORRECT, "overrides": {**TINY, "max_completion_length": 128}}, None),
}


def placeholders(workspace: Path) -> list[tuple[str, str]]:
    """Machine-specific text, longest first (a workspace under the cache is replaced as the workspace)."""
    from mcp_server.training.launchers.base import trainer_pythonpath

    pairs = [(str(workspace), "<WORKSPACE>"), (str(CHECKOUT), "<CHECKOUT>"), (sys.executable, "<PYTHON>"),
             (str(cache_root()), "<CACHE>")]
    if trainer_pythonpath():  # the trainer's package folder beside the evidence key (launchers.base)
        pairs.append((trainer_pythonpath(), "<TRAINER_PATH>"))
    # the scheduler's commands, written by the absolute path they have here (scheduler.commands), as the bare name a
    # machine without SLURM writes: the fixtures hold the same bytes on both
    pairs += [(path, name) for name, path in scheduler_commands().items() if path != name]
    return sorted(pairs, key=lambda p: -len(p[0]))


def normalized(path: Path, workspace: Path) -> bytes:
    data = path.read_bytes()
    if path.name == "config.yaml":  # its last line: the sha256 of the text above, machine paths included
        from mcp_server.emission.emit import STAMP, config_body

        assert config_body(data.decode()) is not None, f"{path}: its stamp is not the sha256 of what it holds"
        data = re.sub(re.escape(STAMP).encode() + rb"[0-9a-f]{64}\n$", STAMP.encode() + b"<SHA256>\n", data)
    for text, mark in placeholders(workspace):
        data = data.replace(text.encode(), mark.encode())
    data = UNRESOLVED_SCHEDULER.sub(b"", data)  # written where SLURM is absent (scheduler.commands: bare names)
    return JOB_TAG.sub(b"llm-finetuning:<JOB_TAG>", data)


def emit_case(name: str, workspace: Path) -> Path:
    fields, launch = CASES[name]
    fields = dict(fields)
    if fields["model"] == "<agentic>":
        fields["model"] = str(ensure_agentic_model())
        fields["dataset"] = str(write_rows(split_rows(40)[0], workspace / "vault.jsonl"))
    run_dir = workspace / "runs" / name
    run_dir.mkdir(parents=True)  # a fixed name: runs/<date>-<slug> would put today's date in the files
    emit_grpo_config(GRPORecipeRequest(run_dir=str(run_dir), run_name=name, **fields))
    if launch is not None:
        run = Run(run_dir)
        write_plan_files(run, build_launch_plan(run, LaunchRequest(run=str(run_dir), submit=False, **launch)))
    return run_dir


def test_recorded_with_the_installed_versions():
    versions = {name: importlib.metadata.version(name) for name in ("trl", "transformers", "peft")}
    recorded = FIXTURES / "VERSIONS.json"
    if UPDATE:
        recorded.parent.mkdir(parents=True, exist_ok=True)
        recorded.write_text(json.dumps(versions, indent=1) + "\n")
    assert json.loads(recorded.read_text()) == versions, (
        "the emitted fixtures were recorded with other versions: regenerate with UPDATE_EMITTED=1 and review the diff")


@pytest.mark.parametrize("name", sorted(CASES))
def test_emitted_files_are_byte_identical(name, workspace, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the launch plan reads the target, never this machine's GPUs
    run_dir = emit_case(name, workspace)
    written = {p.relative_to(run_dir).as_posix(): normalized(p, workspace)
               for p in sorted(run_dir.rglob("*")) if p.is_file() and ".git" not in p.relative_to(run_dir).parts}
    expected_dir = FIXTURES / name
    if UPDATE:
        if expected_dir.exists():
            for old in expected_dir.rglob("*"):
                if old.is_file():
                    old.unlink()
        for rel, data in written.items():
            (expected_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (expected_dir / rel).write_bytes(data)
    expected = {p.relative_to(expected_dir).as_posix(): p.read_bytes()
                for p in sorted(expected_dir.rglob("*")) if p.is_file()}
    assert sorted(written) == sorted(expected), f"{name}: other files written than recorded"
    for rel in expected:
        assert written[rel] == expected[rel], f"{name}: {rel} differs from tests/fixtures/emitted/{name}/{rel}"

"""No false error on a GRPO config that others published and ran (issue 44).

Each config under tests/fixtures/published_configs/ ran as published (its header gives the source, the launch and
every translation to TRL 1.16 names); targets.json gives the hardware it ran on. Validated for that target through
the public door (memory.verdict.validate_config, the core of validate_grpo_config and `validate-config`), none may
get an error: the run happened. Each warning it gets must be in EXPECTED_WARNINGS with why it is true of that run,
so a new false warning fails here. Models come from the memory catalog (HF_HUB_OFFLINE): no hub.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mcp_server.memory.verdict import validate_config
from mcp_server.recipe.models import ValidateRequest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

CORPUS = Path(__file__).resolve().parent / "fixtures" / "published_configs"
TARGETS = {k: v for k, v in json.loads((CORPUS / "targets.json").read_text()).items() if not k.startswith("_")}

GC_KWARGS = ("deprecated_field", "gradient_checkpointing_kwargs",
             "transformers 5.25 declares it (TrainingArguments) a deprecated alias of activation_checkpointing_kwargs, "
             "removed in v6")
GC = ("deprecated_field", "gradient_checkpointing",
      "transformers 5.25 declares it (TrainingArguments) a deprecated alias of activation_checkpointing, removed in "
      "v6; TRL re-declares it only to default it True, and TrainingArguments warns the same (FutureWarning)")
# (code, field, why it is true of that run)
EXPECTED_WARNINGS: dict[str, list[tuple[str, str | None, str]]] = {
    "deepscaler_1.5b_8k": [
        GC,
        ("memory_tight", None, "a statement of the plan: 8K-token completions of 8 x 8 per step under FSDP, the "
                               "plan's peak within 10% of an A100-80GB (verl ran it with the reference offloaded)"),
    ],
    "drgrpo_qwen2.5-math-1.5b_oat_zero": [GC],
    "openr1_deepseek-r1-distill-qwen-1.5b_demo": [
        GC, GC_KWARGS,
        ("deprecated_field", "use_liger_kernel", "TRL 1.16's own help: deprecated in GRPOTrainer, removed in v2.0.0"),
        ("liger_deprecated", "use_liger_kernel", "GRPOTrainer warns the same (grpo_trainer.py) and computes "
                                                 "log-probs with its own chunked LM head"),
    ],
    "openr1_qwen2.5-1.5b-instruct_code": [GC, GC_KWARGS],
    "openr1_qwen2.5-1.5b-instruct_code_ioi": [GC, GC_KWARGS],
    "openr1_qwen2.5-1.5b-instruct_demo": [
        GC, GC_KWARGS,
        ("lr_out_of_range", "learning_rate", "2e-5 is 20x the 1e-6 of DeepSeekMath, Dr.GRPO, DAPO, DeepScaleR and "
                                             "TRL's default, said as a risk to watch, not as a collapse"),
    ],
    "openr1_qwen2.5-coder-7b-instruct_codeforces": [
        GC, GC_KWARGS,
        ("vllm_memory_ignored_in_server_mode", "vllm_gpu_memory_utilization",
         "vllm_mode server: TRL's help and trl/generation/vllm_generation.py read it only when colocated"),
    ],
    "openr1_qwen2.5-math-7b_simple_rl": [
        GC, GC_KWARGS,
        ("num_generations_below_floor", "num_generations", "7 is below TRL's default 8; the message states the "
                                                           "chance a group ties, p^7 + (1-p)^7, true of any run"),
        ("vllm_memory_ignored_in_server_mode", "vllm_gpu_memory_utilization",
         "vLLM on its own GPU (server mode in TRL 1.16): the server's flag sets its share, not this field"),
    ],
    "trl_docs_grpo_72b_multinode": [],
    "trl_docs_grpo_quickstart": [],
    "trl_example_grpo_continuous_batching_qwen3-1.7b": [
        ("thinking_budget_too_short", "max_completion_length",
         "Qwen3-1.7B thinks (no enable_thinking: false in the script); a trace past 1024 tokens is cut before its "
         "answer and scores 0 under the script's #### reward"),
    ],
    "trl_example_grpo_vlm_qwen2.5-vl-3b": [],
}


def test_every_corpus_config_has_an_expected_warnings_entry():
    assert sorted(EXPECTED_WARNINGS) == sorted(TARGETS)
    assert sorted(p.stem for p in CORPUS.glob("*.yaml")) == sorted(TARGETS)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_a_published_config_gets_no_error_and_only_true_warnings(name):
    target = TARGETS[name]
    result = validate_config(ValidateRequest(config_path=str(CORPUS / f"{name}.yaml"), gpu=target["gpu"],
                                             num_gpus=target["num_gpus"],
                                             vllm_server_gpus=target.get("vllm_server_gpus")))
    errors = [f"{f.code} [{f.field}]: {f.message}" for f in result.findings if f.severity == "error"]
    assert result.valid and not errors, errors
    got = sorted((f.code, f.field) for f in result.findings if f.severity == "warning")
    expected = sorted((code, field) for code, field, _why in EXPECTED_WARNINGS[name])
    assert got == expected, [f"{f.code} [{f.field}]: {f.message}" for f in result.findings
                             if f.severity == "warning"]


def test_the_warnings_name_the_library_that_deprecates_and_state_no_certain_collapse():
    """The two messages issue 44 found false of runs that ran: the deprecation is transformers' own, and a rate
    just above the range is a risk, not a collapse."""
    def warnings_of(name):
        target = TARGETS[name]
        result = validate_config(ValidateRequest(config_path=str(CORPUS / f"{name}.yaml"), gpu=target["gpu"],
                                                 num_gpus=target["num_gpus"],
                                                 vllm_server_gpus=target.get("vllm_server_gpus")))
        return {(f.code, f.field): f for f in result.findings if f.severity == "warning"}

    found = warnings_of("openr1_qwen2.5-1.5b-instruct_demo")
    gc = found[("deprecated_field", "gradient_checkpointing_kwargs")]
    assert "transformers" in gc.message and "TRL" not in gc.message and "activation_checkpointing_kwargs" in gc.fix
    lr = found[("lr_out_of_range", "learning_rate")]
    assert "risks" in lr.message and "collapse it" not in lr.message

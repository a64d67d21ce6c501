"""evaluate_model, promote_checkpoint and export_model: the rules, through the core API, the CLI and MCP.

A real (tiny) model is made good at a handful of sums with a short TRL SFTTrainer run, so PROMOTE and REJECT
are decided on real pass rates: the untrained tiny model is the worse model, the SFT one the better.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import call_mcp, run_cli, run_cli_json
from mcp_server.errors import UserInputError
from mcp_server.evaluation.evaluate import baseline_path, evaluate_model, paired_difference, wilson_interval
from mcp_server.evaluation.export import export_model
from mcp_server.evaluation.models import EvaluateRequest, ExportRequest, PromoteRequest
from mcp_server.evaluation.promote import judge_drift, promote_checkpoint
from mcp_server.tiny import make_task, write_jsonl

MAX_NEW = 24


@pytest.fixture(scope="module")
def small_task(tmp_path_factory) -> tuple[Path, list[dict]]:
    """16 sums of 0..3 and a goldens file holding them (the SFT model learns exactly these)."""
    rows = make_task(n=16, max_operand=3)
    path = tmp_path_factory.mktemp("goldens") / "goldens.jsonl"
    write_jsonl([{k: r[k] for k in ("prompt", "question", "answer")} for r in rows], path)
    return path, rows


@pytest.fixture(scope="module")
def good_model(tiny_model, small_task, tmp_path_factory) -> Path:
    """The tiny model after a short real SFT on the goldens' sums: it passes some of them."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    _, rows = small_task
    out = tmp_path_factory.mktemp("good") / "model"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    data = Dataset.from_list(
        [{"prompt": r["prompt"], "completion": [{"role": "assistant", "content": r["solution"]}]} for r in rows]
    )
    args = SFTConfig(output_dir=str(out), max_steps=60, learning_rate=3e-3, per_device_train_batch_size=16,
                     lr_scheduler_type="constant", save_strategy="no", report_to=[], use_cpu=True, seed=0,
                     disable_tqdm=True, logging_steps=100)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_model), args=args, train_dataset=data,
                         processing_class=tokenizer)
    trainer.train()
    trainer.save_model(str(out))
    tokenizer.save_pretrained(out)
    torch.set_num_threads(threads)
    return out


def make_run(workspace: Path, name: str, base: Path | str, checkpoint: Path) -> Path:
    """A run directory as emit_grpo_config + training leave it: config.yaml naming the base, a checkpoint."""
    run = workspace / "runs" / f"2026-01-01-{name}"
    (run / "train").mkdir(parents=True)
    shutil.copytree(checkpoint, run / "checkpoints")
    config = {"model_name_or_path": str(base), "output_dir": str(run / "checkpoints"), "max_completion_length": MAX_NEW}
    (run / "train" / "config.yaml").write_text(yaml.safe_dump(config))
    (run / "train" / "rewards.json").write_text(json.dumps([{"name": "correctness_reward", "params": {}, "weight": 1.0}]))
    return run


# ---------------------------------------------------------------- statistics and rules
def test_wilson_interval_is_honest_at_the_edges():
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and 0.25 < high < 0.35  # zero successes still leave room above
    low, high = wilson_interval(5, 10)
    assert low == pytest.approx(0.2366, abs=1e-3) and high == pytest.approx(0.7634, abs=1e-3)
    assert wilson_interval(100, 100)[1] == 1.0


def test_paired_difference_counts_only_disagreements():
    base = [True] * 24 + [False] * 76
    # 15 gained, 4 lost: +11 points, and the paired interval excludes zero...
    better = [True] * 20 + [False] * 4 + [True] * 15 + [False] * 61
    diff, low, high = paired_difference(base, better)
    assert diff == 11.0 and 0 < low < diff < high
    # ...while the same +11 from 30 gained, 19 lost is not distinguishable from noise.
    noisy = [True] * 5 + [False] * 19 + [True] * 30 + [False] * 46
    diff, low, high = paired_difference(base, noisy)
    assert diff == 11.0 and low < 0 < high
    with pytest.raises(ValueError):
        paired_difference(base, better[:10])


@pytest.mark.parametrize(
    "base, ckpt, band",
    [(0.50, 0.50, "noise"), (0.50, 0.49, "noise"), (0.50, 0.48, "rerun"), (0.50, 0.45, "rerun"),
     (0.50, 0.44, "hard_fail"), (0.50, 0.70, "noise")],
)
def test_drift_budget_bands(base, ckpt, band):
    assert judge_drift(base, ckpt) == band


# ---------------------------------------------------------------- evaluate_model and the baseline
def test_first_evaluation_writes_the_baseline_and_it_is_never_overwritten(workspace, good_model, small_task):
    goldens, rows = small_task
    first = evaluate_model(EvaluateRequest(model=str(good_model), goldens=str(goldens), max_new_tokens=MAX_NEW))
    assert first.n == len(rows) and 0 < first.passed <= first.n
    assert first.ci_low <= first.pass_rate <= first.ci_high
    assert [i.index for i in first.items] == list(range(len(rows)))
    assert all(i.passed == (i.scores["correctness_reward"] > 0) for i in first.items)
    assert first.baseline_written and Path(first.baseline_path) == baseline_path(str(good_model))
    written = Path(first.baseline_path).read_bytes()
    record = json.loads(written)
    assert record["goldens_sha256"] == first.goldens_sha256 and record["pass_rate"] == first.pass_rate
    assert not os.access(first.baseline_path, os.W_OK) or os.geteuid() == 0  # read-only (root ignores modes)

    # A looser evaluation later (a grader that only checks the format) does not replace the baseline.
    looser = evaluate_model(EvaluateRequest(model=str(good_model), goldens=str(goldens), max_new_tokens=MAX_NEW,
                                            graders=[{"name": "format_reward"}], baseline="write"))
    assert not looser.baseline_written and "never overwritten" in looser.baseline_note
    assert Path(first.baseline_path).read_bytes() == written


def test_no_baseline_for_partial_or_in_run_evaluations(workspace, tiny_model, small_task):
    goldens, _ = small_task
    partial = evaluate_model(EvaluateRequest(model="tiny", goldens=str(goldens), max_new_tokens=4, limit=3))
    assert partial.n == 3 and not partial.baseline_written and partial.baseline_path is None
    inside = workspace / "runs" / "2026-01-01-x" / "checkpoints"
    shutil.copytree(tiny_model, inside)
    checkpoint = evaluate_model(EvaluateRequest(model=str(inside), goldens=str(goldens), max_new_tokens=4))
    assert not checkpoint.baseline_written and "run directory" in checkpoint.baseline_note
    assert not (workspace / "eval").exists() or not list((workspace / "eval").glob("baseline-*"))


def test_bad_goldens_name_the_field(workspace, tmp_path):
    with pytest.raises(UserInputError) as err:
        evaluate_model(EvaluateRequest(model="tiny", goldens=str(tmp_path / "missing.jsonl")))
    assert err.value.field == "goldens"
    no_prompt = tmp_path / "no-prompt.jsonl"
    no_prompt.write_text('{"answer": "1"}\n')
    with pytest.raises(UserInputError, match="prompt"):
        evaluate_model(EvaluateRequest(model="tiny", goldens=str(no_prompt)))


# ---------------------------------------------------------------- promote_checkpoint
def test_worse_checkpoint_is_rejected_with_evidence(workspace, tiny_model, good_model, small_task):
    goldens, _ = small_task
    base = evaluate_model(EvaluateRequest(model=str(good_model), goldens=str(goldens), max_new_tokens=MAX_NEW))
    run = make_run(workspace, "worse", good_model, tiny_model)  # the "trained" checkpoint is the untrained model
    result = promote_checkpoint(PromoteRequest(run=str(run)))
    assert result.verdict == "REJECT"
    assert result.baseline_pass_rate == base.pass_rate and result.checkpoint_pass_rate == 0.0
    assert result.improvement_points < 0 and result.goldens_sha256 == base.goldens_sha256
    assert result.lost == base.passed and result.gained == 0 and result.improvement_ci[1] < 0
    report = (run / "promotion-report.md").read_text()
    assert "REJECT" in report and base.goldens_sha256 in report
    assert json.loads((run / "promotion.json").read_text())["verdict"] == "REJECT"
    # The baseline the comparison used is untouched.
    assert json.loads(Path(base.baseline_path).read_text())["pass_rate"] == base.pass_rate


def test_changed_goldens_are_refused(workspace, tiny_model, good_model, small_task, tmp_path):
    goldens, rows = small_task
    evaluate_model(EvaluateRequest(model=str(good_model), goldens=str(goldens), max_new_tokens=MAX_NEW))
    other = tmp_path / "other.jsonl"
    write_jsonl([{k: r[k] for k in ("prompt", "answer")} for r in rows[:8]], other)
    run = make_run(workspace, "other-goldens", good_model, tiny_model)
    with pytest.raises(UserInputError, match="not the goldens the baseline was measured on"):
        promote_checkpoint(PromoteRequest(run=str(run), goldens=str(other)))


def test_better_checkpoint_is_promoted_then_exported_round_trip(workspace, tiny_model, good_model, small_task):
    goldens, _ = small_task
    evaluate_model(EvaluateRequest(model="tiny", goldens=str(goldens), max_new_tokens=MAX_NEW))  # baseline 0%
    run = make_run(workspace, "better", "tiny", good_model)
    result = promote_checkpoint(PromoteRequest(run=str(run)))
    assert result.verdict == "PROMOTE", result.reasons
    assert result.improvement_ci[0] > 0 and result.gained > 0 and result.lost == 0 and result.drift.ok

    exported = export_model(ExportRequest(run=str(run)))
    assert exported.smoke_identical and exported.promotion_verdict == "PROMOTE" and not exported.merged_lora
    export_dir = Path(exported.export_dir)
    assert {"model.safetensors", "config.json", "tokenizer.json", "README.md"} <= set(exported.files)
    card = (export_dir / "README.md").read_text()
    assert "base_model: tiny" in card and "PROMOTE" in card and "correctness_reward" in card
    assert exported.config_sha256 in card
    # The export is a standalone model with the checkpoint's behaviour.
    again = evaluate_model(EvaluateRequest(model=str(export_dir), goldens=str(goldens), max_new_tokens=MAX_NEW))
    assert again.pass_rate == result.checkpoint_pass_rate


def test_export_refuses_an_unjudged_run_and_merges_lora(workspace, tiny_model, small_task):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model),
                           LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    torch.manual_seed(0)
    for name, param in model.named_parameters():
        if "lora_B" in name:  # non-zero adapters, so merging changes the weights
            torch.nn.init.normal_(param, std=0.5)
    adapter = workspace / "adapter"
    model.save_pretrained(adapter)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(adapter)
    run = make_run(workspace, "lora", tiny_model, adapter)

    with pytest.raises(UserInputError, match="no PROMOTE verdict"):
        export_model(ExportRequest(run=str(run)))
    exported = export_model(ExportRequest(run=str(run), allow_unpromoted=True))
    assert exported.merged_lora and exported.smoke_identical
    assert "model.safetensors" in exported.files and "adapter_config.json" not in exported.files
    assert "not promoted" in Path(exported.model_card).read_text()


# ---------------------------------------------------------------- doors
def test_cli_evaluate_and_bad_input(workspace, tiny_model, small_task):
    goldens, _ = small_task
    proc, data = run_cli_json("evaluate-model", "tiny", "--goldens", str(goldens), "--max-new-tokens", "4",
                              "--limit", "2", cwd=workspace)
    assert proc.returncode == 0 and data["n"] == 2 and data["pass_rate"] == 0.0
    proc = run_cli("evaluate-model", "tiny", "--goldens", str(workspace / "nope.jsonl"), cwd=workspace)
    assert proc.returncode == 2 and "goldens" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("promote-checkpoint", "no-such-run", cwd=workspace)
    assert proc.returncode == 2 and "run" in proc.stderr and "Traceback" not in proc.stderr


def test_mcp_lists_and_calls_evaluate_model(workspace, tiny_model, small_task):
    goldens, _ = small_task

    async def calls(client):
        tools = {t.name for t in (await client.list_tools()).tools}
        result = await client.call_tool("evaluate_model", {
            "model": "tiny", "goldens": str(goldens), "max_new_tokens": 4, "limit": 2})
        return tools, result

    tools, result = asyncio.run(call_mcp(calls, env={"LLM_FINETUNING_WORKSPACE": str(workspace)}))
    assert {"evaluate_model", "promote_checkpoint", "export_model"} <= tools
    assert not result.is_error and result.structured_content["n"] == 2

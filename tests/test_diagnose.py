"""diagnose_run. Its threshold rules are tested on constructed metric series (trainer_state.json files whose
behaviour is known by construction, on both sides of each threshold), read by the real diagnose_run. Real runs
(TRL GRPOTrainer + the progress callback on the tiny model, CPU, once per session) are asserted only on what
does not depend on training luck or CPU kernels: the run completes, its metrics (with the names the rules
read) are found in every source, findings that follow from the config or by construction (the learning rate,
a NaN run, a constant reward, a 4-token completion limit) are named, and every code is a documented one.
Environment failures (OOM, NCCL, imports) cannot happen on CPU: they use realistic log fixtures."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import hashlib
import inspect
import json
import math
import re
import shutil
import tempfile
import traceback
from pathlib import Path

import pytest
import yaml

from conftest import call_mcp, run_cli, run_cli_json
from mcp_server.errors import UserInputError
from mcp_server.training.diagnose import CODES, diagnose, diagnose_run
from mcp_server.training.models import DiagnoseRequest

FIXTURES = Path(__file__).parent / "fixtures" / "diagnose"
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


# ---------------------------------------------------------------- rewards of the test runs (TRL's signature)
def _text(completion) -> str:
    return completion[-1]["content"] if isinstance(completion, list) else completion


def format_reward(completions, **kwargs):
    pattern = r"\s*<reasoning>.*?</reasoning>\s*<answer>.*?</answer>\s*"
    return [1.0 if re.fullmatch(pattern, _text(c), re.S) else 0.0 for c in completions]


def closeness_reward(completions, answer, **kwargs):
    """Graded: 1 for the right number, less the further off; so groups almost always differ (a healthy signal)."""
    out = []
    for c, gold in zip(completions, answer):
        found = ANSWER.findall(_text(c))
        try:
            out.append(1.0 / (1.0 + abs(float(found[-1].strip()) - float(gold))) if found else 0.0)
        except ValueError:
            out.append(0.0)
    return out


def correctness_reward(completions, answer, **kwargs):
    return [1.0 if (m := ANSWER.findall(_text(c))) and m[-1].strip() == gold else 0.0 for c, gold in zip(completions, answer)]


def length_reward(completions, **kwargs):
    """Pays for characters: the classic hackable reward."""
    return [len(_text(c)) / 20 for c in completions]


def constant_reward(completions, **kwargs):
    return [1.0] * len(completions)


# Each run: rewards, steps, learning rate, and any other GRPOConfig fields.
RUNS = {
    "healthy": dict(rewards=[format_reward, closeness_reward], max_steps=8, learning_rate=1e-5, save_steps=8),
    "huge_lr": dict(rewards=[format_reward, closeness_reward], max_steps=4, learning_rate=1.0, save_steps=4),
    "nan": dict(rewards=[format_reward, closeness_reward], max_steps=4, learning_rate=1e8),
    "constant": dict(rewards=[constant_reward], max_steps=3, learning_rate=1e-5),
    "length": dict(rewards=[length_reward, correctness_reward], max_steps=8, learning_rate=3e-3, max_completion_length=32),
    "truncated": dict(rewards=[format_reward, closeness_reward], max_steps=3, learning_rate=1e-5, max_completion_length=4),
}
COMMON = dict(per_device_train_batch_size=8, num_generations=4, max_completion_length=24, logging_steps=1, beta=0.04,
              loss_type="dapo", seed=0, bf16=False, use_vllm=False, gradient_checkpointing=False)


def warm_start(base: Path, out: Path) -> Path:
    """A short supervised warm start of the tiny model on the task's solutions, so that it writes the format and
    ends its completions (the random-weight model never emits EOS: every run would be 'truncated')."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mcp_server.tiny import make_task

    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base)
    rows = make_task(10**9)
    prompts = [tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) for r in rows]
    enc = tok([p + r["solution"] + "<|im_end|>" for p, r in zip(prompts, rows)], return_tensors="pt", padding=True)
    labels = enc.input_ids.masked_fill(enc.attention_mask == 0, -100)
    labels[:, : len(tok(prompts[0]).input_ids) - 8] = -100  # loss on the question's tail and the solution
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(150):
        idx = torch.randint(0, len(rows), (16,), generator=generator)
        model(input_ids=enc.input_ids[idx], attention_mask=enc.attention_mask[idx], labels=labels[idx]).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def train_run(model: Path, run_dir: Path, rewards, **fields) -> None:
    """A run directory as the project lays it out (train/config.yaml, request.json, logs/progress.jsonl,
    checkpoints/), trained in-process with real GRPOTrainer + ProgressCallback. A crash is logged like
    train.py's stdout would show it."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from mcp_server.tiny import make_task
    from mcp_server.training.progress import ProgressCallback

    values = {**COMMON, **fields, "model_name_or_path": str(model), "output_dir": str(run_dir / "checkpoints")}
    (run_dir / "train" / "logs").mkdir(parents=True)
    (run_dir / "train" / "config.yaml").write_text(yaml.safe_dump(values))
    (run_dir / "train" / "request.json").write_text(json.dumps({"model": str(model), "gpu": "cpu", "num_gpus": 1}))
    args = {k: v for k, v in values.items() if k != "model_name_or_path"}
    args.update(report_to="none", use_cpu=True, disable_tqdm=True, save_strategy="steps" if "save_steps" in args else "no")
    trainer = GRPOTrainer(model=str(model), reward_funcs=rewards, args=GRPOConfig(**args),
                          train_dataset=Dataset.from_list(make_task(64)), callbacks=[ProgressCallback(run_dir)])
    with open(run_dir / "train" / "logs" / "stdout.log", "w") as log, contextlib.redirect_stdout(log):
        try:
            trainer.train()  # prints the Trainer's metric dicts, as train.py's stdout.log shows them
        except Exception:  # a diverged run may crash (NaN weights cannot be sampled from): logged, as train.py would
            log.write(traceback.format_exc())


def cached_warm_model(tiny_model: Path) -> Path:
    """The warm-started model, built once per cache beside the tiny model (same atomic rename), filed under the
    hash of everything that makes it: the tiny model's weights and tokenizer, the code of warm_start and the
    versions of the libraries that run it. A change to any of them builds a new one."""
    import torch
    import transformers

    from mcp_server.tiny import cache_root, state_sha256, tokenizer_sha256

    key = hashlib.sha256(json.dumps({
        "tiny": [state_sha256(tiny_model), tokenizer_sha256(tiny_model)], "code": inspect.getsource(warm_start),
        "torch": torch.__version__, "transformers": transformers.__version__,
    }, sort_keys=True).encode()).hexdigest()[:16]
    target = cache_root() / f"diagnose-warm-{key}"
    if not (target / "config.json").exists():
        tmp = Path(tempfile.mkdtemp(prefix=".warm-", dir=cache_root()))
        warm_start(tiny_model, tmp)
        try:
            tmp.rename(target)
        except OSError:  # another session won the race: its copy is identical
            shutil.rmtree(tmp, ignore_errors=True)
    return target


@pytest.fixture(scope="session")
def runs(tmp_path_factory, tiny_model) -> dict[str, Path]:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is several times faster on a shared CPU
    try:
        root = tmp_path_factory.mktemp("diagnose-runs")
        model = cached_warm_model(tiny_model)
        out = {}
        for name, spec in RUNS.items():
            spec = dict(spec)
            out[name] = root / f"2026-01-01-{name}"
            train_run(model, out[name], spec.pop("rewards"), **spec)
        return out
    finally:
        torch.set_num_threads(threads)


def codes(diagnosis) -> list[str]:
    return [f.code for f in diagnosis.findings]


def problems(diagnosis) -> list[str]:
    return [f.code for f in diagnosis.findings if f.severity != "info"]


def by_code(diagnosis, code):
    return next(f for f in diagnosis.findings if f.code == code)


def assert_patches_validate(diagnosis):
    for f in diagnosis.findings:
        if f.patch:
            assert f.patch_valid is True, (f.code, f.patch, f.patch_problems)


# ---------------------------------------------------------------- real runs: only what is robust
# Codes that follow from a run's config or can only come from a log: a short CPU run at a settled learning
# rate never earns them, whatever its metrics do.
CONFIG_OR_LOG_CODES = {"cuda_out_of_memory", "vllm_out_of_memory", "nccl_timeout", "import_error", "fp16_divergence",
                       "lr_out_of_range", "moe_without_gspo"}
# The metrics TRL's GRPOTrainer logs that the rules read (the constructed series below use the same names).
RULE_METRICS = {"loss", "grad_norm", "learning_rate", "reward", "reward_std", "frac_reward_zero_std", "kl", "entropy",
                "completions/mean_length", "completions/clipped_ratio", "completions/mean_terminated_length"}


def assert_documented(diagnosis):
    assert set(codes(diagnosis)) <= set(CODES), diagnosis.findings


def test_healthy_run_completes_and_earns_no_config_finding(runs):
    d = diagnose(runs["healthy"])
    assert d.source_kind == "run_dir" and d.steps_logged == 8 and d.last_step == 8
    assert d.config_path.endswith("train/config.yaml")
    assert_documented(d)
    assert not set(codes(d)) & (CONFIG_OR_LOG_CODES | {"nan_loss"}), d.findings
    assert_patches_validate(d)


def test_real_runs_log_every_metric_the_rules_read(runs):
    from mcp_server.training.metrics import load_run

    for name in ("healthy", "length", "constant"):
        logged = load_run(runs[name]).metric_names()
        assert RULE_METRICS <= logged, (name, RULE_METRICS - logged)
    logged = load_run(runs["length"]).metric_names()
    assert {"rewards/length_reward/mean", "rewards/correctness_reward/mean", "rewards/length_reward/std"} <= logged


def test_huge_learning_rate(runs):
    d = diagnose(runs["huge_lr"])
    assert not d.healthy and d.steps_logged == 4
    # learning_rate=1.0 is 100000x the top of the range: an error whatever the run did, and the cause comes first.
    assert d.findings[0].code == "lr_out_of_range" and d.findings[0].severity == "error"
    lr = by_code(d, "lr_out_of_range")
    assert lr.evidence[0].value == 1.0 and lr.patch["learning_rate"] <= 1e-5
    assert_documented(d)
    assert_patches_validate(d)


def test_nan_run_names_nan_and_fp16_comes_first(runs, tmp_path):
    d = diagnose(runs["nan"])
    nan = by_code(d, "nan_loss")
    assert nan.severity == "error"
    assert any(e.metric in ("loss", "grad_norm") and e.value in ("nan", "inf", "-inf") for e in nan.evidence)
    assert codes(d).index("lr_out_of_range") < codes(d).index("nan_loss")  # triage order: the lr before its symptom
    assert_patches_validate(d)
    # The same metrics from an fp16 run on a bf16 GPU: precision is the first suspect.
    config = yaml.safe_load((runs["nan"] / "train" / "config.yaml").read_text())
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({**config, "fp16": True}))
    (tmp_path / "request.json").write_text(json.dumps({"gpu": "A100", "num_gpus": 1}))
    d16 = diagnose(runs["nan"], config=tmp_path / "config.yaml")
    assert d16.findings[0].code == "fp16_divergence" and d16.findings[0].severity == "error"
    assert d16.findings[0].patch == {"fp16": False, "bf16": True}
    assert "bf16" in by_code(d16, "nan_loss").patch
    assert_patches_validate(d16)


def test_constant_reward_has_no_signal(runs):
    """A reward that returns 1.0 for everything: zero spread in every group, by construction."""
    d = diagnose(runs["constant"])
    f = d.findings[0]
    assert f.code == "no_reward_signal" and f.severity == "error"
    assert "constant" in f.explanation and f.patch == {}  # no config change fixes a reward that ignores the text
    assert {e.metric for e in f.evidence} >= {"frac_reward_zero_std", "reward_std"}


def test_length_paying_reward_run_is_read(runs):
    """Whether 8 steps at 3e-3 already show the length trend is training luck (the rule itself is tested on
    constructed series below); the run's reward components and its out-of-range rate are robust."""
    d = diagnose(runs["length"])
    assert d.steps_logged == 8 and by_code(d, "lr_out_of_range").severity == "error"
    assert_documented(d)
    assert_patches_validate(d)


def test_tiny_max_completion_length(runs):
    """Answers take about 20 tokens; a 4-token limit cuts (nearly) every completion, by construction."""
    d = diagnose(runs["truncated"])
    f = by_code(d, "completions_truncated")
    assert f.severity in ("warning", "error")
    assert f.patch == {"max_completion_length": 8, "mask_truncated_completions": True}
    assert any(e.metric == "completions/mean_terminated_length" for e in f.evidence)
    assert_patches_validate(d)


# ---------------------------------------------------------------- threshold rules on constructed series
# A run that is healthy by construction: steady gradients and entropy, a small KL, a rising reward with spread
# in every group, completions that end well inside the limit. Each test changes one series around one
# threshold and runs the real diagnose_run on the trainer_state.json it makes.
SERIES_CONFIG = {"learning_rate": 1e-6, "beta": 0.04, "loss_type": "dapo", "num_generations": 4,
                 "per_device_train_batch_size": 8, "max_completion_length": 24, "bf16": False, "use_vllm": False,
                 "gradient_checkpointing": False, "use_cpu": True, "output_dir": "checkpoints"}


def healthy_rows(n: int = 12) -> list[dict]:
    return [{"loss": 0.05, "grad_norm": 0.5, "learning_rate": 1e-6, "reward": 0.5 + 0.01 * i, "reward_std": 0.3,
             "frac_reward_zero_std": 0.1, "kl": 0.01, "entropy": 0.8, "completions/mean_length": 20.0 + i % 2,
             "completions/clipped_ratio": 0.0, "completions/mean_terminated_length": 20.0 + i % 2,
             "rewards/format_reward/mean": 0.9, "rewards/format_reward/std": 0.2,
             "rewards/correctness_reward/mean": 0.3 + 0.01 * i, "rewards/correctness_reward/std": 0.4}
            for i in range(n)]


def with_series(rows: list[dict], metric: str, values) -> list[dict]:
    return [{**row, metric: value} for row, value in zip(rows, values, strict=True)]


def series_file(tmp_path: Path, rows: list[dict]) -> Path:
    """A trainer_state.json as TRL writes it, logging `rows` at steps 1, 2, ..."""
    path = tmp_path / "trainer_state.json"
    history = [{**row, "step": i + 1, "epoch": round((i + 1) / len(rows), 4)} for i, row in enumerate(rows)]
    path.write_text(json.dumps({"global_step": len(rows), "log_history": history}))  # NaN as TRL writes it
    return path


def diagnose_series(tmp_path: Path, rows: list[dict], validate: bool = False, **config):
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump({**SERIES_CONFIG, **config}))
    return diagnose_run(DiagnoseRequest(source=str(series_file(tmp_path, rows)), config_path=str(config_path),
                                        validate_patches=validate))


def test_constructed_healthy_series_is_not_flagged(tmp_path, tiny_model):
    d = diagnose_series(tmp_path, healthy_rows(), validate=True, model_name_or_path=str(tiny_model))
    assert d.healthy and d.findings == [] and d.steps_logged == 12 and d.source_kind == "trainer_state"


@pytest.mark.parametrize("late, flagged", [(0.39, True), (0.32, True), (0.41, False), (0.8, False)])
def test_entropy_collapse_threshold(tmp_path, tiny_model, late, flagged):
    """Flagged when the last quarter's mean entropy is at most 0.4 x the first quarter's (1.0 here)."""
    rows = with_series(healthy_rows(8), "entropy", [1.0, 1.0, 0.9, 0.8, 0.7, 0.6, late, late])
    d = diagnose_series(tmp_path, rows, validate=flagged, model_name_or_path=str(tiny_model))
    assert ("entropy_collapse" in codes(d)) is flagged
    if flagged:  # the run used loss_type dapo: the DAPO patch adds only what it lacked
        f = by_code(d, "entropy_collapse")
        assert f.severity == "warning" and f.patch == {"epsilon_high": 0.28, "beta": 0.0, "mask_truncated_completions": True,
                                                       "steps_per_generation": 16}  # 16 mini-batches x GA 1
        assert_patches_validate(d)


@pytest.mark.parametrize("peak, severity", [(0.99, None), (1.0, "warning"), (4.9, "warning"), (5.0, "error"),
                                            (math.nan, "error")])
def test_kl_explosion_thresholds(tmp_path, peak, severity):
    rows = with_series(healthy_rows(8), "kl", [0.01, 0.02, 0.05, 0.1, 0.2, 0.4, peak, peak])
    d = diagnose_series(tmp_path, rows)
    assert (by_code(d, "kl_explosion").severity if "kl_explosion" in codes(d) else None) == severity
    if severity:
        assert by_code(d, "kl_explosion").patch["beta"] == 0.08  # twice the run's beta


@pytest.mark.parametrize("jump, severity", [(4.9, None), (5.1, "warning"), (60.0, "error")])
def test_grad_norm_spike_thresholds(tmp_path, jump, severity):
    """A spike is over 10x the running median of the grad_norms before it (0.5 here); over 100x is an error."""
    d = diagnose_series(tmp_path, with_series(healthy_rows(8), "grad_norm", [0.5] * 4 + [jump] + [0.5] * 3))
    found = by_code(d, "grad_norm_spike") if "grad_norm_spike" in codes(d) else None
    assert (found.severity if found else None) == severity
    if found:
        spike = next(e for e in found.evidence if e.metric == "grad_norm")
        assert spike.step == 5 and spike.value == jump


@pytest.mark.parametrize("values, severity", [
    ([0.9] * 8, "error"),  # the mean share of zero-spread groups reaches 0.9
    ([0.5] * 4 + [0.75] * 4, "warning"),  # the late half reaches 0.75
    ([0.5] * 4 + [0.74] * 4, None),
])
def test_no_reward_signal_thresholds(tmp_path, values, severity):
    d = diagnose_series(tmp_path, with_series(healthy_rows(8), "frac_reward_zero_std", values))
    found = by_code(d, "no_reward_signal") if "no_reward_signal" in codes(d) else None
    assert (found.severity if found else None) == severity
    if found:
        assert found.patch == {"num_generations": 8, "steps_per_generation": 2}  # twice the completions per prompt


@pytest.mark.parametrize("late, severity", [(0.49, None), (0.5, "warning"), (0.89, "warning"), (0.9, "error")])
def test_completions_truncated_thresholds(tmp_path, late, severity):
    d = diagnose_series(tmp_path, with_series(healthy_rows(8), "completions/clipped_ratio", [0.0] * 4 + [late] * 4))
    found = by_code(d, "completions_truncated") if "completions_truncated" in codes(d) else None
    assert (found.severity if found else None) == severity
    if found:
        assert found.patch == {"max_completion_length": 48, "mask_truncated_completions": True}


@pytest.mark.parametrize("steps, trend, flagged", [(20, 0.0, True), (19, 0.0, False), (20, 0.02, False)])
def test_flat_reward_needs_twenty_points_and_no_trend(tmp_path, steps, trend, flagged):
    """A reward that wobbles around 0.5 for 20 logged steps while groups vary is flat; 19 steps is too early
    to say, and a steady rise is not flat."""
    rows = with_series(healthy_rows(steps), "reward", [0.5 + trend * i + (0.01 if i % 2 else -0.01) for i in range(steps)])
    d = diagnose_series(tmp_path, rows)
    assert ("reward_flat" in codes(d)) is flagged
    if flagged:
        assert problems(d) == ["reward_flat"] and by_code(d, "reward_flat").patch == {"learning_rate": 2e-6}


def test_length_reward_correlation_and_reward_hacking(tmp_path, tiny_model):
    """Length and a length-paying reward climb together while correctness stays put: both findings."""
    rows = healthy_rows(8)
    rows = with_series(rows, "completions/mean_length", [10.0 + 2 * i for i in range(8)])
    rows = with_series(rows, "reward", [0.2 + 0.1 * i for i in range(8)])
    rows = with_series(rows, "rewards/length_reward/mean", [0.1 + 0.1 * i for i in range(8)])
    rows = with_series(rows, "rewards/length_reward/std", [0.1] * 8)
    rows = with_series(rows, "rewards/correctness_reward/mean", [0.3] * 8)
    rows = [{k: v for k, v in r.items() if not k.startswith("rewards/format_reward")} for r in rows]
    d = diagnose_series(tmp_path, rows, validate=True, model_name_or_path=str(tiny_model))
    assert {"length_reward_correlation", "possible_reward_hacking"} <= set(codes(d))
    assert by_code(d, "length_reward_correlation").patch["loss_type"] == "dr_grpo"
    hacking = by_code(d, "possible_reward_hacking")
    assert "length_reward" in hacking.explanation and "correctness_reward" in hacking.explanation
    assert_patches_validate(d)
    # The same climb in length without a rising reward is not the length bias.
    flat = with_series(rows, "reward", [0.5] * 8)
    assert "length_reward_correlation" not in codes(diagnose_series(tmp_path, flat))


def test_nan_and_huge_learning_rate_series(tmp_path):
    rows = with_series(healthy_rows(6), "loss", [0.05, 0.05, 0.05, math.nan, math.nan, math.nan])
    d = diagnose_series(tmp_path, rows, learning_rate=1.0)
    assert codes(d)[:2] == ["lr_out_of_range", "nan_loss"] and by_code(d, "nan_loss").severity == "error"
    assert [e.value for e in by_code(d, "nan_loss").evidence if e.metric == "loss"] == [0.05, "nan"]
    from mcp_server.recipe.variants import BASE_RECIPE

    assert by_code(d, "lr_out_of_range").patch == {"learning_rate": BASE_RECIPE["learning_rate"]}  # the recipe's rate


def test_moe_model_without_gspo(tmp_path):
    from transformers import Qwen3MoeConfig

    moe = tmp_path / "tiny-moe"
    Qwen3MoeConfig(num_experts=4, num_experts_per_tok=2, hidden_size=64, num_hidden_layers=2).save_pretrained(moe)
    d = diagnose_series(tmp_path, healthy_rows(), validate=True, model_name_or_path=str(moe))
    f = by_code(d, "moe_without_gspo")
    assert f.severity == "warning" and f.patch["importance_sampling_level"] == "sequence"
    assert f.patch["loss_type"] == "grpo"  # GSPO as emit_grpo_config writes it (the run used dapo)
    assert_patches_validate(d)
    diverged = diagnose_series(tmp_path, with_series(healthy_rows(), "kl", [0.01] * 11 + [2.0]),
                               model_name_or_path=str(moe))
    assert by_code(diverged, "moe_without_gspo").severity == "error"


# ---------------------------------------------------------------- other sources of the same runs
def test_trainer_state_from_a_real_checkpoint(runs, tmp_path):
    healthy = diagnose(runs["healthy"] / "checkpoints" / "checkpoint-8" / "trainer_state.json")
    assert healthy.source_kind == "trainer_state" and healthy.steps_logged == 8
    assert_documented(healthy)
    assert healthy.config_path.endswith("train/config.yaml")  # found above the checkpoint
    # A lone trainer_state.json (a run this project did not launch): no config, patches checked on the default.
    lone = shutil.copy(runs["huge_lr"] / "checkpoints" / "checkpoint-4" / "trainer_state.json", tmp_path)
    broken = diagnose(lone)
    assert broken.findings[0].code == "lr_out_of_range" and broken.steps_logged == 4  # the logged rate, no config
    assert broken.config_path is None and "default" in broken.patches_checked_against
    assert_patches_validate(broken)
    # A TRL output_dir with checkpoint-*/ and no progress log: the latest checkpoint's state is read.
    out = runs["huge_lr"].parent / "bare-output-dir"
    shutil.copytree(runs["huge_lr"] / "checkpoints", out, dirs_exist_ok=True)
    assert diagnose(out).metrics_path.endswith("checkpoint-4/trainer_state.json")


def test_csv_export_with_trl_names(runs, tmp_path):
    rows = [json.loads(line) for line in (runs["length"] / "train" / "logs" / "progress.jsonl").read_text().splitlines()]
    names = ["step", "loss", "grad_norm", "learning_rate", "reward", "reward_std", "frac_reward_zero_std", "kl",
             "entropy", "completions/mean_length", "completions/clipped_ratio", "completions/mean_terminated_length",
             "rewards/length_reward/mean", "rewards/correctness_reward/mean"]
    path = tmp_path / "export.csv"
    with open(path, "w", newline="") as handle:  # W&B style: train/ prefixes, empty cells for missing values
        writer = csv.writer(handle)
        writer.writerow(["train/global_step" if n == "step" else f"train/{n}" for n in names])
        for row in rows:
            writer.writerow(["" if row.get(n) is None else row.get(n) for n in names])
    d = diagnose(path)
    assert d.source_kind == "csv" and d.steps_logged == 8
    assert "lr_out_of_range" in codes(d)  # the logged 3e-3, with no config
    assert set(codes(d)) == set(codes(diagnose(runs["length"] / "train" / "logs" / "progress.jsonl", config={})))


def test_half_written_last_line_of_a_live_run(runs, tmp_path):
    text = (runs["healthy"] / "train" / "logs" / "progress.jsonl").read_text()
    live = tmp_path / "progress.jsonl"
    live.write_text(text + '{"step": 9, "loss": 0.01, "rew')
    assert diagnose(live).steps_logged == 8


# ---------------------------------------------------------------- environment failures from logs
@pytest.mark.parametrize("log, code", [
    ("cuda_oom.log", "cuda_out_of_memory"),
    ("vllm_oom_cache.log", "vllm_out_of_memory"),
    ("vllm_oom_startup.log", "vllm_out_of_memory"),
    ("nccl_timeout.log", "nccl_timeout"),
    ("import_error.log", "import_error"),
    ("module_not_found.log", "import_error"),
])
def test_log_failures(log, code, tmp_path):
    from mcp_server.memory.models import MemoryPlanRequest
    from mcp_server.memory.planner import plan_memory

    config = {"model_name_or_path": "Qwen/Qwen2.5-7B-Instruct", "use_vllm": True, "vllm_mode": "colocate",
              "learning_rate": 5e-7, "beta": 0.01, "bf16": True, "loss_type": "grpo", "num_generations": 8,
              "max_completion_length": 1024, "reward_funcs": ["accuracy_reward"]}
    d = diagnose(FIXTURES / log, config=config)
    assert d.source_kind == "log"
    assert problems(d) == [code] and d.findings[0].severity == "error"
    assert d.findings[0].evidence[0].metric == "log" and d.findings[0].evidence[0].value.startswith("line ")
    assert_patches_validate(d)
    patch = d.findings[0].patch
    if code == "cuda_out_of_memory":  # plan_memory's smallest set of levers for the 79 GiB GPU the OOM names
        # a 7B full fine-tune keeps float32 master weights (recipe.precision): 16 bytes a weight cannot fit one
        # 80 GB GPU, so the smallest fix is LoRA, never a smaller batch
        assert patch["use_peft"] is True and "per_device_train_batch_size" not in patch
        assert patch == plan_memory(MemoryPlanRequest(config=config, gpu_memory_gib=79.19)).recommended.patch
    if log == "vllm_oom_startup.log":
        assert patch["vllm_gpu_memory_utilization"] < 0.3
    if log == "import_error.log":
        assert patch == {"use_vllm": False}
    if log == "module_not_found.log":
        assert patch == {} and "math_verify" in d.findings[0].explanation


def test_crash_log_beside_metrics(runs):
    """The NaN run crashed when sampling from NaN weights; its stdout log is read with the metrics."""
    d = diagnose(runs["nan"])
    assert d.log_path and d.log_path.endswith("stdout.log")
    evidence = [e.value for e in by_code(d, "nan_loss").evidence if e.metric == "log"]
    assert evidence and "probability tensor contains" in evidence[0]


def test_bare_stdout_log_of_a_real_run(runs):
    """Only the stdout of a run (the Trainer's printed metric dicts): still diagnosed from its metrics."""
    d = diagnose(runs["huge_lr"] / "train" / "logs" / "stdout.log")
    assert d.source_kind == "log" and d.steps_logged == 4 and "lr_out_of_range" in codes(d)
    healthy = diagnose(runs["healthy"] / "train" / "logs" / "stdout.log")
    assert healthy.steps_logged == 8 and not {"lr_out_of_range", "nan_loss"} & set(codes(healthy))


# ---------------------------------------------------------------- bad input
def test_unreadable_sources_are_clear_errors(tmp_path, runs):
    (tmp_path / "empty-run").mkdir()
    (tmp_path / "broken.json").write_text('{"log_history": [')
    (tmp_path / "other.json").write_text('{"hello": 1}')
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "bad.jsonl").write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    (tmp_path / "metrics.parquet").write_bytes(b"PAR1")
    (tmp_path / "bad.yaml").write_text("a: [unclosed")
    cases = [
        (tmp_path / "missing", "source", "no such file"),
        (tmp_path / "empty-run", "source", "holds no metrics"),
        (tmp_path / "broken.json", "source", "not valid JSON"),
        (tmp_path / "other.json", "source", "log_history"),
        (tmp_path / "empty.csv", "source", "empty CSV"),
        (tmp_path / "bad.jsonl", "source", "line 2"),
        (tmp_path / "metrics.parquet", "source", "unsupported file type"),
    ]
    for source, field, words in cases:
        with pytest.raises(UserInputError) as err:
            diagnose(source)
        assert err.value.field == field and words in str(err.value), (source, str(err.value))
    with pytest.raises(UserInputError, match="config: .*not valid YAML"):
        diagnose(runs["healthy"], config=tmp_path / "bad.yaml")
    with pytest.raises(UserInputError, match="log: no such file"):
        diagnose(runs["healthy"], log=tmp_path / "nope.log")


# ---------------------------------------------------------------- the doors
def test_cli_diagnose_run(runs, tmp_path):
    proc, data = run_cli_json("diagnose-run", str(runs["truncated"]))
    truncated = next(f for f in data["findings"] if f["code"] == "completions_truncated")
    assert proc.returncode == 1 and truncated["patch_valid"] is True
    proc, data = run_cli_json("diagnose-run", str(series_file(tmp_path, healthy_rows())), "--no-validate")
    assert proc.returncode == 0 and data["healthy"] is True
    proc = run_cli("diagnose-run", str(FIXTURES / "module_not_found.log"), "--no-validate")
    assert proc.returncode == 1 and "import_error" in proc.stdout and "line 6: ModuleNotFoundError" in proc.stdout
    proc = run_cli("diagnose-run", str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and proc.stderr.startswith("error: source:") and "Traceback" not in proc.stderr


def test_mcp_diagnose_run(runs):
    async def calls(client):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool("diagnose_run", {"source": str(runs["constant"]), "validate_patches": False})
        missing = await client.call_tool("diagnose_run", {"source": "/no/such/run"})
        return tools["diagnose_run"], result, missing

    tool, result, missing = asyncio.run(call_mcp(calls))
    assert "description" in json.dumps(tool.input_schema)
    data = result.structured_content
    assert data["findings"][0]["code"] == "no_reward_signal"
    assert set(data["findings"][0]) >= {"code", "severity", "evidence", "explanation", "patch"}
    assert missing.is_error and "source" in missing.content[0].text


def test_status_hook_accepts_a_bare_source(runs):
    """training_status calls diagnose_run with a run directory path."""
    d = diagnose_run(str(runs["healthy"]))
    assert d.source_kind == "run_dir" and d.steps_logged == 8


def test_codes_are_documented():
    triage = (Path(__file__).parents[1] / "references" / "failure-triage.md").read_text()
    missing = [code for code in CODES if f"`{code}`" not in triage]
    assert not missing, f"codes without a section in references/failure-triage.md: {missing}"


def test_oom_levers_without_a_plannable_model():
    """A model the memory planner does not know: the fixed levers, cheapest first, never the batch."""
    config = {"model_name_or_path": "acme/unknown-model", "use_vllm": True, "vllm_mode": "colocate", "beta": 0.01,
              "loss_type": "grpo", "reward_funcs": ["accuracy_reward"]}
    d = diagnose(FIXTURES / "cuda_oom.log", config=config)
    assert d.findings[0].patch == {"vllm_enable_sleep_mode": True, "beta": 0.0}
    assert_patches_validate(d)

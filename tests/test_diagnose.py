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
import os
import re
import shutil
import statistics
import sys
import traceback
from pathlib import Path

import pytest
import yaml

from conftest import call_mcp, run_cli, run_cli_json
from mcp_server.evidence import MAC
from support import (SERIES_CONFIG, diagnose_series, healthy_rows, series_file, with_series, write_signed,
                     write_signed_lines)
from mcp_server.errors import UserInputError
from mcp_server.diagnosis.diagnose import CODES, diagnose, diagnose_run
from mcp_server.diagnosis.registry import GUARD_CODES

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
    return [
        1.0 if (m := ANSWER.findall(_text(c))) and m[-1].strip() == gold else 0.0
        for c, gold in zip(completions, answer)
    ]


def length_reward(completions, **kwargs):
    """Pays for characters: the classic hackable reward."""
    return [len(_text(c)) / 20 for c in completions]


def constant_reward(completions, **kwargs):
    return [1.0] * len(completions)


def none_reward(completions, **kwargs):
    """Applies to nothing: TRL logs its mean as NaN."""
    return [None] * len(completions)


def raising_reward(completions, **kwargs):
    raise ValueError("could not parse the answer")


# Each run: rewards, steps, learning rate, and any other GRPOConfig fields.
RUNS = {
    "healthy": dict(
        rewards=[format_reward, closeness_reward], max_steps=8, learning_rate=1e-5, save_steps=8, guard="stop"
    ),  # the guard must never stop a healthy run
    "huge_lr": dict(rewards=[format_reward, closeness_reward], max_steps=4, learning_rate=1.0, save_steps=4),
    "nan": dict(rewards=[format_reward, closeness_reward], max_steps=4, learning_rate=1e8),
    "constant": dict(rewards=[constant_reward], max_steps=3, learning_rate=1e-5),
    "length": dict(
        rewards=[length_reward, correctness_reward], max_steps=8, learning_rate=3e-3, max_completion_length=32
    ),
    "truncated": dict(
        rewards=[format_reward, closeness_reward], max_steps=3, learning_rate=1e-5, max_completion_length=4
    ),
    "reward_none": dict(rewards=[format_reward, none_reward], max_steps=2, learning_rate=1e-5),
    "reward_raises": dict(rewards=[format_reward, raising_reward], max_steps=2, learning_rate=1e-5),
    # Guarded twins of the diverging runs: they must stop at the first logged step that shows the failure.
    "guard_nan": dict(
        rewards=[format_reward, closeness_reward], max_steps=6, learning_rate=1e8, guard="stop", save_steps=100
    ),
    "guard_huge_lr": dict(
        rewards=[format_reward, closeness_reward], max_steps=6, learning_rate=1.0, guard="stop", save_steps=100
    ),
    # Issue 20: the rates an expert tries first on a diverging run, unguarded (diagnosis) and guarded at DAPO's
    # beta 0 (where a dead signal leaves grad_norm exactly 0); a reward that ignores the text (signal lost by
    # construction); a data set smaller than one generation batch (0 steps by construction); a limit two tokens
    # under the warm start's answers (cut by construction) and its patched replay (in the test).
    "lr_1e-2": dict(rewards=[format_reward, closeness_reward], max_steps=8, learning_rate=1e-2),
    "lr_3e-3": dict(rewards=[format_reward, closeness_reward], max_steps=8, learning_rate=3e-3),
    "guard_lr_1e-2": dict(rewards=[format_reward, closeness_reward], max_steps=8, learning_rate=1e-2, beta=0.0,
                          guard="stop", save_steps=100),
    "guard_lr_3e-3": dict(rewards=[format_reward, closeness_reward], max_steps=8, learning_rate=3e-3, beta=0.0,
                          guard="stop", save_steps=100),
    "guard_lost_signal": dict(rewards=[constant_reward], max_steps=8, learning_rate=1e-5, guard="stop",
                              save_steps=100),
    "zero_steps": dict(rewards=[format_reward, closeness_reward], max_steps=4, learning_rate=1e-5, guard="stop",
                       steps_per_generation=16, prompts=8),
    "cut": dict(rewards=[format_reward, closeness_reward], max_steps=4, learning_rate=1e-5, max_completion_length=18),
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
    from mcp_server.training.trainer.progress import ProgressCallback, write_outcome

    guard = fields.pop("guard", "warn")
    prompts = fields.pop("prompts", 64)
    values = {**COMMON, **fields, "model_name_or_path": str(model), "output_dir": str(run_dir / "checkpoints")}
    (run_dir / "train" / "logs").mkdir(parents=True)
    (run_dir / "train" / "config.yaml").write_text(yaml.safe_dump(values))
    (run_dir / "train" / "request.json").write_text(json.dumps({"model": str(model), "gpu": "cpu", "num_gpus": 1,
                                                                "guard": guard}))
    args = {k: v for k, v in values.items() if k != "model_name_or_path"}
    args.update(
        report_to="none", use_cpu=True, disable_tqdm=True, save_strategy="steps" if "save_steps" in args else "no"
    )
    trainer = GRPOTrainer(model=str(model), reward_funcs=rewards, args=GRPOConfig(**args),
                          train_dataset=Dataset.from_list(make_task(prompts)), callbacks=[ProgressCallback(run_dir)])
    with open(run_dir / "train" / "logs" / "stdout.log", "w") as log, contextlib.redirect_stdout(log):
        try:
            trainer.train()  # prints the Trainer's metric dicts, as train.py's stdout.log shows them
        except Exception:  # a diverged run may crash (NaN weights cannot be sampled from): logged, as train.py would
            log.write(traceback.format_exc())
            write_outcome(run_dir, "failed", global_step=trainer.state.global_step)
        else:  # what train.py records when train() returns
            write_outcome(run_dir, "succeeded", global_step=trainer.state.global_step)


def inputs_key(tiny_model: Path, *sources: str) -> str:
    """A hash of everything a real run here depends on: the tiny model's weights and tokenizer, `sources` (the code
    that trains), every module of the package (the progress callback, the guard, the outcome it writes), the
    versions of the libraries that run it and the CPU kernel set (ATEN_CPU_CAPABILITY): a change to any of them
    keys a new build, so a cached run is never one the code under test did not produce."""
    import torch
    import transformers
    import trl

    from mcp_server.tiny import state_sha256, tokenizer_sha256

    package = Path(__file__).resolve().parents[1] / "mcp_server"
    code = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        code.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    return hashlib.sha256(json.dumps({
        "tiny": [state_sha256(tiny_model), tokenizer_sha256(tiny_model)], "sources": list(sources),
        "package": code.hexdigest(), "torch": torch.__version__, "transformers": transformers.__version__,
        "trl": trl.__version__, "kernels": torch.backends.cpu.get_cpu_capability(),
    }, sort_keys=True).encode()).hexdigest()[:16]


def machine_cache() -> Path:
    """The per-machine cache the real model is converted into (LLM_FINETUNING_MODEL_CACHE, which conftest sets to
    the system's temporary directory): what a session trains here, the next one reuses."""
    from mcp_server.smollm2 import model_cache_root

    return model_cache_root()


def cached_warm_model(tiny_model: Path) -> Path:
    """The warm-started model, built once per machine (inputs_key: the tiny model, warm_start's code, the package,
    the libraries, the kernel set)."""
    from mcp_server.tiny import build_once

    key = inputs_key(tiny_model, inspect.getsource(warm_start))
    return build_once(machine_cache() / f"diagnose-warm-{key}", lambda out: warm_start(tiny_model, out), ".warm-")


@pytest.fixture(scope="session")
def runs(tmp_path_factory, tiny_model) -> dict[str, Path]:
    """The real runs (RUNS), trained once per machine and copied into the session: 16 GRPO runs of TRL on the
    tiny model's warm start, keyed by inputs_key over this whole module (its rewards, RUNS, train_run). A copy
    names itself wherever its files named the folder it was trained in (output_dir, the logs)."""
    import torch

    from mcp_server.tiny import build_once

    model = cached_warm_model(tiny_model)

    def train_all(folder: Path) -> None:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny tensors: one thread is several times faster on a shared CPU
        try:
            for name, spec in RUNS.items():
                spec = dict(spec)
                train_run(model, folder / f"2026-01-01-{name}", spec.pop("rewards"), **spec)
        finally:
            torch.set_num_threads(threads)

    key = inputs_key(tiny_model, inspect.getsource(sys.modules[__name__]), str(model))
    built = build_once(machine_cache() / f"diagnose-runs-{key}", train_all, ".runs-", marker=None)
    root = tmp_path_factory.mktemp("diagnose-runs")
    out = {}
    for name in RUNS:
        out[name] = root / f"2026-01-01-{name}"
        shutil.copytree(built / out[name].name, out[name])
        trained_in = str(Path(yaml.safe_load((out[name] / "train" / "config.yaml").read_text())["output_dir"]).parent)
        for path in out[name].rglob("*"):
            if path.suffix in (".json", ".jsonl", ".yaml", ".log") and trained_in in (text := path.read_text()):
                written = path.stat()  # kept: diagnosis orders a run's files by when they were written
                path.write_text(text.replace(trained_in, str(out[name])))
                os.utime(path, ns=(written.st_atime_ns, written.st_mtime_ns))
        for path in (out[name] / "train" / "logs").glob("*.json"):  # the trainer's records, signed for this folder
            record = json.loads(path.read_text())
            if isinstance(record, dict) and MAC in record:
                written = path.stat()
                write_signed(path, {k: v for k, v in record.items() if k != MAC})
                os.utime(path, ns=(written.st_atime_ns, written.st_mtime_ns))
        progress = out[name] / "train" / "logs" / "progress.jsonl"  # its lines too: unsigned ones are not read
        if progress.is_file():
            written = progress.stat()
            lines = [json.loads(line) for line in progress.read_text().splitlines() if line.strip()]
            write_signed_lines(progress, [{k: v for k, v in line.items() if k != MAC} for line in lines])
            os.utime(progress, ns=(written.st_atime_ns, written.st_mtime_ns))
    return out


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
CONFIG_OR_LOG_CODES = {"cuda_out_of_memory", "vllm_out_of_memory", "nccl_timeout", "import_error", "disk_full",
                       "fp16_divergence", "lr_out_of_range", "moe_without_gspo"}
# The metrics TRL's GRPOTrainer logs that the rules read (the constructed series below use the same names).
RULE_METRICS = {"loss", "grad_norm", "learning_rate", "reward", "reward_std", "frac_reward_zero_std", "kl", "entropy",
                "completions/mean_length", "completions/clipped_ratio", "completions/mean_terminated_length"}


def assert_documented(diagnosis):
    assert set(codes(diagnosis)) <= set(CODES), diagnosis.findings


@pytest.mark.slow
def test_healthy_run_completes_and_earns_no_config_finding(runs):
    d = diagnose(runs["healthy"])
    assert d.source_kind == "run_dir" and d.steps_logged == 8 and d.last_step == 8
    assert d.config_path.endswith("train/config.yaml")
    assert_documented(d)
    assert not set(codes(d)) & (CONFIG_OR_LOG_CODES | {"nan_loss"}), d.findings
    assert_patches_validate(d)


@pytest.mark.slow
def test_real_runs_log_every_metric_the_rules_read(runs):
    from mcp_server.diagnosis.metrics import load_run

    for name in ("healthy", "length", "constant"):
        logged = load_run(runs[name]).metric_names()
        assert RULE_METRICS <= logged, (name, RULE_METRICS - logged)
    logged = load_run(runs["length"]).metric_names()
    assert {"rewards/length_reward/mean", "rewards/correctness_reward/mean", "rewards/length_reward/std"} <= logged


@pytest.mark.slow
def test_huge_learning_rate(runs):
    d = diagnose(runs["huge_lr"])
    assert not d.healthy and d.steps_logged == 4
    # learning_rate=1.0 is 100000x the top of the range: an error whatever the run did, and the cause comes first.
    assert d.findings[0].code == "lr_out_of_range" and d.findings[0].severity == "error"
    lr = by_code(d, "lr_out_of_range")
    assert lr.evidence[0].value == 1.0 and lr.patch["learning_rate"] <= 1e-5
    assert_documented(d)
    assert_patches_validate(d)


@pytest.mark.slow
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
    # The NaN is an effect: it names its root cause and carries no patch of its own; the rate also fits.
    nan16 = by_code(d16, "nan_loss")
    assert nan16.caused_by == "fp16_divergence" and nan16.patch == {} and "lr_out_of_range" in nan16.other_causes
    assert "lr_out_of_range" in d16.findings[0].other_causes and d16.findings[0].read_samples_at == nan16.onset
    assert_patches_validate(d16)


@pytest.mark.slow
def test_constant_reward_has_no_signal(runs):
    """A reward that returns 1.0 for everything: zero spread in every group, by construction."""
    d = diagnose(runs["constant"])
    f = d.findings[0]
    assert f.code == "no_reward_signal" and f.severity == "error"
    assert "constant" in f.explanation and f.patch == {}  # no config change fixes a reward that ignores the text
    assert {e.metric for e in f.evidence} >= {"frac_reward_zero_std", "reward_std"}


@pytest.mark.slow
def test_length_paying_reward_run_is_read(runs):
    """Whether 8 steps at 3e-3 already show the length trend is training luck (the rule itself is tested on
    constructed series below); the run's reward components and its out-of-range rate are robust."""
    d = diagnose(runs["length"])
    assert d.steps_logged == 8 and by_code(d, "lr_out_of_range").severity == "error"
    assert_documented(d)
    assert_patches_validate(d)


@pytest.mark.slow
def test_real_run_never_terminating_completions_rank_before_no_signal(runs):
    """Real run: answers take about 20 tokens and the limit is 4, so no completion ends, by construction. Issue 14:
    this got no_reward_signal ("task too hard, SFT first") ranked ahead of the truncation causing it, and no
    EOS / chat-template hint."""
    d = diagnose(runs["truncated"])
    assert codes(d)[:2] == ["completions_never_terminate", "no_reward_signal"], d.findings
    never, signal = d.findings[0], d.findings[1]
    assert never.severity == "error" and never.patch == {} and "eos_token" in never.explanation
    assert "chat template" in never.explanation and "enable_thinking" in never.explanation
    assert {e.metric for e in never.evidence} >= {"completions/clipped_ratio", "completions/mean_terminated_length"}
    assert signal.caused_by == "completions_never_terminate" and signal.patch == {} and "SFT" not in signal.explanation
    assert "completions_truncated" not in codes(
        d
    )  # one finding for one cause, not a longer limit for a model that never stops


# ---------------------------------------------------------------- threshold rules on constructed series
# Each test changes one series of a healthy run (support.healthy_rows) around one threshold and runs the real
# diagnose_run on the trainer_state.json it makes (support.diagnose_series).


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
        assert f.severity == "warning" and f.patch == {
            "epsilon_high": 0.28,
            "beta": 0.0,
            "mask_truncated_completions": True,
            "steps_per_generation": 16,
        }  # 16 mini-batches x GA 1
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
        # twice the completions per prompt and twice the accumulation: the same prompts per step, on-policy
        assert found.patch == {"num_generations": 8, "gradient_accumulation_steps": 2}


@pytest.mark.parametrize("late, severity", [(0.09, None), (0.1, "warning"), (0.49, "warning"), (0.5, "error")])
def test_completions_truncated_thresholds(tmp_path, late, severity):
    """Healthy is under 0.1 (references/trl-metrics.md); an error from 0.5."""
    d = diagnose_series(tmp_path, with_series(healthy_rows(8), "completions/clipped_ratio", [0.0] * 4 + [late] * 4))
    found = by_code(d, "completions_truncated") if "completions_truncated" in codes(d) else None
    assert (found.severity if found else None) == severity
    if found:
        assert found.patch == {"max_completion_length": 48, "mask_truncated_completions": True}


@pytest.mark.parametrize("steps, trend, flagged", [(20, 0.0, True), (19, 0.0, False), (20, 0.02, False)])
def test_flat_reward_needs_twenty_points_and_no_trend(tmp_path, steps, trend, flagged):
    """A reward that wobbles around 0.5 for 20 logged steps while groups vary is flat; 19 steps is too early
    to say, and a steady rise is not flat."""
    rows = with_series(
        healthy_rows(steps), "reward", [0.5 + trend * i + (0.01 if i % 2 else -0.01) for i in range(steps)]
    )
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
    assert by_code(d, "length_reward_correlation").patch == {}  # the dapo loss has no length bias: fix the reward
    grpo = diagnose_series(tmp_path, rows, validate=True, model_name_or_path=str(tiny_model), loss_type="grpo")
    assert by_code(grpo, "length_reward_correlation").patch["loss_type"] == "dr_grpo"
    hacking = by_code(d, "possible_reward_hacking")
    assert "length_reward" in hacking.explanation and "correctness_reward" in hacking.explanation
    assert_patches_validate(d)
    # The same climb in length without a rising reward is not the length bias.
    flat = with_series(with_series(rows, "reward", [0.5] * 8), "rewards/length_reward/mean", [0.5] * 8)
    assert "length_reward_correlation" not in codes(diagnose_series(tmp_path, flat))


def test_exact_metrics_reasoning_longer_is_not_length_bias(tmp_path):
    """Issue 20: an R1-like run, whose completions grow while correctness rises (TRL 1.16's rewards/<name>/mean),
    got length_reward_correlation with a Dr.GRPO patch even on a dapo config. Learning to reason longer is not a
    finding; the same growth paid by a length reward with correctness flat is, with no config patch on dapo."""
    n = 12
    lengths = [40.0 + 8 * i for i in range(n)]
    rows = with_series(healthy_rows(n), "completions/mean_length", lengths)
    rows = with_series(rows, "completions/mean_terminated_length", lengths)
    rows = with_series(rows, "rewards/correctness_reward/mean", [0.2 + 0.05 * i for i in range(n)])
    rows = with_series(rows, "reward", [1.1 + 0.05 * i for i in range(n)])
    healthy = diagnose_series(tmp_path, rows, max_completion_length=256)
    assert healthy.healthy, healthy.findings
    paid = with_series(rows, "rewards/correctness_reward/mean", [0.3] * n)
    paid = with_series(paid, "rewards/format_reward/mean", [x / 200 for x in lengths])
    d = diagnose_series(tmp_path, paid, max_completion_length=256)
    f = by_code(d, "length_reward_correlation")
    assert f.patch == {} and "rewards/format_reward/mean" in f.explanation and "correctness" in f.explanation


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
@pytest.mark.slow
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


@pytest.mark.slow
def test_csv_export_with_trl_names(runs, tmp_path):
    rows = [
        json.loads(line) for line in (runs["length"] / "train" / "logs" / "progress.jsonl").read_text().splitlines()
    ]
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_crash_log_beside_metrics(runs):
    """The NaN run crashed when sampling from NaN weights; its stdout log is read with the metrics."""
    d = diagnose(runs["nan"])
    assert d.log_path and d.log_path.endswith("stdout.log")
    evidence = [e.value for e in by_code(d, "nan_loss").evidence if e.metric == "log"]
    assert evidence and "probability tensor contains" in evidence[0]


@pytest.mark.slow
def test_bare_stdout_log_of_a_real_run(runs):
    """Only the stdout of a run (the Trainer's printed metric dicts): still diagnosed from its metrics."""
    d = diagnose(runs["huge_lr"] / "train" / "logs" / "stdout.log")
    assert d.source_kind == "log" and d.steps_logged == 4 and "lr_out_of_range" in codes(d)
    healthy = diagnose(runs["healthy"] / "train" / "logs" / "stdout.log")
    assert healthy.steps_logged == 8 and not {"lr_out_of_range", "nan_loss"} & set(codes(healthy))


# ---------------------------------------------------------------- bad input
@pytest.mark.slow
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
@pytest.mark.slow
def test_cli_diagnose_run(runs, tmp_path):
    truncated = with_series(healthy_rows(8), "completions/clipped_ratio", [0.0] * 4 + [0.3] * 4)
    proc, data = run_cli_json("diagnose-run", str(series_file(tmp_path, truncated)))  # one patch to validate
    assert proc.returncode == 1 and [(f["code"], f["patch_valid"]) for f in data["findings"]] == [
        ("completions_truncated", True)]
    proc, data = run_cli_json("diagnose-run", str(runs["truncated"]))
    assert proc.returncode == 1 and [f["code"] for f in data["findings"]][:2] == [
        "completions_never_terminate", "no_reward_signal"]
    proc, data = run_cli_json("diagnose-run", str(series_file(tmp_path, healthy_rows())), "--no-validate")
    assert proc.returncode == 0 and data["healthy"] is True
    proc = run_cli("diagnose-run", str(FIXTURES / "module_not_found.log"), "--no-validate")
    assert proc.returncode == 1 and "import_error" in proc.stdout and "line 6: ModuleNotFoundError" in proc.stdout
    proc = run_cli("diagnose-run", str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and proc.stderr.startswith("error: source:") and "Traceback" not in proc.stderr


@pytest.mark.slow
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


@pytest.mark.slow
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


def test_garbage_is_an_error_never_a_clean_bill(tmp_path):
    """Issue 12: a binary CSV, an empty JSONL, `[]` and a 100k-deep JSON were 'healthy' (exit 0) or a RecursionError."""
    (tmp_path / "binary.csv").write_bytes(b"loss,reward\n\x00\x01\x02,\xff\xfe\n")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "list.json").write_text("[]")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "deep.jsonl").write_text('{"a":' * 100_000 + "1" + "}" * 100_000 + "\n")
    (tmp_path / "words.csv").write_text("loss,reward\nabc,def\n")
    for name, words in [("binary.csv", "binary file"), ("empty.jsonl", "no logged training step"),
                        ("list.json", "no logged training step"), ("deep.json", "nested too deeply"),
                        ("deep.jsonl", "nested too deeply"), ("words.csv", "metric 'loss' is a str 'abc'")]:
        with pytest.raises(UserInputError) as err:
            diagnose(tmp_path / name, validate_patches=False)
        assert err.value.field == "source" and words in str(err.value), (name, str(err.value))
    proc = run_cli("diagnose-run", str(tmp_path / "deep.json"), "--no-validate")
    assert proc.returncode == 2 and proc.stderr.startswith("error: source:") and "Recursion" not in proc.stderr
    proc = run_cli("diagnose-run", str(tmp_path / "list.json"), "--no-validate")
    assert proc.returncode == 2 and "healthy" not in proc.stdout



# ---------------------------------------------------------------- issue 14: what it got wrong, and every new code
@pytest.mark.slow
def test_real_run_reward_returning_none_everywhere(runs):
    d = diagnose(runs["reward_none"])
    f = by_code(d, "reward_returns_none")
    assert f.severity == "error" and "none_reward" in f.explanation and f.patch == {}
    assert any(e.metric == "rewards/none_reward/mean" and e.value == "nan" for e in f.evidence)


@pytest.mark.slow
def test_real_run_reward_function_raising(runs):
    d = diagnose(runs["reward_raises"])
    assert d.findings[0].code == "reward_function_error" and d.findings[0].severity == "error"
    f = d.findings[0]
    assert "raising_reward" in f.explanation and "could not parse the answer" in f.explanation and f.patch == {}
    assert all(e.metric == "log" for e in f.evidence)


def divergence_rows() -> list[dict]:
    """A real-looking vLLM divergence: the sampler's log-probs drift from the trainer's (difference up to 20, ratio up
    to 31), clip_ratio reaches 0.32, entropy rises 0.6 -> 3.1, correctness falls."""
    n = 12
    rows = healthy_rows(n)
    rows = with_series(rows, "sampling/sampling_logp_difference/mean", [0.02 + 0.08 * i for i in range(n)])
    rows = with_series(rows, "sampling/sampling_logp_difference/max", [0.5 + 1.8 * i for i in range(n)])
    rows = with_series(rows, "sampling/importance_sampling_ratio/min", [0.9 - 0.08 * i for i in range(n)])
    rows = with_series(rows, "sampling/importance_sampling_ratio/mean", [1.0 + 0.12 * i for i in range(n)])
    rows = with_series(rows, "sampling/importance_sampling_ratio/max", [1.2 + 2.7 * i for i in range(n)])
    rows = with_series(rows, "clip_ratio/region_mean", [0.01 + 0.03 * i for i in range(n)])
    rows = with_series(rows, "clip_ratio/low_mean", [0.005 + 0.015 * i for i in range(n)])
    rows = with_series(rows, "clip_ratio/high_mean", [0.005 + 0.015 * i for i in range(n)])
    rows = with_series(rows, "entropy", [0.6 + 0.23 * i for i in range(n)])
    rows = with_series(rows, "rewards/correctness_reward/mean", [0.5 - 0.035 * i for i in range(n)])
    rows = with_series(rows, "reward", [1.4 - 0.04 * i + (0.01 if i % 2 else -0.01) for i in range(n)])
    return rows


def test_exact_metrics_vllm_divergence_is_named_not_reward_flat(tmp_path):
    """Issue 14: this got only reward_flat, with a patch doubling the learning rate."""
    d = diagnose_series(tmp_path, divergence_rows(), use_vllm=True, num_iterations=2,
                        vllm_importance_sampling_mode="token_truncate")
    assert codes(d)[0] == "sampler_mismatch" and d.findings[0].severity == "error"
    assert {"importance_ratio_blowup", "entropy_rising", "reward_falling"} <= set(codes(d)), codes(d)
    assert "reward_flat" not in codes(d)
    # The mismatch shows first (step 2) and explains entropy; the clipping (num_iterations 2) appears later, after
    # the entropy rise it cannot have caused, and fits the falling reward too: both say so.
    entropy, mismatch = by_code(d, "entropy_rising"), by_code(d, "sampler_mismatch")
    assert entropy.caused_by == "sampler_mismatch" and entropy.patch == {} and entropy.onset > mismatch.onset
    assert "importance_ratio_blowup" in mismatch.other_causes
    assert "read the samples at step" in mismatch.explanation.lower()
    assert by_code(d, "importance_ratio_blowup").patch == {"num_iterations": 1}
    assert by_code(d, "entropy_rising").severity == "error"
    for f in d.findings:  # never a higher learning rate on a run whose correctness falls
        assert f.patch.get("learning_rate", 0) <= SERIES_CONFIG["learning_rate"], f
    mismatch = by_code(d, "sampler_mismatch")
    assert {e.metric for e in mismatch.evidence} >= {"sampling/sampling_logp_difference/max",
                                                     "sampling/importance_sampling_ratio/max"}


@pytest.mark.parametrize("diff, ratio, severity", [
    (0.09, 1.0, None), (0.1, 1.0, "warning"), (0.49, 1.0, "warning"), (0.5, 1.0, "error"),
    (0.02, 0.79, "warning"), (0.02, 0.49, "error"), (0.02, 1.26, "warning"),
])
def test_exact_metrics_sampler_mismatch_thresholds(tmp_path, diff, ratio, severity):
    rows = with_series(healthy_rows(8), "sampling/sampling_logp_difference/mean", [diff] * 8)
    rows = with_series(rows, "sampling/sampling_logp_difference/max", [2.0] * 8)
    rows = with_series(rows, "sampling/importance_sampling_ratio/mean", [ratio] * 8)
    rows = with_series(rows, "sampling/importance_sampling_ratio/min", [0.0 if ratio < 1 else 0.9] * 8)
    rows = with_series(rows, "sampling/importance_sampling_ratio/max", [2.5] * 8)
    d = diagnose_series(tmp_path, rows, use_vllm=True)
    found = by_code(d, "sampler_mismatch") if "sampler_mismatch" in codes(d) else None
    assert (found.severity if found else None) == severity
    if found and ratio < 1:  # TRL's default sequence_mask zeroes what it drops
        assert "dropped" in found.explanation


@pytest.mark.parametrize("late, severity", [(0.14, None), (0.15, "warning"), (0.3, "error")])
def test_exact_metrics_importance_ratio_blowup_thresholds(tmp_path, late, severity):
    rows = with_series(healthy_rows(8), "clip_ratio/region_mean", [0.0] * 4 + [late] * 4)
    d = diagnose_series(tmp_path, rows, num_iterations=1)
    found = by_code(d, "importance_ratio_blowup") if "importance_ratio_blowup" in codes(d) else None
    assert (found.severity if found else None) == severity
    if found:  # already on-policy: half the learning rate, never more
        assert found.patch == {"learning_rate": 5e-7}


@pytest.mark.parametrize("late, severity", [(1.45, None), (1.5, "warning"), (2.9, "warning"), (3.0, "error")])
def test_exact_metrics_entropy_rising_thresholds(tmp_path, late, severity):
    rows = with_series(healthy_rows(8), "entropy", [1.0, 1.0, 1.1, 1.2, 1.3, 1.4, late, late])
    d = diagnose_series(tmp_path, rows)
    found = by_code(d, "entropy_rising") if "entropy_rising" in codes(d) else None
    assert (found.severity if found else None) == severity
    assert "entropy_collapse" not in codes(d)
    if found:
        assert found.patch.get("learning_rate", 0) < SERIES_CONFIG["learning_rate"]


def test_exact_metrics_completion_length_collapse(tmp_path):
    """Issue 14: a collapse 405 -> 18 tokens got reward_flat with a patch doubling the learning rate."""
    lengths = [405, 380, 300, 210, 120, 60, 30, 22, 20, 18, 18, 18, 19, 18, 18, 18, 18, 18, 18, 18]
    rows = with_series(healthy_rows(20), "completions/mean_length", lengths)
    rows = with_series(rows, "completions/mean_terminated_length", lengths)
    rows = with_series(rows, "reward", [0.5 + (0.01 if i % 2 else -0.01) for i in range(20)])
    rows = with_series(rows, "rewards/format_reward/mean", [0.5 + 0.02 * i for i in range(20)])
    d = diagnose_series(tmp_path, rows, max_completion_length=512)
    f = by_code(d, "completion_length_collapse")
    assert f.severity == "warning" and f.patch == {} and "format_reward" in f.explanation
    assert all(f.patch.get("learning_rate", 0) <= SERIES_CONFIG["learning_rate"] for f in d.findings)
    assert "reward_flat" not in codes(d) or by_code(d, "reward_flat").patch == {}
    kept = with_series(rows, "completions/mean_length", [405 - 2 * i for i in range(20)])
    assert "completion_length_collapse" not in codes(diagnose_series(tmp_path, kept, max_completion_length=512))


def test_exact_metrics_truncation_rising_to_018_is_not_healthy(tmp_path):
    """Issue 14: clipped_ratio rising 0.10 -> 0.18 was called healthy (the threshold was 0.5)."""
    rows = with_series(healthy_rows(10), "completions/clipped_ratio", [0.10 + 0.009 * i for i in range(10)])
    d = diagnose_series(tmp_path, rows)
    f = by_code(d, "completions_truncated")
    assert not d.healthy and f.severity == "warning" and "rising" in f.explanation


@pytest.mark.parametrize("beta, kl, severity", [
    (0.04, 0.3, None), (0.01, 0.24, None), (0.01, 0.3, "warning"), (0.01, 1.3, "error"), (0.001, 0.1, "warning"),
])
def test_exact_metrics_kl_bounds_scale_with_beta(tmp_path, beta, kl, severity):
    """Issue 14: KL warned only at 1.0 nats/token whatever beta (far too late at beta 0.01)."""
    rows = with_series(healthy_rows(8), "kl", [0.01, 0.02, 0.03, 0.05, 0.08, 0.1, kl, kl])
    d = diagnose_series(tmp_path, rows, beta=beta)
    found = by_code(d, "kl_explosion") if "kl_explosion" in codes(d) else None
    assert (found.severity if found else None) == severity


def test_exact_metrics_length_paying_reward_at_the_cap(tmp_path):
    """Issue 14: a reward paying for length while completions pile up at the cap must be named as the length
    correlation, with the truncation as its evidence and effect, not only as truncation or a flat signal."""
    n, cap = 16, 256
    lengths = [min(120 + 20 * i, cap - 1) for i in range(n)]
    rows = with_series(healthy_rows(n), "completions/mean_length", lengths)
    rows = with_series(rows, "completions/clipped_ratio", [min(0.02 + 0.07 * i, 0.95) for i in range(n)])
    rows = with_series(rows, "rewards/length_reward/mean", [x / 256 for x in lengths])
    rows = with_series(rows, "rewards/length_reward/std", [0.05] * n)
    rows = with_series(rows, "reward", [0.4 + x / 256 for x in lengths])
    rows = with_series(rows, "rewards/correctness_reward/mean", [0.3] * n)
    rows = [{k: v for k, v in r.items() if not k.startswith("rewards/format_reward")} for r in rows]
    d = diagnose_series(tmp_path, rows, max_completion_length=cap)
    assert {"length_reward_correlation", "completions_truncated"} <= set(codes(d)), codes(d)
    assert codes(d).index("length_reward_correlation") < codes(d).index("completions_truncated")
    assert by_code(d, "completions_truncated").caused_by == "length_reward_correlation"
    assert any(e.metric == "completions/clipped_ratio" for e in by_code(d, "length_reward_correlation").evidence)


def test_exact_metrics_learning_rate_alone_is_a_note(tmp_path):
    """Issue 14: a rate outside the settled range on a healthy run was a warning; the number alone is no symptom."""
    d = diagnose_series(tmp_path, healthy_rows(), learning_rate=5e-5)
    assert d.healthy and [(f.code, f.severity) for f in d.findings] == [("lr_out_of_range", "info")]
    low = diagnose_series(tmp_path, healthy_rows(), learning_rate=1e-8)
    assert low.healthy and by_code(low, "lr_out_of_range").severity == "info"
    # Below the range on a run whose correctness falls: no patch raising it.
    falling = with_series(healthy_rows(), "rewards/correctness_reward/mean", [0.6 - 0.04 * i for i in range(12)])
    f = by_code(diagnose_series(tmp_path, falling, learning_rate=1e-8), "lr_out_of_range")
    assert f.patch == {}


def test_exact_metrics_reward_falling(tmp_path):
    rows = with_series(healthy_rows(12), "reward", [0.9 - 0.03 * i for i in range(12)])
    d = diagnose_series(tmp_path, rows)
    f = by_code(d, "reward_falling")
    assert f.severity == "warning" and f.patch == {} and "reward_flat" not in codes(d)
    assert "reward_falling" not in codes(diagnose_series(tmp_path, healthy_rows(12)))


@pytest.mark.parametrize("late, flagged", [(1.45, False), (1.5, True)])
def test_exact_metrics_moe_router_instability(tmp_path, late, flagged):
    rows = with_series(healthy_rows(8), "aux_loss", [1.0, 1.0, 1.1, 1.2, 1.3, 1.4, late, late])
    d = diagnose_series(tmp_path, rows, importance_sampling_level="sequence")
    assert ("moe_router_instability" in codes(d)) is flagged
    if flagged:
        assert by_code(d, "moe_router_instability").patch == {}  # already GSPO: no config change follows


def test_exact_metrics_entropy_collapse_in_two_logs_is_an_error(tmp_path):
    d = diagnose_series(tmp_path, with_series(healthy_rows(2), "entropy", [0.55, 0.001]))
    f = by_code(d, "entropy_collapse")
    assert f.severity == "error" and f.patch.get("learning_rate", 1) < SERIES_CONFIG["learning_rate"]


def test_triage_order_is_data_and_the_markdown_follows_it():
    """One triage order, declared in diagnosis/registry.py: references/failure-triage.md writes it out exactly
    (the numbered list is the registry's triage_markdown()), its families in order; the GRPO skill, the
    training-engineer agent and /finetune link to it and repeat none of the list (issue 46: one home)."""
    from mcp_server.diagnosis.registry import FAMILIES, REGISTRY, TRIAGE_ORDER, triage_markdown

    assert set(TRIAGE_ORDER) == set(CODES) == set(REGISTRY)
    assert TRIAGE_ORDER["sampler_mismatch"] < TRIAGE_ORDER["entropy_rising"] < TRIAGE_ORDER["no_reward_signal"]
    assert TRIAGE_ORDER["completions_never_terminate"] < TRIAGE_ORDER["no_reward_signal"]
    root = Path(__file__).parents[1]
    triage = (root / "references" / "failure-triage.md").read_text()
    section = triage.split("## The order of triage", 1)[1].split("\n## ", 1)[0]
    assert triage_markdown() in section, "regenerate the list from mcp_server.diagnosis.registry.triage_markdown()"
    headings = [heading for _, heading in FAMILIES]
    found = [triage.find(f"**{h}**") for h in headings]
    assert -1 not in found and found == sorted(found), dict(zip(headings, found))
    for path in ("skills/grpo-rlvr-training/SKILL.md", "agents/llm-finetuning-training-engineer.md",
                 "commands/finetune.md", "references/failure-triage.md"):
        text = (root / path).read_text()
        assert "packing" not in text.lower().replace("no packing", ""), path
        if path != "references/failure-triage.md":
            assert "references/failure-triage.md" in text and "The order of triage" in text, path
            assert not [h for h in headings if f"**{h}**" in text], (path, "the triage list has one home")



# ---------------------------------------------------------------- the live guard (real tiny runs)
HARD = {"nan_loss", "kl_explosion", "entropy_collapse", "entropy_rising", "sampler_mismatch"}


def onset(run_dir: Path, code: str) -> int | None:
    """The first logged step at which diagnose_run, reading the progress log up to that step, finds `code` as an
    error: the failure's onset, measured offline from the run's own log."""
    lines = (run_dir / "train" / "logs" / "progress.jsonl").read_text().splitlines()
    for n in range(1, len(lines) + 1):
        (run_dir.parent / "prefix.jsonl").write_text("\n".join(lines[:n]) + "\n")
        d = diagnose(run_dir.parent / "prefix.jsonl", config=run_dir / "train" / "config.yaml", validate_patches=False)
        if any(f.code == code and f.severity == "error" for f in d.findings):
            return json.loads(lines[n - 1])["step"]
    return None


@pytest.mark.slow
@pytest.mark.parametrize("name, saves", [("guard_nan", False), ("guard_huge_lr", True)])
def test_real_run_guard_stops_a_hard_failure_at_its_onset(runs, name, saves):
    """guard: stop on the tiny model: learning rate 1e8 makes the loss non-finite, 1.0 breaks the policy (KL or
    entropy beyond their error bounds), by construction. The guard stops at the logged step of onset (0 steps
    after it with logging_steps=1), leaves guard.json with the finding and its patch, saves a checkpoint unless the
    weights are non-finite, and the run is recorded as stopped."""
    run_dir = runs[name]
    stopped = json.loads((run_dir / "train" / "logs" / "stopped.json").read_text())
    guard = json.loads((run_dir / "train" / "logs" / "guard.json").read_text())
    assert stopped["by"] == "guard" and stopped["code"] in HARD and guard["stopped"]["code"] == stopped["code"]
    assert (stopped["code"] == "nan_loss") is (name == "guard_nan")
    steps = [
        json.loads(line)["step"] for line in (run_dir / "train" / "logs" / "progress.jsonl").read_text().splitlines()
    ]
    assert steps[-1] == stopped["step"] < 6  # nothing trained after the stop
    assert stopped["step"] - onset(run_dir, stopped["code"]) == 0
    found = next(f for f in guard["findings"] if f["code"] == stopped["code"])
    assert found["severity"] == "error" and found["patch"].get("learning_rate", 1) < 1e-4
    assert (run_dir / "checkpoints" / f"checkpoint-{stopped['step']}").is_dir() is saves


@pytest.mark.slow
def test_real_run_guard_never_stops_the_healthy_run(runs):
    logs = runs["healthy"] / "train" / "logs"
    assert json.loads((runs["healthy"] / "train" / "request.json").read_text())["guard"] == "stop"
    assert not (logs / "stopped.json").exists() and diagnose(runs["healthy"]).steps_logged == 8


@pytest.mark.slow
def test_training_status_shows_the_guard(runs, tmp_path, monkeypatch):
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import training_status

    monkeypatch.setenv("LLM_FINETUNING_WORKSPACE", str(tmp_path))
    status = training_status(StatusRequest(run=str(runs["guard_huge_lr"]), log_lines=0))
    assert status.guard == "stop" and status.guard_stop["code"] in HARD
    assert any(f.code == status.guard_stop["code"] and f.severity == "error" for f in status.live_findings)


@pytest.mark.parametrize("lr", [5e-8, 1e-6, 1e-3])
def test_exact_metrics_no_patch_raises_the_learning_rate_of_a_run_moving_away(tmp_path, lr):
    """Whatever the rate (below, inside, above the range), no finding on a diverging run patches it upwards; KL
    that starts at exactly 0 (policy == reference) still counts as growing."""
    rows = divergence_rows()
    rows = with_series(rows, "kl", [0.0] + [0.1 * i for i in range(1, 12)])
    rows = with_series(rows, "grad_norm", [0.5] * 6 + [math.nan] + [0.5] * 5)
    rows = with_series(rows, "clip_ratio/region_mean", [0.0] * 12)
    rows = with_series(rows, "learning_rate", [lr] * 12)
    d = diagnose_series(tmp_path, rows, learning_rate=lr, use_vllm=True)
    assert {"nan_loss", "kl_explosion", "entropy_rising"} <= set(codes(d))
    for f in d.findings:
        assert f.patch.get("learning_rate", 0) <= lr, (f.code, f.patch)


@pytest.mark.slow
def test_real_run_wandb_panel_csv_and_trackio_jsonl_exports(runs, tmp_path):
    """A user with only a W&B or Trackio export of the same run: a W&B panel's "Export CSV" ("<run> - train/<metric>"
    columns with __MIN/__MAX companions, x axis "Step") and Trackio's logged rows (transformers' TrackioCallback:
    "train/..." names and train/global_step) give the same findings as the run's own progress log."""
    rows = [
        json.loads(line) for line in (runs["length"] / "train" / "logs" / "progress.jsonl").read_text().splitlines()
    ]
    names = ["loss", "grad_norm", "learning_rate", "reward", "reward_std", "frac_reward_zero_std", "kl", "entropy",
             "completions/mean_length", "completions/clipped_ratio", "completions/mean_terminated_length",
             "rewards/length_reward/mean", "rewards/correctness_reward/mean"]
    panel = tmp_path / "wandb_panel.csv"
    with open(panel, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["Step"] + [f"grpo-run - train/{n}{s}" for n in names for s in ("", "__MIN", "__MAX")])
        for row in rows:
            writer.writerow(
                [row["step"]] + [row.get(n) if s == "" else -1e9 for n in names for s in ("", "__MIN", "__MAX")]
            )
    trackio = tmp_path / "trackio.jsonl"
    trackio.write_text("".join(json.dumps({"train/global_step": r["step"], "timestamp": "2026-01-01T00:00:00",
                                           **{f"train/{n}": r.get(n) for n in names}}) + "\n" for r in rows))
    reference = diagnose(runs["length"] / "train" / "logs" / "progress.jsonl", config={}, validate_patches=False)
    for export in (panel, trackio):
        d = diagnose(export, validate_patches=False)
        assert d.steps_logged == 8 and codes(d) == codes(reference), (export.name, codes(d), codes(reference))


# ---------------------------------------------------------------- issue 20: the cause first, patches that never hurt
@pytest.mark.slow
def test_real_run_divergence_leads_with_its_cause(runs):
    """Real runs at 1e-2 and 3e-3 (2000x and 600x the recipe's rate): the truncation, entropy and zero-spread
    findings were ranked above the learning rate, with a patch lengthening completions and masking the gibberish;
    at 3e-3 on some CPUs the run had not diverged within 8 steps, so the rate was a note and a patch doubling
    max_completion_length led. Asserted is what holds on every kernel set, diverged or not yet: the rate is the
    first finding, every symptom it can cause names it and carries no patch, and no patch lengthens completions,
    masks truncation or raises the rate."""
    from mcp_server.diagnosis.registry import REGISTRY
    from mcp_server.recipe.variants import BASE_RECIPE

    for name, lr in (("lr_1e-2", 1e-2), ("lr_3e-3", 3e-3)):
        d = diagnose(runs[name])
        root = d.findings[0]
        assert (root.code, root.caused_by) == ("lr_out_of_range", None), (name, d.findings)
        assert root.patch == {"learning_rate": BASE_RECIPE["learning_rate"]}, (name, root)
        effects = [f for f in d.findings[1:] if f.severity != "info"]
        if effects:  # a symptom the rate explains makes the rate a problem, ranked first
            assert root.severity in ("warning", "error"), (name, root)
        for f in effects:
            if f.code in REGISTRY["lr_out_of_range"].causes:
                assert f.caused_by == "lr_out_of_range" and f.patch == {}, (name, f)
        for f in d.findings:
            assert f.patch.get("learning_rate", 0) <= lr, (name, f)
            assert "max_completion_length" not in f.patch and "mask_truncated_completions" not in f.patch, (name, f)
        assert_patches_validate(d)


@pytest.mark.slow
def test_real_run_patch_replay_learning_rate_and_truncation(runs, tmp_path):
    """Patch replay: the root cause's patch, applied to the same config, warm start and seed, improves what it
    targets. The rate (1e-2 -> 5e-7): KL and zero-spread groups stay near their start. The cut (limit 18, two
    tokens under the warm start's answers, by construction): doubled with masking, completions end again."""
    import torch

    model = cached_warm_model_of(runs)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name, metric in (("lr_1e-2", "kl"), ("cut", "completions/clipped_ratio")):
            before = diagnose(runs[name])
            patch = before.findings[0].patch
            assert before.findings[0].patch_valid and patch, (name, before.findings[0])
            config = yaml.safe_load((runs[name] / "train" / "config.yaml").read_text())
            spec = dict(RUNS[name])
            fields = {k: v for k, v in config.items() if k not in ("model_name_or_path", "output_dir")}
            fields.update(patch)
            train_run(model, tmp_path / name, spec["rewards"], **fields)
            after = diagnose(tmp_path / name)
            assert after.healthy, (name, after.findings)
            old = [v for _, v in load_series(runs[name], metric)]
            new = [v for _, v in load_series(tmp_path / name, metric)]
            assert max(new) < max(old) and statistics.fmean(new) < statistics.fmean(old), (name, old, new)
    finally:
        torch.set_num_threads(threads)


def cached_warm_model_of(runs) -> Path:
    return Path(yaml.safe_load((runs["healthy"] / "train" / "config.yaml").read_text())["model_name_or_path"])


def load_series(run_dir: Path, metric: str) -> list[tuple[int, float]]:
    from mcp_server.diagnosis.metrics import load_run

    return load_run(run_dir).series(metric)


@pytest.mark.slow
@pytest.mark.parametrize("name, code", [("guard_lr_1e-2", None), ("guard_lr_3e-3", None),
                                        ("guard_lost_signal", "signal_lost")])
def test_real_run_guard_stops_a_silent_death(runs, name, code):
    """guard: stop at DAPO's beta 0. At 1e-2 and 3e-3 the first post-update logs show reward 0, every group at zero
    spread and grad_norm 0; a constant reward has no spread from the start. The guard stops at the logged step
    of onset of what it stops on, and the outcome is never "succeeded" (3e-3 used to run 37 logs to "succeeded")."""
    run_dir = runs[name]
    logs = run_dir / "train" / "logs"
    stopped = json.loads((logs / "stopped.json").read_text())
    assert stopped["by"] == "guard" and stopped["code"] in GUARD_CODES and stopped["code"] == (code or stopped["code"])
    steps = [json.loads(line)["step"] for line in (logs / "progress.jsonl").read_text().splitlines()]
    assert steps[-1] == stopped["step"] < 8 and stopped["step"] - onset(run_dir, stopped["code"]) == 0
    dead = next(step for step, line in zip(steps, (logs / "progress.jsonl").read_text().splitlines())
                if json.loads(line)["frac_reward_zero_std"] == 1.0 and step > steps[0])  # after the first update
    assert stopped["step"] - dead <= 1, (dead, stopped)  # at most one log after every group lost its spread
    outcome = json.loads((logs / "outcome.json").read_text())
    assert outcome["state"] in ("failed", "stopped") and outcome["state"] != "succeeded"
    assert json.loads((runs["healthy"] / "train" / "logs" / "outcome.json").read_text())["state"] == "succeeded"


@pytest.mark.slow
def test_real_run_zero_steps_is_a_failure(runs):
    """A DAPO-shaped run (16 mini-batches per generation) on 8 prompts: the generation batch needs 32, TRL's sampler
    yields none and the Trainer ends at step 0, by construction. It was recorded "succeeded"."""
    logs = runs["zero_steps"] / "train" / "logs"
    outcome = json.loads((logs / "outcome.json").read_text())
    assert outcome["state"] == "failed" and "0 steps" in outcome["error"]
    guard = json.loads((logs / "guard.json").read_text())
    assert guard["stopped"]["code"] == "no_steps_trained" and guard["stopped"]["save"] is False
    d = diagnose(runs["zero_steps"])
    assert d.findings[0].code == "no_steps_trained" and d.findings[0].severity == "error" and not d.healthy


def test_exact_metrics_lost_signal_rule_and_guard_codes(tmp_path):
    """signal_lost: two logs after the first with every group at zero spread and grad_norm 0, or reward NaN; not
    one such log, not zero spread with a gradient (a KL term still trains)."""
    rows = healthy_rows(6)
    dead = with_series(rows, "frac_reward_zero_std", [0.1, 0.1, 0.1, 0.1, 1.0, 1.0])
    dead = with_series(dead, "grad_norm", [0.5, 0.5, 0.5, 0.5, 0.0, 0.0])
    assert by_code(diagnose_series(tmp_path, dead), "signal_lost").severity == "error"
    one = with_series(dead, "frac_reward_zero_std", [0.1, 0.1, 0.1, 0.1, 0.1, 1.0])
    assert "signal_lost" not in codes(diagnose_series(tmp_path, one))
    moving = with_series(dead, "grad_norm", [0.5] * 6)
    assert "signal_lost" not in codes(diagnose_series(tmp_path, moving))
    nan = with_series(rows, "reward", [0.5, 0.5, 0.5, 0.5, math.nan, math.nan])
    assert "signal_lost" in codes(diagnose_series(tmp_path, nan))
    assert {"signal_lost", "no_steps_trained", "nan_loss", "entropy_rising"} <= GUARD_CODES


def test_exact_metrics_reward_flat_reads_batch_std_not_group_spread(tmp_path):
    """TRL's reward_std is nanstd over the whole batch: every group uniform but groups differing gives it > 0. That
    was read as spread within groups: reward_flat, with a patch doubling the learning rate."""
    n = 24
    rows = with_series(healthy_rows(n), "reward", [0.5 + (0.01 if i % 2 else -0.01) for i in range(n)])
    rows = with_series(rows, "frac_reward_zero_std", [1.0] * n)
    d = diagnose_series(tmp_path, rows)
    assert "reward_flat" not in codes(d) and by_code(d, "no_reward_signal").severity == "error"
    assert all("learning_rate" not in f.patch for f in d.findings)
    low = diagnose_series(tmp_path, with_series(rows, "learning_rate", [5e-8] * n), learning_rate=5e-8)
    assert "lr_out_of_range" in codes(low) and all("learning_rate" not in f.patch for f in low.findings), low.findings
    spread = diagnose_series(tmp_path, with_series(rows, "frac_reward_zero_std", [0.1] * n))
    assert "reward_flat" in codes(spread) and "batch-wide" in by_code(spread, "reward_flat").explanation


def test_exact_metrics_dapo_entropy_rising_with_overlong_punishment(tmp_path):
    """Entropy rising into gibberish on a DAPO config with the soft overlong punishment pinned at the limit in
    train/rewards.json: completions_truncated came first with a patch to 1024 tokens, past the punishment's
    max_completion_len (every completion beyond 512 would score -1). Entropy is named, the truncation is its
    effect, and no patch lengthens completions."""
    n = 12
    rows = [{k: v for k, v in r.items() if k != "kl"} for r in healthy_rows(n)]  # beta 0: TRL logs no kl
    rows = with_series(rows, "entropy", [0.6 + 0.3 * i for i in range(n)])
    rows = with_series(rows, "completions/clipped_ratio", [0.0] * 3 + [0.2 + 0.07 * i for i in range(n - 3)])
    rows = with_series(rows, "rewards/correctness_reward/mean", [0.5 - 0.03 * i for i in range(n)])
    (tmp_path / "rewards.json").write_text(json.dumps([
        {"name": "format_reward", "params": {}, "weight": 1.0},
        {"name": "soft_overlong_punishment", "params": {"max_completion_len": 512, "soft_punish_cache": 102},
         "weight": 1.0}]))
    d = diagnose_series(tmp_path, rows, max_completion_length=512, loss_type="dapo", beta=0.0, epsilon_high=0.28,
                        mask_truncated_completions=True)
    assert codes(d)[0] == "entropy_rising" and by_code(d, "completions_truncated").caused_by == "entropy_rising"
    assert all("max_completion_length" not in f.patch for f in d.findings), d.findings
    # A healthy DAPO run cut at its limit: the patch keeps the punishment consistent, so it does not lengthen.
    cut = with_series(healthy_rows(n), "completions/clipped_ratio", [0.3] * n)
    f = by_code(diagnose_series(tmp_path, cut, max_completion_length=512, mask_truncated_completions=False),
                "completions_truncated")
    assert f.patch == {"mask_truncated_completions": True} and "soft overlong punishment" in f.explanation
    # Without the punishment, already masked (DAPO's health range): the cut costs compute, it teaches no broken text.
    (tmp_path / "plain").mkdir()
    masked = by_code(diagnose_series(tmp_path / "plain", cut, max_completion_length=512,
                                     mask_truncated_completions=True), "completions_truncated")
    assert masked.patch == {"max_completion_length": 1024} and "masked out of the loss" in masked.explanation


@pytest.mark.parametrize("late, severity", [(0.2, None), (0.39, None), (0.4, "warning"), (0.6, "error")])
def test_exact_metrics_gspo_clip_ranges_and_its_mechanism(tmp_path, late, severity):
    """GSPO clips far more than GRPO (its paper): 20% was importance_ratio_blowup with a patch setting
    steps_per_generation to the accumulation, which switches GSPO's clip off. GSPO's own bounds, and a patch that
    keeps two mini-batches per generation."""
    rows = with_series(healthy_rows(8), "clip_ratio/region_mean", [late] * 8)
    d = diagnose_series(tmp_path, rows, importance_sampling_level="sequence", loss_type="grpo", epsilon=3e-4,
                        epsilon_high=4e-4, beta=0.0, gradient_accumulation_steps=2, steps_per_generation=8)
    found = next((f for f in d.findings if f.code == "importance_ratio_blowup"), None)
    assert (found.severity if found else None) == severity
    if found:
        assert found.patch == {"steps_per_generation": 4}, found.patch


def test_exact_metrics_assumed_limit_is_said_to_be_assumed(tmp_path):
    """A lone trainer_state.json: the finding said completions were "cut at max_completion_length (512)" when 512
    is TRL's default, not the run's value."""
    rows = [{k: v for k, v in r.items() if k != "completions/max_length"}
            for r in with_series(healthy_rows(8), "completions/clipped_ratio", [0.3] * 8)]
    d = diagnose(series_file(tmp_path, rows), validate_patches=False)
    f = by_code(d, "completions_truncated")
    assert "assuming TRL's default 512" in f.explanation and "no config was found" in f.explanation
    assert any(e.metric == "max_completion_length (assumed)" for e in f.evidence)
    measured = diagnose_series(tmp_path, with_series(healthy_rows(8), "completions/clipped_ratio", [0.3] * 8))
    assert "max_completion_length (24)" in by_code(measured, "completions_truncated").explanation


@pytest.mark.slow
def test_hostile_numbers_and_types(tmp_path, workspace):
    """Issue 25: 1e308 and 4000-digit integers gave OverflowError; strings and lists were read as healthy;
    training-status --plot on 1e308 gave ValueError. Values beyond float32's range (TRL's metrics are float32) read
    as infinities (a divergence finding); a metric of another type is named."""
    big = [{"step": i + 1, "loss": 1e308, "reward": 1e308 * (-1) ** i, "grad_norm": 1e308, "reward_std": 1e308,
            "entropy": 1e308, "kl": 1e308, "completions/mean_length": 1e308} for i in range(12)]
    digits = [{"step": i + 1, "loss": 0.1, "reward": int("9" * 4000), "grad_norm": 0.5} for i in range(12)]
    (tmp_path / "big.jsonl").write_text("".join(json.dumps(r) + "\n" for r in big))
    (tmp_path / "digits.jsonl").write_text("".join(json.dumps(r) + "\n" for r in digits))
    for name in ("big.jsonl", "digits.jsonl"):
        d = diagnose(tmp_path / name, validate_patches=False)
        assert not d.healthy and "nan_loss" in codes(d) if name == "big.jsonl" else not d.healthy, d.findings
    for value, kind in (("abc", "str"), ([0.5], "list"), ({"a": 1}, "dict")):
        rows = [{"step": i + 1, "loss": 0.1, "reward": value, "grad_norm": 0.5} for i in range(4)]
        (tmp_path / "bad.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        with pytest.raises(UserInputError) as err:
            diagnose(tmp_path / "bad.jsonl", validate_patches=False)
        assert err.value.field == "source" and f"metric 'reward' is a {kind}" in str(err.value)
    run = workspace / "runs" / "2026-01-01-big"
    (run / "train" / "logs").mkdir(parents=True)
    write_signed_lines(run / "train" / "logs" / "progress.jsonl", [{**r, "lr": 1e-6} for r in big])
    proc = run_cli("training-status", str(run), "--plot", env={"LLM_FINETUNING_WORKSPACE": str(workspace)})
    assert "ValueError" not in proc.stderr and "unexpected" not in proc.stderr, proc.stderr
    assert (run / "progress.png").is_file()


# ---------------------------------------------------------------- issue 49: the cut is blamed only on evidence
# A log of 16 completions (per_device_train_batch_size 16, one log per step) in groups of 4, the cut ones filling
# the first groups: each log's metrics are computed from the constructed rewards as TRL computes them (the batch
# mean, its unbiased std, the share of groups whose rewards are all equal, the cut share).
CUT_BATCH, CUT_GROUP = 16, 4
CUT_SHARES = {  # the cut share of each of 8 logs
    "half, moving": [0.25, 0.75] * 4, "half, steady": [0.5] * 8,
    "three quarters, moving": [0.5, 1.0] * 4, "three quarters, steady": [0.75] * 8,
    "a quarter, moving": [0.0, 0.5] * 4,
    "almost all": [1.0, 0.9375] * 4,  # 2 completions ended over the last 4 logs: too few to tell
}


def cut_batch_row(cut: float, cut_reward: float, uncut_reward: float) -> dict:
    k = round(cut * CUT_BATCH)
    rewards = [cut_reward] * k + [uncut_reward] * (CUT_BATCH - k)
    groups = [rewards[i:i + CUT_GROUP] for i in range(0, CUT_BATCH, CUT_GROUP)]
    mean, std = statistics.fmean(rewards), statistics.stdev(rewards)
    row = {k_: v for k_, v in healthy_rows(1)[0].items() if "format_reward" not in k_}
    return {**row, "reward": mean, "reward_std": std, "rewards/correctness_reward/mean": mean,
            "rewards/correctness_reward/std": std,
            "frac_reward_zero_std": sum(max(g) == min(g) for g in groups) / len(groups),
            "completions/clipped_ratio": k / CUT_BATCH, "completions/mean_length": 18.0 + 6 * k / CUT_BATCH,
            "completions/mean_terminated_length": 18.0 if k < CUT_BATCH else 0.0}


@pytest.mark.parametrize("uncut_reward", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("cut_reward", [0.0, 1.0])
@pytest.mark.parametrize("shares", sorted(CUT_SHARES))
def test_zero_spread_is_blamed_on_the_cut_only_where_the_cut_ones_score_lower(tmp_path, shares, cut_reward,
                                                                              uncut_reward):
    """Issue 49's walk: half the completions cut, every completion at 0 (the uncut half too), was "because their
    completions are cut ... an easier task would not help". Truncation is the cause of groups scoring alike (and of
    a task reward that never pays) only where the logs say the cut ones score lower: the reward fitted on a cut
    share that moves falls as it rises; or where too few completions ended to tell, said so. Finished ones scoring
    what the cut ones score (reward_std 0), or more, or a steady share that cannot tell: the cut is not blamed."""
    cuts = CUT_SHARES[shares]
    d = diagnose_series(tmp_path, [cut_batch_row(c, cut_reward, uncut_reward) for c in cuts],
                        per_device_train_batch_size=CUT_BATCH)
    found = by_code(d, "no_reward_signal")
    causes = {found.caused_by, *found.other_causes}
    for code in ("signal_lost", "task_never_scores", "reward_never_pays"):
        for f in (f for f in d.findings if f.code == code):
            assert ("completions_truncated" in {f.caused_by, *f.other_causes}) <= ("completions_truncated" in causes)
    few = shares == "almost all"  # too few ended to tell: the cause only where nothing was paid (walk 9)
    blamed = (few and cut_reward == uncut_reward == 0) or ("moving" in shares and cut_reward < uncut_reward)
    assert ("completions_truncated" in causes) == blamed, (found.caused_by, found.other_causes, found.explanation)
    late = statistics.fmean(cuts[4:])
    if blamed and late >= 0.5:
        assert "because their completions are cut" in found.explanation, found.explanation
        assert ("too few to tell" if few else "the cut ones score lower") in found.explanation, found.explanation
        return
    assert "because their completions are cut" not in found.explanation and "would not help" not in found.explanation
    if blamed:  # a cut share under half: the truncation finding is the cause, this finding's text names none
        return
    assert "completions_truncated" not in causes
    said = {"steady": "the logs cannot tell", "alike": "scored the same as the cut ones",
            "higher": "the cut ones do not score lower"}
    kind = ("few" if few else "alike" if cut_reward == uncut_reward else "steady" if "steady" in shares
            else "higher")
    said["few"] = "too few to tell"
    if late >= 0.5 and not (few and cut_reward == uncut_reward):  # a constant reward is named, not the cut
        assert f"{late:.0%} of the completions are cut" in found.explanation and said[kind] in found.explanation, \
            found.explanation
    if cut_reward == uncut_reward == 0.0:
        assert "Every completion scores 0" in found.explanation, found.explanation


def test_half_cut_at_reward_zero_through_the_cli(tmp_path):
    """The walk's case through diagnose-run's CLI, one logged step of 8 completions: half cut, all at reward 0, so
    the 4 that ended scored 0 too: the task or the reward is named, not the cut."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(SERIES_CONFIG))
    row = {**cut_batch_row(0.5, 0.0, 0.0), "step": 1}
    proc, data = run_cli_json("diagnose-run", str(series_file(tmp_path, [row])), "--config", str(config),
                              "--no-validate")
    found = next(f for f in data["findings"] if f["code"] == "no_reward_signal")
    assert "because their completions are cut" not in found["explanation"], found
    assert "Every completion scores 0" in found["explanation"] and "scored the same as the cut ones" in \
        found["explanation"], found

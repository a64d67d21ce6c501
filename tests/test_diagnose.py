"""diagnose_run on real runs: each failure is produced with real TRL GRPOTrainer + the progress callback on the
tiny model (CPU), once per session, and the diagnosis must name it; a healthy run must not be flagged.
Environment failures (OOM, NCCL, imports) cannot happen on CPU: they use realistic log fixtures."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import json
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


def jackpot_reward(completions, answer, trainer_state=None, **kwargs):
    """closeness, but 1000x at step 4: a batch of extreme rewards (with scale_rewards=none) -> a gradient spike."""
    scale = 1000.0 if trainer_state is not None and trainer_state.global_step == 4 else 1.0
    return [scale * r for r in closeness_reward(completions, answer)]


# Each run: rewards, steps, learning rate, and any other GRPOConfig fields.
RUNS = {
    "healthy": dict(rewards=[format_reward, closeness_reward], max_steps=8, learning_rate=1e-5, save_steps=8),
    "huge_lr": dict(rewards=[format_reward, closeness_reward], max_steps=4, learning_rate=1.0, save_steps=4),
    "nan": dict(rewards=[format_reward, closeness_reward], max_steps=4, learning_rate=1e8),
    "constant": dict(rewards=[constant_reward], max_steps=3, learning_rate=1e-5),
    "length": dict(rewards=[length_reward, correctness_reward], max_steps=8, learning_rate=3e-3, max_completion_length=32),
    "truncated": dict(rewards=[format_reward, closeness_reward], max_steps=3, learning_rate=1e-5, max_completion_length=4),
    "spike": dict(rewards=[jackpot_reward], max_steps=6, learning_rate=1e-5, scale_rewards="none"),
    "flat": dict(rewards=[format_reward, closeness_reward], max_steps=20, learning_rate=1e-6, beta=0.0),
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
    """The warm-started model, built once per machine beside the tiny model (same cache, same atomic rename)."""
    from mcp_server.tiny import TINY_VERSION, cache_root

    target = cache_root() / f"tiny-qwen2-v{TINY_VERSION}-diagnose-warm-v1"
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


# ---------------------------------------------------------------- real runs
def test_healthy_run_is_not_flagged(runs):
    d = diagnose(runs["healthy"])
    assert d.healthy and problems(d) == [], d.findings
    assert d.source_kind == "run_dir" and d.steps_logged == 8 and d.last_step == 8
    assert d.config_path.endswith("train/config.yaml")


def test_huge_learning_rate(runs):
    d = diagnose(runs["huge_lr"])
    assert not d.healthy
    assert d.findings[0].code == "lr_out_of_range" and d.findings[0].severity == "error"  # the cause comes first
    assert {"kl_explosion", "entropy_collapse", "completions_truncated"} <= set(codes(d))
    lr = by_code(d, "lr_out_of_range")
    assert lr.evidence[0].value == 1.0 and lr.patch["learning_rate"] <= 1e-5
    kl = by_code(d, "kl_explosion")
    assert any(e.metric == "kl" and isinstance(e.value, float) and e.value > 5 for e in kl.evidence)
    # The run already used loss_type dapo: the DAPO patch adds only what it lacked (clip-higher, no KL, masking).
    assert by_code(d, "entropy_collapse").patch == {"epsilon_high": 0.28, "beta": 0.0, "mask_truncated_completions": True}
    assert_patches_validate(d)


def test_nan_run_names_nan_and_fp16_comes_first(runs, tmp_path):
    d = diagnose(runs["nan"])
    nan = by_code(d, "nan_loss")
    assert nan.severity == "error"
    assert any(e.metric == "grad_norm" and e.value == "nan" for e in nan.evidence)
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
    d = diagnose(runs["constant"])
    f = d.findings[0]
    assert f.code == "no_reward_signal" and f.severity == "error"
    assert "constant" in f.explanation and f.patch == {}  # no config change fixes a reward that ignores the text
    assert {e.metric for e in f.evidence} >= {"frac_reward_zero_std", "reward_std"}


def test_length_paying_reward(runs):
    d = diagnose(runs["length"])
    assert {"length_reward_correlation", "possible_reward_hacking"} <= set(codes(d))
    length = by_code(d, "length_reward_correlation")
    assert length.patch["loss_type"] == "dr_grpo"
    hacking = by_code(d, "possible_reward_hacking")
    assert "length_reward" in hacking.explanation and "correctness_reward" in hacking.explanation
    assert_patches_validate(d)


def test_tiny_max_completion_length(runs):
    d = diagnose(runs["truncated"])
    f = by_code(d, "completions_truncated")
    assert f.severity == "error"
    assert f.patch == {"max_completion_length": 8, "mask_truncated_completions": True}
    assert any(e.metric == "completions/mean_terminated_length" for e in f.evidence)
    assert_patches_validate(d)


def test_extreme_rewards_spike_the_gradient(runs):
    d = diagnose(runs["spike"])
    f = by_code(d, "grad_norm_spike")
    spike = next(e for e in f.evidence if e.metric == "grad_norm")
    assert spike.step == 5 and spike.value > 10  # the batch of step 4's rewards is logged as step 5
    assert_patches_validate(d)


def test_flat_reward(runs):
    d = diagnose(runs["flat"])
    assert problems(d) == ["reward_flat"], d.findings
    assert by_code(d, "reward_flat").patch == {"learning_rate": 2e-6}
    assert_patches_validate(d)


def test_moe_model_without_gspo(runs, tmp_path):
    from transformers import Qwen3MoeConfig

    moe = tmp_path / "tiny-moe"
    Qwen3MoeConfig(num_experts=4, num_experts_per_tok=2, hidden_size=64, num_hidden_layers=2).save_pretrained(moe)
    config = yaml.safe_load((runs["healthy"] / "train" / "config.yaml").read_text())
    d = diagnose(runs["healthy"] / "train" / "logs" / "progress.jsonl", config={**config, "model_name_or_path": str(moe)})
    f = by_code(d, "moe_without_gspo")
    assert f.severity == "warning" and f.patch["importance_sampling_level"] == "sequence"
    assert f.patch["loss_type"] == "grpo"  # GSPO as emit_grpo_config writes it (the run used dapo)
    assert_patches_validate(d)


# ---------------------------------------------------------------- other sources of the same runs
def test_trainer_state_from_a_real_checkpoint(runs, tmp_path):
    healthy = diagnose(runs["healthy"] / "checkpoints" / "checkpoint-8" / "trainer_state.json")
    assert healthy.source_kind == "trainer_state" and healthy.healthy and healthy.steps_logged == 8
    assert healthy.config_path.endswith("train/config.yaml")  # found above the checkpoint
    # A lone trainer_state.json (a run this project did not launch): no config, patches checked on the default.
    lone = shutil.copy(runs["huge_lr"] / "checkpoints" / "checkpoint-4" / "trainer_state.json", tmp_path)
    broken = diagnose(lone)
    assert {"lr_out_of_range", "kl_explosion", "entropy_collapse"} <= set(codes(broken))
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
    assert {"length_reward_correlation", "possible_reward_hacking", "lr_out_of_range"} <= set(codes(d))
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
        assert patch["vllm_enable_sleep_mode"] is True and "per_device_train_batch_size" not in patch
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
    assert d.source_kind == "log" and d.steps_logged == 4
    assert {"lr_out_of_range", "kl_explosion", "entropy_collapse"} <= set(codes(d))
    assert diagnose(runs["healthy"] / "train" / "logs" / "stdout.log").healthy


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
    proc, data = run_cli_json("diagnose-run", str(runs["healthy"]), "--no-validate")
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
    assert diagnose_run(str(runs["healthy"])).healthy


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

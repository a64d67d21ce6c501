"""What diagnosis reads, as one table (issue 48): every shape a real log takes x the findings that must follow, and
(the same assertion) every finding that must not.

Each shape is a run directory built by construction, no training: its train/logs/progress.jsonl is written by the
project's own ProgressCallback.on_log from the `logs` dict TRL 1.x's GRPOTrainer.log hands it (trl/trainer/
grpo_trainer.py: per-metric means over the logging window with NaN filtered out, None where every value was NaN;
kl only when beta != 0; completions/mean_terminated_length 0 when no completion ended; grad_norm 0 for a batch
with no advantage), then diagnosed through the core API (diagnose_run). A row asserts the exact set of findings
(code and severity): each one it names must appear, and nothing else may. Every finding code the registry declares
(diagnosis/registry.py) must be the finding of at least one row: a code without a row fails
test_every_finding_code_has_a_row.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pytest
import yaml

from mcp_server.diagnosis.diagnose import diagnose_run
from mcp_server.diagnosis.models import DiagnoseRequest
from mcp_server.diagnosis.registry import REGISTRY
from mcp_server.errors import UserInputError
from support import record_launch, write_signed, write_signed_lines

FIXTURES = Path(__file__).parent / "fixtures" / "diagnose"
NAN, INF = math.nan, math.inf

# The run's config: a healthy CPU run (support.SERIES_CONFIG's numbers), beta 0.04 so TRL logs kl.
CONFIG = {"model_name_or_path": "tiny", "learning_rate": 1e-6, "beta": 0.04, "loss_type": "dapo",
          "num_generations": 4, "per_device_train_batch_size": 8, "max_completion_length": 24, "bf16": False,
          "use_vllm": False, "gradient_checkpointing": False, "use_cpu": True, "output_dir": "checkpoints"}


def trl_logs(i: int, n: int = 12, **over) -> dict:
    """The `logs` of log call `i` (0-based) of a healthy run as TRL 1.x's GRPOTrainer.log passes them to the
    callbacks: transformers' loss, grad_norm and learning_rate, TRL's window means, epoch. `over` replaces
    metrics by TRL name (a value of None: TRL logged None; the key removed: pass `drop=[names]`)."""
    logs = {"loss": 0.05, "grad_norm": 0.5, "learning_rate": 1e-6, "num_tokens": 1000.0 * (i + 1),
            "completions/mean_length": 20.0 + i % 2, "completions/min_length": 12.0, "completions/max_length": 23.0,
            "completions/clipped_ratio": 0.0, "completions/mean_terminated_length": 20.0 + i % 2,
            "completions/min_terminated_length": 12.0, "completions/max_terminated_length": 23.0,
            "rewards/format_reward/mean": 0.9, "rewards/format_reward/std": 0.2,
            "rewards/correctness_reward/mean": 0.3 + 0.01 * i, "rewards/correctness_reward/std": 0.4,
            "reward": 0.5 + 0.01 * i, "reward_std": 0.3, "frac_reward_zero_std": 0.1, "kl": 0.01 * min(i, 1),
            "entropy": 0.8, "clip_ratio/low_mean": 0.0, "clip_ratio/low_min": 0.0, "clip_ratio/high_mean": 0.0,
            "clip_ratio/high_max": 0.0, "clip_ratio/region_mean": 0.0, "epoch": round((i + 1) / n, 4)}
    for name in over.pop("drop", ()):
        logs.pop(name, None)
    logs.update(over)
    return logs


def run_logs(n: int = 12, series: dict | None = None, drop=(), first_step: int = 1) -> list[tuple[int, dict]]:
    """(global step, logs) of `n` log calls, `series` giving a metric's value per call (a list of n values)."""
    out = []
    for i in range(n):
        over = {k: v[i] for k, v in (series or {}).items()}
        out.append((first_step + i, trl_logs(i, n, drop=drop, **over)))
    return out


def write_progress(run_dir: Path, attempts: list[list[tuple[int, dict]]]) -> None:
    """train/logs/progress.jsonl as the project's ProgressCallback writes it: one callback per attempt (a resume
    is a new training process appending to the same file), on_log on the main process."""
    from mcp_server.training.trainer.progress import ProgressCallback

    before = signal.getsignal(signal.SIGUSR1)
    try:
        for logs in attempts:
            callback = ProgressCallback(run_dir, guard="off")
            for step, entry in logs:
                state = SimpleNamespace(is_world_process_zero=True, global_step=step, epoch=entry.get("epoch"))
                callback.on_log(None, state, SimpleNamespace(), logs=dict(entry))
    finally:
        signal.signal(signal.SIGUSR1, before)


@dataclass(frozen=True)
class Shape:
    """One shape of a real log and the findings (code: severity) diagnose_run must give on it, and no other."""

    name: str
    attempts: Callable[[], list[list[tuple[int, dict]]]]  # the log calls, per training process
    findings: dict[str, str]
    config: dict = field(default_factory=dict)  # over CONFIG
    stdout: str | None = None  # train/logs/stdout.log
    tail: str = ""  # raw text appended to progress.jsonl (a line cut short)
    logs_files: dict = field(default_factory=dict)  # other files under train/logs/ (name: JSON value)
    last_step: int | None = None  # the last step diagnosis reads, when the row is about it
    says: dict = field(default_factory=dict)  # code: text its explanation holds, where the words are the point
    export: bool = False  # the log calls as a W&B CSV export (rows in the order given), not progress.jsonl
    refused: str | None = None  # diagnose_run refuses the run: text its UserInputError holds
    says_not: dict = field(default_factory=dict)  # code: texts its explanation must not hold
    files: dict = field(default_factory=dict)  # other files under the run directory (relative path: JSON value)


def one(**series) -> Callable:
    """A single attempt of 12 logs with `series` (metric: 12 values)."""
    return lambda: [run_logs(series=series)]


def ramp(a: float, b: float, n: int = 12) -> list[float]:
    return [a + (b - a) * i / (n - 1) for i in range(n)]


TRACEBACK = """Traceback (most recent call last):
  File "/venv/lib/python3.12/site-packages/trl/trainer/grpo_trainer.py", line 1180, in _calculate_rewards
    output_reward_func = reward_func(prompts=prompts, completions=completions, **reward_kwargs)
  File "/work/runs/r/train/my_rewards.py", line 12, in parse_reward
    return float(text.split("=")[1])
IndexError: list index out of range
"""

SHAPES: tuple[Shape, ...] = (
    # ---------------------------------------------------------------- healthy, in every form TRL writes it
    Shape("healthy", one(), {}),
    Shape("healthy, kl 0 at the first log (policy == reference)", one(kl=[0.0] * 2 + [0.01] * 10), {}),
    Shape("healthy, loss exactly 0 at the start (GRPO's advantage averages to 0)",
          one(loss=[0.0, 0.0, 0.0] + [0.05] * 9), {"loss_near_zero_expected": "info"}),
    Shape("beta 0: TRL logs no kl (progress.jsonl writes null)", one(), {}, config={"beta": 0.0}),
    Shape("no entropy, no clip ratios (an older TRL)",
          lambda: [run_logs(drop=("entropy", "clip_ratio/low_mean", "clip_ratio/low_min", "clip_ratio/high_mean",
                                  "clip_ratio/high_max", "clip_ratio/region_mean"))], {}),
    Shape("no per-reward metrics, only the total reward",
          lambda: [run_logs(drop=("rewards/format_reward/mean", "rewards/format_reward/std",
                                  "rewards/correctness_reward/mean", "rewards/correctness_reward/std"))], {}),
    Shape("a reward that returns None for some samples (its mean over the rest)",
          one(**{"rewards/format_reward/mean": [0.9, None] * 6}), {}),
    Shape("a batch with no advantage logs grad_norm 0, then trains on",
          one(grad_norm=[0.5, 0.5, 0.0, 0.0, 0.5, 0.5, 0.5, 0.0, 0.5, 0.5, 0.5, 0.5]), {}),
    Shape("grad_norm 0 for batches without advantage, then a real spike",
          one(grad_norm=[0.5, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 9.0, 0.5, 0.5, 0.5]),
          {"grad_norm_spike": "warning"}),
    Shape("two logs without spread or gradient: the first precedes any update, so the signal is not lost yet",
          lambda: [run_logs(2, series={"frac_reward_zero_std": [1.0, 1.0], "grad_norm": [0.0, 0.0],
                                       "reward_std": [0.0, 0.0]})],
          {"no_reward_signal": "error"}),
    Shape("no completion ended in one window: TRL logs mean_terminated_length 0",
          one(**{"completions/clipped_ratio": [0.0] * 5 + [1.0] + [0.0] * 6,
                 "completions/mean_terminated_length": [20.0] * 5 + [0.0] + [20.0] * 6}), {}),
    # ---------------------------------------------------------------- resumed runs: the later attempt is the run
    Shape("resumed from checkpoint-6: steps 7-8 logged twice, the same run",
          lambda: [run_logs(8), run_logs(6, first_step=7)], {}, last_step=12),
    Shape("a diverged attempt, resumed from checkpoint-6 with a fix: its NaN steps are re-logged finite",
          lambda: [run_logs(9, series={"loss": [0.05] * 7 + [NAN, NAN], "grad_norm": [0.5] * 7 + [NAN, NAN]}),
                   run_logs(6, first_step=7)], {}, last_step=12),
    Shape("a diverged attempt, resumed from checkpoint-6, still live at step 8: the old steps 9-11 are gone",
          lambda: [run_logs(11, series={"loss": [0.05] * 8 + [NAN] * 3, "grad_norm": [0.5] * 8 + [NAN] * 3}),
                   run_logs(2, first_step=7)], {}, last_step=8),
    Shape("a resume that re-logs steps without a metric the earlier attempt logged there (kl, beta 0 since)",
          lambda: [run_logs(8, series={"kl": [0.0] + [0.01] * 5 + [9.0, 9.0]}),
                   run_logs(6, first_step=7, drop=("kl",))],
          {"config_not_the_runs": "warning"}, config={"beta": 0.0, "force_kl": True}, last_step=12),
    Shape("a resume whose checkpoint failed to load: the second attempt starts over at step 1",
          lambda: [run_logs(9, series={"loss": [0.05] * 7 + [NAN, NAN]}), run_logs(12)], {}, last_step=12),
    Shape("evaluation logs (eval_* only) at the steps the Trainer evaluates: not training steps",
          lambda: [[x for s, logs in run_logs(12) for x in ([(s, logs)] + ([(s, {
              "eval_loss": NAN, "eval_reward": 0.0, "eval_rewards/correctness_reward/mean": None, "epoch":
              logs["epoch"]})] if s % 6 == 0 else []))]], {}, last_step=12),
    # ---------------------------------------------------------------- out of order, cut short, empty
    Shape("an out-of-order W&B CSV export (rows shuffled): read by step",
          lambda: [[(s, trl_logs(s - 1, 12)) for s in (3, 1, 2, 6, 4, 5, 9, 7, 8, 12, 10, 11)]],
          {}, last_step=12, export=True),
    Shape("an out-of-order export of a run that diverged at its last steps: the divergence is at the end",
          lambda: [[(s, trl_logs(s - 1, 12, loss=NAN if s > 10 else 0.05)) for s in (12, 11, 10, 9, 8, 7, 6, 5, 4,
                                                                                    3, 2, 1)]],
          {"nan_loss": "error"}, last_step=12, export=True),
    Shape("a live run's last line half-written", one(), {}, tail='{"step": 13, "loss": 0.0', last_step=12),
    Shape("a half-written last line after a divergence: the divergence is still read",
          one(loss=[0.05] * 10 + [NAN, NAN], grad_norm=[0.5] * 10 + [NAN, NAN]),
          {"nan_loss": "error"}, tail='{"step": 13, "lo'),
    Shape("an empty progress log with a crash in stdout: the crash", lambda: [[]], {"import_error": "error"},
          stdout=(FIXTURES / "import_error.log").read_text()),
    Shape("an empty progress log and no stdout log: refused, not healthy", lambda: [[]], {},
          refused="no logged training step"),
    # ---------------------------------------------------------------- NaN and infinity
    Shape("loss NaN from step 9", one(loss=[0.05] * 8 + [NAN] * 4), {"nan_loss": "error"}),
    Shape("grad_norm inf at one step", one(grad_norm=[0.5] * 6 + [INF] + [0.5] * 5), {"nan_loss": "error"}),
    Shape("kl Infinity", one(kl=[0.0] + [0.01] * 9 + [INF, INF]), {"kl_explosion": "error"}),
    Shape("every reward returns None: TRL logs reward and each rewards/<f>/mean as null",
          one(reward=[None] * 12, reward_std=[None] * 12, **{
              "rewards/format_reward/mean": [None] * 12, "rewards/format_reward/std": [None] * 12,
              "rewards/correctness_reward/mean": [None] * 12, "rewards/correctness_reward/std": [None] * 12,
              "frac_reward_zero_std": [1.0] * 12, "grad_norm": [0.0] * 12}),
          {"reward_returns_none": "error", "signal_lost": "error", "no_reward_signal": "error"},
          says={"reward_returns_none": "no completion is scored", "signal_lost": "no reward function scored"}),
    Shape("one reward returns None for every sample, the other trains",
          one(**{"rewards/format_reward/mean": [None] * 12, "rewards/format_reward/std": [None] * 12}),
          {"reward_returns_none": "error"}, says={"reward_returns_none": "the remaining rewards train alone"}),
    # ---------------------------------------------------------------- every finding, from its metrics
    Shape("the trainer ended where it began (train-summary at the begin step)", lambda: [run_logs(2)],
          {"no_steps_trained": "error"},
          logs_files={"train-begin.json": {"global_step": 0, "max_steps": 0}, "train-summary.json": {"step": 0}}),
    Shape("kl logged although the config says beta 0", one(), {"config_not_the_runs": "warning"},
          config={"beta": 0.0, "force_kl": True}),
    Shape("a reward function raised (its traceback in stdout)", one(), {"reward_function_error": "error"},
          stdout=TRACEBACK),
    Shape("CUDA out of memory in stdout", one(), {"cuda_out_of_memory": "error"},
          stdout=(FIXTURES / "cuda_oom.log").read_text()),
    Shape("vLLM out of memory in stdout", one(), {"vllm_out_of_memory": "error"},
          stdout=(FIXTURES / "vllm_oom_cache.log").read_text()),
    Shape("NCCL watchdog timeout in stdout", one(), {"nccl_timeout": "error"},
          stdout=(FIXTURES / "nccl_timeout.log").read_text()),
    Shape("disk full while saving", one(), {"disk_full": "error"},
          stdout="Saving model checkpoint to checkpoints/checkpoint-10\nOSError: [Errno 28] No space left on "
                 "device\n"),
    Shape("correctness exactly 0 from the first log",
          one(**{"rewards/correctness_reward/mean": [0.0] * 12, "rewards/correctness_reward/std": [0.0] * 12,
                 "frac_reward_zero_std": [1.0] * 12, "reward": [0.9] * 12, "reward_std": [0.02] * 12}),
          {"task_never_scores": "error", "no_reward_signal": "error"}),
    Shape("TRL < 0.17's reward names (rewards/<func>, no /mean): a format reward exactly 0 from the first log",
          lambda: [run_logs(series={"rewards/format_reward": [0.0] * 12,
                                    "rewards/correctness_reward": [0.3 + 0.01 * i for i in range(12)]},
                            drop=[f"rewards/{r}_reward/{s}" for r in ("format", "correctness")
                                  for s in ("mean", "std")])],
          {"reward_never_pays": "warning"}),
    Shape("a format reward exactly 0 from the first log",
          one(**{"rewards/format_reward/mean": [0.0] * 12, "rewards/format_reward/std": [0.0] * 12}),
          {"reward_never_pays": "warning"}),
    Shape("no completion ends",
          one(**{"completions/clipped_ratio": [1.0] * 12, "completions/mean_terminated_length": [0.0] * 12,
                 "completions/mean_length": [24.0] * 12}),
          {"completions_never_terminate": "error"}),
    # Issue 49's walk: step 2 of a LoRA run at 5e-4 with 12-token completions, whose base samples the inspection
    # found 92% cut already: the cut is no symptom of an update "ranked above" (nothing is), and the rate's note
    # does not call a run with an error finding healthy.
    Shape("no completion ends by step 2, the base samples already cut (inspection)",
          lambda: [run_logs(2, series={"completions/clipped_ratio": [0.92, 1.0],
                                       "completions/mean_terminated_length": [3.0, 0.0],
                                       "completions/mean_length": [11.8, 12.0]})],
          {"completions_never_terminate": "error", "lr_out_of_range": "info"},
          config={"use_peft": True, "learning_rate": 5e-4, "max_completion_length": 12},
          files={"inspection/samples.meta.json": {"lengths": {"truncated_share": 0.9219, "max_new_tokens": 12}}},
          says={"completions_never_terminate": "already 92% cut at max_new_tokens=12"},
          says_not={"completions_never_terminate": ["ranked above", "symptom of the update"],
                    "lr_out_of_range": ["healthy"]}),
    Shape("no completion ends after some did, nothing else logged wrong",
          lambda: [run_logs(4, series={"completions/clipped_ratio": [0.5, 1.0, 1.0, 1.0],
                                       "completions/mean_terminated_length": [6.0, 0.0, 0.0, 0.0]})],
          {"completions_never_terminate": "error"},
          says={"completions_never_terminate": "nothing else logged"},
          says_not={"completions_never_terminate": ["ranked above"]}),
    Shape("completions cut more and more", one(**{"completions/clipped_ratio": ramp(0.0, 0.7)}),
          {"completions_truncated": "error"}),
    Shape("completion length collapses", one(**{"completions/mean_length": ramp(20.0, 3.0)}),
          {"completion_length_collapse": "warning"}),
    Shape("an agentic run's tool calls collapse", one(**{"tools/call_frequency": ramp(2.0, 0.1)}),
          {"tool_calls_collapsing": "error"}),
    Shape("an agentic run's tool failures rise", one(**{"tools/failure_frequency": ramp(0.1, 0.9)}),
          {"tool_failures_rising": "error"}),
    Shape("vLLM's log-probs differ from the trainer's",
          one(**{"sampling/sampling_logp_difference/mean": [0.6] * 12,
                 "sampling/sampling_logp_difference/max": [2.0] * 12}),
          {"sampler_mismatch": "error"}, config={"use_vllm": True}),
    Shape("a third of the tokens clipped", one(**{"clip_ratio/region_mean": [0.35] * 12}),
          {"importance_ratio_blowup": "error"}),
    Shape("the MoE router's aux loss rises", one(aux_loss=ramp(0.01, 0.1)),
          {"moe_router_instability": "warning"}),
    Shape("a mixture-of-experts model at token level", one(), {"moe_without_gspo": "warning"},
          config={"model_name_or_path": "Qwen/Qwen3-30B-A3B"}),
    Shape("fp16 on a run that is healthy so far", one(), {"fp16_divergence": "warning"}, config={"fp16": True}),
    Shape("a learning rate above the range on a healthy run", one(), {"lr_out_of_range": "info"},
          config={"learning_rate": 3e-5}),
    Shape("entropy rises into gibberish", one(entropy=ramp(0.8, 4.0)), {"entropy_rising": "error"}),
    Shape("entropy falls", one(entropy=ramp(0.8, 0.2)), {"entropy_collapse": "warning"}),
    # a reward that rises while KL runs away is the hacking rule's signal too
    Shape("kl grows past its warning bound", one(kl=[0.0] + ramp(0.1, 2.0, 11)),
          {"kl_explosion": "warning", "possible_reward_hacking": "warning"}),
    Shape("most groups without spread", one(frac_reward_zero_std=[0.95] * 12), {"no_reward_signal": "error"}),
    Shape("the reward falls", one(reward=ramp(0.8, 0.2), **{"rewards/correctness_reward/mean": ramp(0.5, 0.1)}),
          {"reward_falling": "warning"}),
    Shape("the reward is flat for 24 logs", lambda: [run_logs(24, series={"reward": [0.5, 0.52] * 12})],
          {"reward_flat": "warning"}),
    Shape("the reward pays for length",
          one(**{"completions/mean_length": ramp(10.0, 22.0), "rewards/format_reward/mean": ramp(0.3, 0.9),
                 "rewards/correctness_reward/mean": [0.3] * 12}),
          {"length_reward_correlation": "warning", "possible_reward_hacking": "warning"}),
    Shape("a format reward climbs while correctness falls",
          one(**{"rewards/format_reward/mean": ramp(0.2, 1.0), "rewards/correctness_reward/mean": ramp(0.5, 0.2),
                 "reward": [0.7] * 12}),
          {"possible_reward_hacking": "warning", "reward_falling": "warning"}),
)


def build(shape: Shape, root: Path) -> Path:
    run = root / "runs" / "r"
    (run / "train" / "logs").mkdir(parents=True)
    config = {**CONFIG, **shape.config}
    force_kl = config.pop("force_kl", False)
    (run / "train" / "config.yaml").write_text(yaml.safe_dump(config))
    attempts = shape.attempts()
    if config.get("beta") == 0 and not force_kl:  # TRL computes and logs kl only when beta != 0
        attempts = [[(s, {k: v for k, v in logs.items() if k != "kl"}) for s, logs in a] for a in attempts]
    if shape.export:  # W&B's "Export CSV": "<run> - train/<metric>" columns, train/global_step
        rows = [{"train/global_step": s, **{f"r - train/{k}": v for k, v in logs.items()}} for a in attempts
                for s, logs in a]
        names = list(dict.fromkeys(k for r in rows for k in r))
        with open(root / "export.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, names)
            writer.writeheader()
            writer.writerows(rows)
        attempts = []
    write_progress(run, attempts)
    progress = run / "train" / "logs" / "progress.jsonl"
    with open(progress, "a", encoding="utf-8") as handle:
        handle.write(shape.tail)
    if shape.stdout is not None:
        (run / "train" / "logs" / "stdout.log").write_text(shape.stdout)
    for name, value in shape.logs_files.items():
        (run / "train" / "logs" / name).write_text(json.dumps(value))
    for name, value in shape.files.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(json.dumps(value))
    return run


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_a_log_shape_gets_exactly_its_findings(shape, tmp_path, workspace):
    run = build(shape, tmp_path)
    source = tmp_path / "export.csv" if shape.export else run
    request = DiagnoseRequest(source=str(source), config_path=str(run / "train" / "config.yaml") if shape.export
                              else None, validate_patches=False)
    if shape.refused:
        with pytest.raises(UserInputError, match=shape.refused):
            diagnose_run(request)
        return
    d = diagnose_run(request)
    found = {f.code: f.severity for f in d.findings}
    assert found == shape.findings, [(f.code, f.severity, f.explanation[:160]) for f in d.findings]
    assert d.healthy == (not any(s != "info" for s in shape.findings.values()))
    if shape.last_step is not None:
        assert d.last_step == shape.last_step
    for code, text in shape.says.items():
        assert text in next(f.explanation for f in d.findings if f.code == code)
    for code, texts in shape.says_not.items():
        said = next(f.explanation for f in d.findings if f.code == code)
        assert not [t for t in texts if t in said], said


def test_every_finding_code_has_a_row():
    """A finding the registry declares that no row of the table produces is untested here: add its shape."""
    covered = {code for shape in SHAPES for code in shape.findings}
    assert not sorted(set(REGISTRY) - covered), "finding codes without a row in SHAPES"
    assert not sorted(covered - set(REGISTRY)), "rows naming codes the registry does not declare"


# ---------------------------------------------------------------- the m3 audit (issue 48): how the inputs are found
FROM_THE_RUN = [s for s in SHAPES if (s.config or s.stdout) and not (s.export or s.refused or s.logs_files)]


@pytest.mark.parametrize("shape", FROM_THE_RUN, ids=[s.name for s in FROM_THE_RUN])
def test_a_runs_progress_file_given_alone_is_read_with_the_runs_config_and_log(shape, tmp_path, workspace):
    """diagnose_run given train/logs/progress.jsonl (not the run folder): the run's config, request and stdout log
    are found above it, and the findings are the run folder's (the config rules and the log's findings with them)."""
    run = build(shape, tmp_path)
    d = diagnose_run(DiagnoseRequest(source=str(run / "train" / "logs" / "progress.jsonl"), validate_patches=False))
    assert {f.code: f.severity for f in d.findings} == shape.findings, [(f.code, f.explanation[:160])
                                                                         for f in d.findings]


def test_a_stdout_log_over_the_read_limit_is_read_to_its_end(tmp_path, workspace):
    """A stdout log larger than LOG_READ_LIMIT is read by its head and its tail: a CUDA OOM at its end (where a
    long run's OOM is) is found."""
    from mcp_server.diagnosis.metrics import LOG_READ_LIMIT

    line = "{'loss': 0.05, 'grad_norm': 0.5, 'learning_rate': 1e-06, 'epoch': 0.5}\n"
    filler = line * (LOG_READ_LIMIT // len(line) + 1)
    shape = Shape("a long log ending in a CUDA OOM", one(), {"cuda_out_of_memory": "error"},
                  stdout=filler + (FIXTURES / "cuda_oom.log").read_text())
    run = build(shape, tmp_path)
    assert (run / "train" / "logs" / "stdout.log").stat().st_size > LOG_READ_LIMIT
    d = diagnose_run(DiagnoseRequest(source=str(run), validate_patches=False))
    assert {f.code: f.severity for f in d.findings} == shape.findings, [(f.code, f.explanation[:160])
                                                                         for f in d.findings]


def test_a_trl_output_folder_is_read_from_its_latest_checkpoint_by_step(tmp_path):
    """A TRL output_dir with checkpoint-2 and checkpoint-10 (checkpoint-10 sorts first as text): diagnosis reads
    checkpoint-10's trainer_state.json, the steps up to 10."""
    out = tmp_path / "grpo-out"
    for step in (2, 10):
        folder = out / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        history = [{**trl_logs(i, 10), "step": i + 1} for i in range(step)]
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": 10,
                                                               "log_history": history}))
    d = diagnose_run(DiagnoseRequest(source=str(out), validate_patches=False))
    assert d.last_step == 10, (d.last_step, d.source_kind)


# ---------------------------------------------------------------- the live guard judges the run (issue 49)
DEAD = dict(reward=0.0, reward_std=0.0, frac_reward_zero_std=1.0, grad_norm=0.0, loss=0.0,
            **{"rewards/correctness_reward/mean": 0.0, "rewards/correctness_reward/std": 0.0,
               "rewards/format_reward/mean": 0.0, "rewards/format_reward/std": 0.0})


def guarded_launch(run_dir: Path, steps: list[int], begin: int, mode: str, dead: bool = True) -> int:
    """One training process as the Trainer drives the project's ProgressCallback: on_train_begin at the step it
    resumes from, on_log per step (TRL's logs), the end-of-training summary, on_train_end; then write_outcome as
    the emitted train.py calls it. Returns the step it ended at."""
    from mcp_server.training.trainer.progress import ProgressCallback, write_outcome

    before = signal.getsignal(signal.SIGUSR1)
    try:
        callback = ProgressCallback(run_dir, guard=mode)
        args = SimpleNamespace(to_dict=lambda: {}, world_size=1, output_dir=str(run_dir / "checkpoints"),
                               local_process_index=0, device=None)
        state = SimpleNamespace(is_world_process_zero=True, global_step=begin, max_steps=4, epoch=0.0)
        control = SimpleNamespace(should_training_stop=False, should_save=False)
        callback.on_train_begin(args, state, control)
        for step in steps:
            state.global_step = step
            callback.on_log(args, state, control, logs=trl_logs(step - 1, 4, **(DEAD if dead else {})))
            if control.should_training_stop:
                break
        callback.on_log(args, state, control, logs={"train_runtime": 1.0, "train_loss": 0.0, "epoch": 1.0})
        callback.on_train_end(args, state, control)
        write_outcome(run_dir, "succeeded", global_step=state.global_step)
    finally:
        signal.signal(signal.SIGUSR1, before)
    return state.global_step


@pytest.mark.parametrize("launches, mode, dead, state, warned", [
    ([[1, 2], [3, 4]], "warn", True, "succeeded", True),  # the walk: stopped at 2, resumed to 4
    ([[1, 2], [3, 4]], "stop", True, "failed", False),
    ([[1, 2]], "warn", True, "succeeded", True),  # a 2-step run: its one update after the first log
    ([[1, 2]], "stop", True, "failed", False),
    ([[1], [2]], "warn", True, "succeeded", True),  # two launches of one log each
    ([[1]], "warn", True, "succeeded", False),  # 1 step: no update after the first log to judge
    ([[1, 2], [3, 4]], "warn", False, "succeeded", False),  # healthy
])
def test_the_live_guard_judges_the_run_across_resumes(tmp_path, workspace, launches, mode, dead, state, warned):
    """Issue 49: smollm2, 4 steps in two launches of 2 (stopped at 2, resumed to 4), every step reward 0, zero
    spread and grad_norm 0, was recorded "succeeded" with no warning and no guard.json: the guard judged each
    launch's own 2 lines, one after its first. It judges the run: a resumed launch's window starts with the run's
    signed lines, the first line that precedes an update is the run's; at its last look (training ended) every
    logged update after the first without signal is a lost signal however few. `warn`: named in outcome.json's
    warnings; `stop`: failed."""
    run_dir = workspace / "runs" / "resumed"
    (run_dir / "train").mkdir(parents=True)
    (run_dir / "train" / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    begin = 0
    for steps in launches:
        begin = guarded_launch(run_dir, steps, begin, mode, dead)
    outcome = json.loads((run_dir / "train" / "logs" / "outcome.json").read_text())
    assert outcome["state"] == state, outcome
    assert any("signal_lost" in w for w in outcome.get("warnings", [])) == warned, outcome
    if state == "failed":
        assert "signal_lost" in outcome["error"]
    if dead and len(launches) > 1 and mode == "stop":  # stopped at the first log of the resumed launch
        assert begin == launches[1][0]


@pytest.mark.slow
def test_a_real_resumed_run_that_learned_nothing_is_named_in_its_outcome(tmp_path, workspace, tiny_model):
    """The same end to end: TRL's GRPOTrainer on the tiny model with a reward that ignores the text (every group at
    zero spread, grad_norm 0), 2 steps, then a resume to 4 from checkpoint-2 (a new trainer and callback, as a
    resumed train.py), each ending as train.py ends. Before: both outcomes "succeeded", no warning."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from mcp_server.tiny import make_task
    from mcp_server.training.trainer.progress import ProgressCallback, write_outcome

    run_dir = workspace / "runs" / "real-resumed"
    (run_dir / "train" / "logs").mkdir(parents=True)
    values = {"per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 8, "logging_steps": 1,
              "beta": 0.0, "seed": 0, "bf16": False, "use_vllm": False, "learning_rate": 1e-5, "save_steps": 2,
              "output_dir": str(run_dir / "checkpoints"), "report_to": "none", "use_cpu": True, "disable_tqdm": True}
    (run_dir / "train" / "config.yaml").write_text(yaml.safe_dump({**values, "model_name_or_path": str(tiny_model)}))
    (run_dir / "train" / "request.json").write_text(json.dumps({"model": str(tiny_model), "gpu": "cpu",
                                                                "num_gpus": 1, "guard": "warn"}))

    def constant(completions, **columns):
        return [1.0] * len(completions)

    outcomes = []
    before = signal.getsignal(signal.SIGUSR1)
    try:
        for steps, resume in ((2, None), (4, str(run_dir / "checkpoints" / "checkpoint-2"))):
            trainer = GRPOTrainer(model=str(tiny_model), reward_funcs=[constant],
                                  args=GRPOConfig(**values, max_steps=steps),
                                  train_dataset=Dataset.from_list(make_task(16)),
                                  callbacks=[ProgressCallback(run_dir)])
            trainer.train(resume_from_checkpoint=resume)
            write_outcome(run_dir, "succeeded", global_step=trainer.state.global_step)
            outcomes.append(json.loads((run_dir / "train" / "logs" / "outcome.json").read_text()))
    finally:
        signal.signal(signal.SIGUSR1, before)
    assert [o["global_step"] for o in outcomes] == [2, 4]
    for outcome in outcomes:  # the 2-step launch (its one update after the first log) and the resumed run
        assert outcome["state"] == "succeeded" and any("signal_lost" in w for w in outcome.get("warnings", [])), \
            outcome


# ---------------------------------------------------------------- the m4 audit (issue 48): which inputs are read
def _run_dir(root: Path, progress: list[dict] | None = None) -> Path:
    """A run directory with CONFIG and, when given, `progress` as its train/logs/progress.jsonl (raw lines)."""
    run = root / "runs" / "r"
    (run / "train" / "logs").mkdir(parents=True)
    (run / "train" / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    if progress is not None:
        write_signed_lines(run / "train" / "logs" / "progress.jsonl", progress)  # as the trainer signs them
    return run


def _rows(n: int, first: int = 1, **over) -> list[dict]:
    return [{"step": first + i, **trl_logs(i, n), **over} for i in range(n)]


def test_an_infinity_between_the_sampled_lines_of_a_long_progress_log_is_found(tmp_path, workspace):
    """A progress log over PROGRESS_EXACT_BYTES is sampled; a line holding Infinity (or NaN) is read wherever it
    is (m4-diagnosis-infinity-not-sampled), and the steps logged count every line, the last step the log's last."""
    from mcp_server.diagnosis.metrics import PROGRESS_EXACT_BYTES

    def line(step: int, loss: float = 0.05) -> dict:
        return {"step": step, "loss": loss, "grad_norm": 0.5, "reward": 0.5, "reward_std": 0.3}

    n = PROGRESS_EXACT_BYTES // len(json.dumps(line(100000)) + ', "mac": "' + "0" * 64 + '"\n') + 2000
    run = _run_dir(tmp_path)
    for bad, value in ((n // 3 + 1, INF), (n // 3 + 2, NAN)):
        write_signed_lines(run / "train" / "logs" / "progress.jsonl",
                           [line(s, value if s == bad else 0.05) for s in range(1, n + 1)])
        d = diagnose_run(DiagnoseRequest(source=str(run), validate_patches=False))
        assert "nan_loss" in {f.code for f in d.findings}, (value, [f.code for f in d.findings])
        assert (d.steps_logged, d.last_step) == (n, n), (d.steps_logged, d.last_step)


def test_an_export_without_a_step_column_numbers_its_rows_from_one(tmp_path, workspace):
    """A CSV export with no step column: row k is step k (m4-diagnosis-stepless-from-zero)."""
    rows = [trl_logs(i) for i in range(12)]
    path = tmp_path / "export.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    d = diagnose_run(DiagnoseRequest(source=str(path), validate_patches=False))
    assert (d.steps_logged, d.last_step, d.source_kind) == (12, 12, "csv"), d


def test_a_config_given_with_a_run_directory_is_the_one_judged(tmp_path, workspace):
    """diagnose_run(run_dir, config_path=other): `other` is judged, not the run's own train/config.yaml
    (m4-diagnosis-given-config-overridden); its sidecar request is the one read beside it."""
    run = _run_dir(tmp_path, _rows(12))
    other = tmp_path / "other" / "config.yaml"
    other.parent.mkdir()
    other.write_text(yaml.safe_dump({**CONFIG, "learning_rate": 1e-3}))
    own = diagnose_run(DiagnoseRequest(source=str(run), validate_patches=False))
    d = diagnose_run(DiagnoseRequest(source=str(run), config_path=str(other), validate_patches=False))
    assert d.config_path == str(other.resolve()) and own.config_path == str(run / "train" / "config.yaml"), d
    assert "lr_out_of_range" in {f.code for f in d.findings} - {f.code for f in own.findings}, d.findings


def test_a_log_given_with_a_run_directory_is_the_one_read(tmp_path, workspace):
    """diagnose_run(run_dir, log_path=other): `other` is read, not the run's train/logs/stdout.log."""
    run = _run_dir(tmp_path, _rows(12))
    (run / "train" / "logs" / "stdout.log").write_text("all fine\n")
    other = tmp_path / "other.log"
    other.write_text((FIXTURES / "cuda_oom.log").read_text())
    d = diagnose_run(DiagnoseRequest(source=str(run), log_path=str(other), validate_patches=False))
    assert d.log_path == str(other.resolve()) and "cuda_out_of_memory" in {f.code for f in d.findings}, d


@pytest.mark.parametrize("where", ["checkpoints", "."])
def test_a_folder_whose_only_metrics_are_its_checkpoints_is_read_from_the_latest_by_step(tmp_path, workspace, where):
    """A TRL output folder (no run of this project) without a progress log: the trainer_state.json of its latest
    checkpoint by step, under checkpoints/ (m4-diagnosis-checkpoints-unsearched) or in the folder itself;
    checkpoint-10 after checkpoint-9."""
    run = tmp_path / "trl-output"
    for step in (9, 10):
        folder = run / where / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": _rows(step)}))
    d = diagnose_run(DiagnoseRequest(source=str(run), validate_patches=False))
    assert (d.last_step, Path(d.metrics_path).parent.name) == (10, "checkpoint-10"), d


UNSIGNED_STAND_INS = {  # where a run's metrics could be read from, other than its signed progress log
    "checkpoints/checkpoint-N/trainer_state.json": lambda run, rows: _state(run / "checkpoints" / "checkpoint-4", rows),
    "checkpoint-N/trainer_state.json": lambda run, rows: _state(run / "checkpoint-4", rows),
    "trainer_state.json": lambda run, rows: _state(run, rows),
    "progress.jsonl beside train/": lambda run, rows: (run / "progress.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows)),
    "printed in stdout.log": lambda run, rows: (run / "train" / "logs" / "stdout.log").write_text(
        "".join(str({k: str(v) for k, v in r.items() if k != "step"}) + "\n" for r in rows)),
}


def _state(folder: Path, rows: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": len(rows), "log_history": rows}))


@pytest.mark.parametrize("signed", [False, True], ids=["progress-log-lost", "progress-log-kept"])
@pytest.mark.parametrize("where", list(UNSIGNED_STAND_INS))
def test_a_runs_metrics_are_only_its_signed_progress_log(tmp_path, workspace, where, signed):
    """A run of this project (train/config.yaml) whose progress log was moved away, with KL 777 written into a
    stand-in (a checkpoint's trainer_state.json, a copy, printed lines): diagnosis and status read no metric from it
    and say why (issue 48, round 10 F1: status raised kl_explosion at 777 and diagnosis proposed patches). With the
    signed log kept, its steps are what is read."""
    run = _run_dir(tmp_path, _rows(6) if signed else None)
    UNSIGNED_STAND_INS[where](run, _rows(4, kl=777.0, reward=99.0))
    (run / "train" / "logs" / "stdout.log").touch()
    d = diagnose_run(DiagnoseRequest(source=str(run), validate_patches=False))
    assert "kl_explosion" not in {f.code for f in d.findings}, d.findings
    if signed:
        assert (d.last_step, d.metrics_path) == (6, str(run / "train" / "logs" / "progress.jsonl")), d
    else:
        assert (d.steps_logged, d.metrics_path) == (0, None), d
        assert "progress.jsonl is missing" in d.summary, d.summary


def test_a_runs_progress_log_is_read_before_a_trainer_state_beside_it(tmp_path, workspace):
    """A run directory holding its progress log and a trainer_state.json (copied in): the progress log is the
    run's metrics (it has every attempt; the state file only its save's)."""
    run = _run_dir(tmp_path, _rows(12))
    (run / "trainer_state.json").write_text(json.dumps({"global_step": 3, "log_history": _rows(3)}))
    d = diagnose_run(DiagnoseRequest(source=str(run), validate_patches=False))
    assert (d.metrics_path, d.last_step) == (str(run / "train" / "logs" / "progress.jsonl"), 12), d


def test_summary_and_eval_rows_are_no_logged_steps(tmp_path, workspace):
    """A trainer_state.json whose log_history ends with an evaluation (at a step of its own: eval_steps apart from
    logging_steps) and the train summary (train_runtime): neither is a training step."""
    history = [{**r, "epoch": 1.0} for r in _rows(12)]
    history += [{"step": 13, "eval_loss": 9.0, "eval/reward": 0.1, "epoch": 1.0},
                {"step": 14, "train_runtime": 60.0, "train_loss": 0.05, "total_flos": 1.0, "epoch": 1.0}]
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 12, "log_history": history}))
    d = diagnose_run(DiagnoseRequest(source=str(path), validate_patches=False))
    assert (d.steps_logged, d.last_step) == (12, 12), d


@pytest.mark.parametrize("name, steps", [("progress.jsonl", 4), ("metrics.jsonl", 6)])
def test_only_a_progress_log_reads_a_lower_step_as_a_resume(tmp_path, workspace, name, steps):
    """Steps 1-6 then 3-4: in progress.jsonl a resume from checkpoint-2 (steps 5-6 of the earlier attempt are
    gone); in another export an unordered log whose every step counts (the later value of a step wins: the NaN
    losses first logged at steps 3-4 are re-logged finite)."""
    path = tmp_path / name
    first = [{**r, "loss": NAN if r["step"] in (3, 4) else r["loss"]} for r in _rows(6)]
    path.write_text("".join(json.dumps(r) + "\n" for r in [*first, *_rows(2, first=3, loss=0.07)]))
    d = diagnose_run(DiagnoseRequest(source=str(path), validate_patches=False))
    assert (d.steps_logged, d.last_step) == (steps, steps), d
    assert "nan_loss" not in {f.code for f in d.findings}, d.findings


def test_a_run_with_an_empty_progress_log_and_no_stdout_is_refused(tmp_path, workspace):
    """Nothing logged and no log to read: refused naming the file, never 'healthy'."""
    run = _run_dir(tmp_path, [])
    with pytest.raises(UserInputError, match="holds no logged training step"):
        diagnose_run(DiagnoseRequest(source=str(run), validate_patches=False))


# ---------------------------------------------------------------- the m5 audit (issue 48): names, steps, re-reads
def _progress_rows(n: int, length_key: str, step_key: str = "step", every: int = 1) -> list[dict]:
    """`n` logged steps of a run whose completion length collapses (20 -> 3), its length under `length_key`."""
    lengths = ramp(20.0, 3.0, n)
    return [{step_key: every * (i + 1), "loss": 0.05, "grad_norm": 0.5, "learning_rate": 1e-6,
             "reward": 0.5 + 0.01 * i, "reward_std": 0.3, length_key: lengths[i]} for i in range(n)]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _findings(path: Path) -> dict:
    d = diagnose_run(DiagnoseRequest(source=str(path), validate_patches=False))
    return {f.code: (f.severity, f.onset) for f in d.findings}


def test_a_progress_logs_completion_mean_length_gives_the_length_findings(tmp_path, workspace):
    """progress.jsonl's own name completion_mean_length is TRL's completions/mean_length: a collapse logged under
    it gives the same findings (completion_length_collapse among them) as the same log under TRL's name."""
    ours = _findings(_write_jsonl(tmp_path / "ours" / "progress.jsonl", _progress_rows(12, "completion_mean_length")))
    trl = _findings(_write_jsonl(tmp_path / "trl" / "progress.jsonl", _progress_rows(12, "completions/mean_length")))
    assert "completion_length_collapse" in trl, trl
    assert ours == trl, (ours, trl)


def test_a_trackio_export_reads_its_steps_from_train_global_step(tmp_path, workspace):
    """A Trackio CSV export: steps in train/global_step (every 10), no step column. The findings and last_step
    name the logged steps (10..120), not row numbers."""
    rows = _progress_rows(12, "completions/mean_length", step_key="train/global_step", every=10)
    path = tmp_path / "trackio.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    d = diagnose_run(DiagnoseRequest(source=str(path), validate_patches=False))
    assert d.last_step == 120, d.last_step
    steps = {f.code: f.onset for f in d.findings}
    assert steps.get("completion_length_collapse") in {10 * k for k in range(1, 13)}, steps


def test_a_progress_log_read_again_after_it_grows_gives_the_new_steps(tmp_path, workspace):
    """The same progress.jsonl diagnosed twice in one process, grown in between (a live run): the second reading
    holds the steps logged since."""
    path = _write_jsonl(tmp_path / "live" / "progress.jsonl", _progress_rows(12, "completions/mean_length")[:6])
    first = diagnose_run(DiagnoseRequest(source=str(path), validate_patches=False))
    assert first.last_step == 6, first.last_step
    with path.open("a") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in _progress_rows(12, "completions/mean_length")[6:]))
    again = diagnose_run(DiagnoseRequest(source=str(path), validate_patches=False))
    assert (again.last_step, again.steps_logged) == (12, 12), (again.last_step, again.steps_logged)


# ---------------------------------------------------------------- the k6 audit (issue 48): names, paths, bounds
# Each row kills one or more k6-diagnosis-* mutations in bench/mutate.py: inputs constructed, read through
# diagnose_run (or metrics.load_run, the reader diagnose_run and training_status share, where what is read is the
# point), nothing trains.
def _load(source, **kw):
    from mcp_server.diagnosis.metrics import load_run

    return load_run(source, **kw)


def test_a_wandb_panel_export_of_a_run_whose_name_holds_a_dash_reads_trls_names(tmp_path, workspace):
    """A W&B panel export of the run "lr - 1e-6 - seed 2": its columns read "lr - 1e-6 - seed 2 - train/reward";
    the metric is the part after the LAST " - " (k6-diagnosis-wandb-run-name-dash)."""
    path = tmp_path / "wandb.csv"
    name = "lr - 1e-6 - seed 2"
    rows = [{"Step": i + 1, f"{name} - train/reward": 0.5 + 0.01 * i, f"{name} - train/loss": 0.05}
            for i in range(12)]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    run = _load(path)
    assert run.metric_names() == {"reward", "loss"}, run.metric_names()
    assert run.series("reward")[-1] == (12, pytest.approx(0.61)), run.series("reward")[-1]


def test_a_total_reward_logged_null_with_its_functions_is_a_logged_nan(tmp_path, workspace):
    """TRL logs reward: null when every reward function returned None for every sample: the total reward is
    logged, not a number (NaN), like each function's (k6-diagnosis-null-total-reward-unread)."""
    rows = [{**r, "reward": None, "reward_std": None, "rewards/format_reward/mean": None,
             "rewards/correctness_reward/mean": None} for r in _rows(6)]
    run = _load(_write_jsonl(tmp_path / "metrics.jsonl", rows))
    assert [math.isnan(v) for _, v in run.series("reward")] == [True] * 6, run.series("reward")


def test_a_step_that_is_not_a_finite_number_is_numbered_by_its_row(tmp_path, workspace):
    """A metrics export whose step cell is NaN or Infinity (a W&B export's empty step): the row is numbered by its
    place, never a crash (k6-diagnosis-infinite-step-unchecked)."""
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows(4)[:3])
                    + json.dumps({**_rows(4)[3], "step": INF}) + "\n")
    run = _load(path)
    assert [r["step"] for r in run.rows] == [1, 2, 3, 4], [r["step"] for r in run.rows]


def test_a_step_logged_again_with_a_metric_missing_keeps_the_earlier_value(tmp_path, workspace):
    """An export that logs step 3 twice, the second time without entropy (null): step 3 keeps its entropy; a value
    logged again wins (k6-diagnosis-relogged-null-overwrites)."""
    rows = _rows(4)
    again = {**rows[2], "entropy": None, "loss": 0.07}
    run = _load(_write_jsonl(tmp_path / "metrics.jsonl", [*rows, again]))
    step3 = next(r for r in run.rows if r["step"] == 3)
    assert (step3["entropy"], step3["loss"]) == (0.8, 0.07), step3


def test_a_source_relative_to_the_workspace_is_found(tmp_path, workspace, monkeypatch):
    """diagnose_run("runs/r") from any current directory: the path is read relative to the workspace root
    (k6-diagnosis-workspace-path-unresolved)."""
    run = _run_dir(workspace, _rows(12))
    monkeypatch.chdir(tmp_path)
    d = diagnose_run(DiagnoseRequest(source="runs/r", validate_patches=False))
    assert (Path(d.source), d.last_step) == (run.resolve(), 12), d


def test_a_trl_output_folder_with_a_checkpoint_not_named_by_a_step_is_read(tmp_path, workspace):
    """checkpoint-best/ (a copy a person made) beside checkpoint-3/: the latest checkpoint by step is read, the copy
    is no checkpoint and never a crash (k6-diagnosis-checkpoint-best-crash)."""
    out = tmp_path / "out"
    for name, steps in (("checkpoint-3", 3), ("checkpoint-best", 2)):
        (out / name).mkdir(parents=True)
        (out / name / "trainer_state.json").write_text(json.dumps({"global_step": steps, "log_history": _rows(steps)}))
    d = diagnose_run(DiagnoseRequest(source=str(out), validate_patches=False))
    assert (d.last_step, Path(d.metrics_path).parent.name) == (3, "checkpoint-3"), d


def test_a_folder_holding_a_progress_jsonl_is_read_from_it(tmp_path, workspace):
    """A folder with progress.jsonl at its top (a run's logs copied out): its metrics are that file
    (k6-diagnosis-bare-progress-unfound)."""
    folder = tmp_path / "copied"
    _write_jsonl(folder / "progress.jsonl", _rows(12))
    d = diagnose_run(DiagnoseRequest(source=str(folder), validate_patches=False))
    assert (d.metrics_path, d.last_step) == (str(folder / "progress.jsonl"), 12), d


def test_an_ndjson_export_is_read(tmp_path, workspace):
    """A .ndjson export (newline-delimited JSON, one row a line) is a JSON-lines log (k6-diagnosis-ndjson-
    unsupported)."""
    d = diagnose_run(DiagnoseRequest(source=str(_write_jsonl(tmp_path / "metrics.ndjson", _rows(12))),
                                     validate_patches=False))
    assert (d.source_kind, d.last_step) == ("jsonl", 12), d


@pytest.mark.parametrize("beta, kl, found", [
    (0.1, 2.0, True),  # beta above the recipe's 0.04: the bounds stay 1.0 / 5.0, never raised with it
    (0.001, 0.05, False),  # a tiny beta: the bounds scale down, but never under 0.1 / 0.5
])
def test_the_kl_bounds_follow_beta_within_their_floor(tmp_path, workspace, beta, kl, found):
    """kl_explosion's bounds: 1.0 and 5.0 nats/token at beta 0.04 and above (k6-diagnosis-kl-beta-above-ref), scaled
    down with a smaller beta to a floor of 0.1 / 0.5 (k6-diagnosis-kl-floor-dropped)."""
    run = _run_dir(tmp_path, [{**r, "kl": kl * (i + 1) / 12} for i, r in enumerate(_rows(12))])
    (run / "train" / "config.yaml").write_text(yaml.safe_dump({**CONFIG, "beta": beta}))
    d = diagnose_run(DiagnoseRequest(source=str(run), validate_patches=False))
    assert ("kl_explosion" in {f.code for f in d.findings}) is found, [(f.code, f.severity) for f in d.findings]


def test_a_damaged_line_before_the_last_is_refused_naming_it(tmp_path, workspace):
    """A metrics log whose second line is not JSON (damaged, not half-written: lines follow it) is refused naming
    the line; only a live run's half-written LAST line is skipped (k6-diagnosis-broken-middle-line-skipped)."""
    rows = [json.dumps(r) + "\n" for r in _rows(4)]
    path = tmp_path / "metrics.jsonl"
    path.write_text(rows[0] + '{"step": 2, "loss"\n' + "".join(rows[2:]))
    with pytest.raises(UserInputError, match="line 2 is not a JSON object"):
        diagnose_run(DiagnoseRequest(source=str(path), validate_patches=False))
    path.write_text("".join(rows) + '{"step": 5, "lo')  # the last line half-written: skipped
    assert diagnose_run(DiagnoseRequest(source=str(path), validate_patches=False)).last_step == 4


def test_a_progress_log_ending_in_a_sparse_hole_is_read(tmp_path, workspace):
    """A progress log whose end is a run of NUL bytes (a sparse hole: the file extended past its content by a crash
    or a copy) is a text log, not a binary file (k6-diagnosis-sparse-log-binary)."""
    path = _write_jsonl(tmp_path / "run" / "progress.jsonl", _rows(6))
    with path.open("r+b") as handle:
        handle.truncate(path.stat().st_size + 4096)
    d = diagnose_run(DiagnoseRequest(source=str(path), validate_patches=False))
    assert d.last_step == 6, d


def test_a_run_known_only_by_its_stdout_is_read_from_the_printed_logs(tmp_path, workspace):
    """A folder (no run of this project: those read only their signed progress log) with no metrics file, only
    train/logs/stdout.log holding the dicts the Trainer prints on each log: each printed dict is a logged step
    (k6-diagnosis-stdout-only-no-rows); a printed dict that holds no metric (a config) is none
    (k6-diagnosis-log-dict-unchecked)."""
    run = tmp_path / "elsewhere"
    (run / "train" / "logs").mkdir(parents=True)
    printed = "".join(f"{ {'loss': 0.05, 'grad_norm': 0.5, 'learning_rate': 1e-06, 'epoch': i / 10} }\n"
                      for i in range(1, 6))
    (run / "train" / "logs" / "stdout.log").write_text("{'num_generations': 4, 'max_steps': 6}\n" + printed)
    d = diagnose_run(DiagnoseRequest(source=str(run), validate_patches=False))
    assert (d.source_kind, d.steps_logged, d.last_step) == ("run_dir", 5, 5), d


def test_a_reward_functions_std_is_no_reward_of_its_own(tmp_path, workspace):
    """TRL >= 0.17 logs rewards/<func>/mean and rewards/<func>/std: the std stays the function's spread; only a
    bare rewards/<func> (TRL < 0.17) is its mean (k6-diagnosis-old-reward-nested)."""
    run = _load(_write_jsonl(tmp_path / "metrics.jsonl", _rows(4)))
    rewards = sorted(n for n in run.metric_names() if n.startswith("rewards/"))
    assert rewards == ["rewards/correctness_reward/mean", "rewards/correctness_reward/std",
                       "rewards/format_reward/mean", "rewards/format_reward/std"], rewards


def test_an_entropy_collapse_within_three_logs_is_found(tmp_path, workspace):
    """Three logs whose entropy falls 0.8 -> 0.02 (the policy deterministic at once): entropy_collapse, an error;
    its first and last logs are compared, never the mean of all three with itself (k6-diagnosis-ends-fraction-
    zero)."""
    rows = [{**r, "entropy": e} for r, e in zip(_rows(3), (0.8, 0.4, 0.02))]
    d = diagnose_run(DiagnoseRequest(source=str(_run_dir(tmp_path, rows)), validate_patches=False))
    assert ("entropy_collapse", "error") in {(f.code, f.severity) for f in d.findings}, d.findings


# ---------------------------------------------------------------- the m6 audit (issue 48): survivors' rows
@pytest.mark.parametrize("prefix", ["[rank0]: ", "0: ", "    "])
def test_a_stdout_log_whose_metric_dicts_follow_a_prefix_is_read(tmp_path, workspace, prefix):
    """A training known only by its stdout (a log given by path: a run of this project reads only its signed
    progress log), each printed metric dict after a prefix on its line (torchrun's '[rank0]: ', srun's '0: ',
    leading spaces): every dict is a logged step, and a NaN loss among them is found
    (m6-diagnosis-log-dict-mid-line)."""
    run = tmp_path / "elsewhere"
    (run / "train" / "logs").mkdir(parents=True)
    losses = [0.05, 0.05, math.nan, 0.05, 0.05]
    # transformers' ProgressCallback.on_log writes str(logs), each float formatted f"{v:.4g}" (nan: 'nan')
    printed = "".join(prefix + str({k: f"{v:.4g}" for k, v in {"loss": loss, "grad_norm": 0.5, "learning_rate": 1e-6,
                                                             "epoch": i / 10}.items()}) + "\n"
                      for i, loss in enumerate(losses, 1))
    (run / "train" / "logs" / "stdout.log").write_text(printed)
    d = diagnose_run(DiagnoseRequest(source=str(run / "train" / "logs" / "stdout.log"), validate_patches=False))
    assert (d.steps_logged, d.last_step) == (5, 5), d
    assert "nan_loss" in {f.code for f in d.findings}, d.findings


def test_a_config_given_with_a_run_directory_brings_its_own_sidecars(tmp_path, workspace):
    """diagnose_run(run_dir, config_path=other) reads the request.json and rewards.json beside `other`, not the
    run's own train/ ones: the reward and request findings judge the recipe it was asked about
    (m6-diagnosis-sidecars-of-run). Read through load_run, the reader diagnose_run uses."""
    run = _run_dir(tmp_path, _rows(12))
    (run / "train" / "request.json").write_text(json.dumps({"gpu": "cpu"}))
    (run / "train" / "rewards.json").write_text(json.dumps([{"name": "format_reward"}]))
    other = tmp_path / "other" / "config.yaml"
    other.parent.mkdir()
    other.write_text(yaml.safe_dump(CONFIG))
    (other.parent / "request.json").write_text(json.dumps({"gpu": "A100"}))
    specs = [{"name": "soft_overlong_punishment", "params": {"max_completion_len": 24, "soft_punish_cache": 4}}]
    (other.parent / "rewards.json").write_text(json.dumps(specs))
    own = _load(run)
    given = _load(run, config=other)
    assert (own.request.gpu, own.reward_specs) == ("cpu", [{"name": "format_reward"}]), own
    assert (given.request.gpu, given.reward_specs) == ("A100", specs), given


@pytest.mark.parametrize("metric", ["loss", "grad_norm"])
def test_a_logged_value_past_float32s_range_reads_as_infinite(tmp_path, workspace, metric):
    """TRL's metrics are float32 tensors: a loss or grad_norm logged as 1e39 overflowed, and reads as an infinity,
    a divergence (nan_loss: loss or gradient norm NaN/inf), never a finite number the rules sum and fit
    (m6-diagnosis-float32-overflow-finite)."""
    rows = _rows(12)
    rows[6][metric] = 1e39
    d = diagnose_run(DiagnoseRequest(source=str(_run_dir(tmp_path, rows)), validate_patches=False))
    base = diagnose_run(DiagnoseRequest(source=str(_run_dir(tmp_path / "ok", _rows(12))), validate_patches=False))
    new = {f.code for f in d.findings} - {f.code for f in base.findings}
    assert "nan_loss" in new, (new, d.findings)
    assert math.isinf(_load(_run_dir(tmp_path / "again", rows)).series(metric)[6][1]), metric


# ---------------------------------------------------------------- the m8 audit (issue 48): tables of boundaries
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
# Lines that mention vLLM before a CUDA OOM: a frame of vLLM's own code (the OOM is vLLM's allocation) or not.
VLLM_MENTIONS = {
    '  File "/opt/venv/lib/python3.11/site-packages/vllm/worker/model_runner.py", line 1450, in execute_model': True,
    '  File "/opt/venv/lib/python3.11/site-packages/vllm/v1/worker/gpu_model_runner.py", line 9, in load': True,
    '  File "<frozen vllm.executor.uniproc_executor>", line 3, in collective_rpc': True,
    "INFO 06-01 10:02:11 [__init__.py:239] Automatically detected platform cuda. vllm version 0.8.5": False,
    "[settings] use_vllm=True vllm_mode=colocate vllm_gpu_memory_utilization=0.3": False,
    "vllm.LLM(model='Qwen/Qwen2.5-7B') loaded in 41 s": False,
    "  trl/trainer/grpo_trainer.py: generating with vLLM": False,
}
OOM_AT = 300  # the OOM's line number; a mention `d` lines before it (after it: -1)
DISTANCES = (1, 40, 79, 80, 200, -1)  # the rule reads the OOM line and the 79 before it


@pytest.mark.parametrize("distance", DISTANCES)
@pytest.mark.parametrize("mention", list(VLLM_MENTIONS))
def test_an_oom_is_vllms_only_under_a_vllm_frame_in_the_lines_before_it(tmp_path, workspace, mention, distance):
    """A CUDA OOM is vllm_out_of_memory only when a frame of vLLM's code stands in the traceback lines before it
    (the 79 lines read); a run that uses vLLM and says so in any other line is training's cuda_out_of_memory."""
    lines = [f"step {i}: generating" for i in range(1, OOM_AT + 2)]
    lines[OOM_AT - 1] = OOM
    lines[OOM_AT - 1 - distance] = mention
    shape = Shape("oom", one(), {}, stdout="\n".join(lines) + "\n")
    d = diagnose_run(DiagnoseRequest(source=str(build(shape, tmp_path)), validate_patches=False))
    vllms = VLLM_MENTIONS[mention] and 0 < distance < 80
    found = {f.code for f in d.findings} & {"cuda_out_of_memory", "vllm_out_of_memory"}
    assert found == {"vllm_out_of_memory" if vllms else "cuda_out_of_memory"}, (mention, distance, found)


# Learning-rate schedules as TRL logs them (12 logs), the peak `p` at the start, the middle, the end, or everywhere;
# a NaN or null logged on the way.
SCHEDULES = {
    "warm-up then constant": lambda p: [p * min(i, 3) / 3 for i in range(12)],
    "warm-up then linear decay": lambda p: [p * i / 3 if i <= 3 else p * (11 - i) / 8 for i in range(12)],
    "warm-up then cosine": lambda p: [p * i / 3 if i <= 3 else p * (1 + math.cos(math.pi * (i - 3) / 8)) / 2
                                      for i in range(12)],
    "constant": lambda p: [p] * 12,
    "linear decay from the first log": lambda p: [p * (12 - i) / 12 for i in range(12)],
    "rising to the last log": lambda p: [p * (i + 1) / 12 for i in range(12)],
    "a NaN and a null on the way up": lambda p: [0.0, NAN, None] + [p * min(i, 6) / 6 for i in range(3, 12)],
}
PEAKS = {"above the range": 1e-3, "inside it": 1e-6, "below it": 1e-8}  # full fine-tuning's range: 1e-7-1e-5


@pytest.mark.parametrize("peak", list(PEAKS))
@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_without_a_configured_rate_the_logged_peak_is_the_runs_rate(tmp_path, workspace, schedule, peak):
    """A config without learning_rate: the rate judged is the peak logged one (after warm-up, before decay), at
    the step it was logged, never the first or the last."""
    values = SCHEDULES[schedule](PEAKS[peak])
    run = build(Shape("lr", one(learning_rate=values), {}), tmp_path)
    config = yaml.safe_load((run / "train" / "config.yaml").read_text())
    del config["learning_rate"]
    (run / "train" / "config.yaml").write_text(yaml.safe_dump(config))
    d = diagnose_run(DiagnoseRequest(source=str(run), validate_patches=False))
    findings = [f for f in d.findings if f.code == "lr_out_of_range"]
    logged = [(i + 1, v) for i, v in enumerate(values) if v is not None and math.isfinite(v)]
    top = max(v for _, v in logged)
    if peak == "inside it":
        assert not findings, [f.explanation for f in findings]
        return
    [finding] = findings
    [evidence] = finding.evidence
    assert evidence.metric == "learning_rate" and evidence.value == pytest.approx(top), (schedule, evidence)
    assert evidence.step in [s for s, v in logged if v == top], (schedule, evidence)
    assert ("above" if peak == "above the range" else "below") in finding.explanation, finding.explanation


# File names diagnose_run reads as a bare stdout log: every suffix of LOG_SUFFIXES, in any case; and names it must
# not (a suffix that only begins like one, a rotated or compressed log).
def _log_names() -> dict[str, bool]:
    from mcp_server.diagnosis.metrics import LOG_SUFFIXES

    names = {}
    for suffix in LOG_SUFFIXES:
        for form in (suffix, suffix.upper(), suffix[:2].upper() + suffix[2:]):
            names[f"slurm-1234{form}"] = True
    for name in ("stdout.logs", "stdout.log.1", "stdout.log.gz", "job.outx", "notes.md"):
        names[name] = False
    return names


LOG_NAMES = _log_names()


@pytest.mark.parametrize("name", list(LOG_NAMES))
def test_a_bare_log_is_read_by_every_suffix_a_log_takes_and_no_other(tmp_path, workspace, name):
    """A SLURM job's slurm-1234.out (or .log, .txt, .err, in any case) is read as a stdout log and its CUDA OOM
    found; any other name is refused naming the source and every log suffix accepted."""
    from mcp_server.diagnosis.metrics import LOG_SUFFIXES

    path = tmp_path / name
    path.write_text((FIXTURES / "cuda_oom.log").read_text())
    request = DiagnoseRequest(source=str(path), validate_patches=False)
    if LOG_NAMES[name]:
        assert "cuda_out_of_memory" in {f.code for f in diagnose_run(request).findings}, name
        return
    with pytest.raises(UserInputError) as refused:
        diagnose_run(request)
    assert refused.value.field == "source" and all(s in str(refused.value) for s in LOG_SUFFIXES), str(refused.value)


# ---------------------------------------------------------------- the m9 audit (issue 48): tables of boundaries
def _log_evidence(d) -> list[tuple[str, int, str]]:
    """(code, line number, quoted text) of every log line a finding cites ("line N: text")."""
    cited = []
    for f in d.findings:
        for e in f.evidence:
            if e.metric == "log" and isinstance(e.value, str) and e.value.startswith("line "):
                number, _, text = e.value.removeprefix("line ").partition(": ")
                cited.append((f.code, int(number), text))
    return cited


LOGGED = [s for s in SHAPES if s.stdout is not None and not s.refused]
PREFIXES = (0, 1, 41)  # filler lines before the shape's log: its finding's line first, second, deep in


@pytest.mark.parametrize("before", PREFIXES)
@pytest.mark.parametrize("shape", LOGGED, ids=[s.name for s in LOGGED])
def test_a_log_findings_cited_line_number_is_the_line_it_quotes(tmp_path, workspace, shape, before):
    """Every log finding rule (each shape whose stdout.log yields one), its hit moved down by 0, 1 and 41 lines:
    each cited 'line N: text' quotes line N of stdout.log (counted from 1), never its neighbour
    (m9-diagnosis-log-line-off-by-one)."""
    stdout = "".join(f"[rank0] filler {i}\n" for i in range(before)) + shape.stdout.lstrip("\n")
    run = build(dataclasses.replace(shape, stdout=stdout), tmp_path)
    d = diagnose_run(DiagnoseRequest(source=str(run), validate_patches=False))
    lines = stdout.splitlines()
    cited = _log_evidence(d)
    assert cited, (shape.name, d.findings)
    for code, number, text in cited:
        assert text.strip() and 1 <= number <= len(lines), (code, number, text)
        assert lines[number - 1].strip().startswith(text.strip()), (code, number, text, lines[number - 1])


NULS = (1, 4096)  # a NUL run of one byte, and of a page (a sparse hole)
NUL_AT = {"before the first line": 0, "between two lines": 30, "after the last line": 60}  # lines before the hole


@pytest.mark.parametrize("length", NULS)
@pytest.mark.parametrize("at", list(NUL_AT))
def test_a_nul_run_anywhere_in_a_progress_log_is_no_part_of_its_lines(tmp_path, workspace, at, length):
    """A run of NUL bytes (a sparse hole a crash left, a resume appending after it) before, between or after the
    signed lines of a run's progress log: every line is read whole by training_status's reader and by diagnosis,
    none refused as not JSON nor dropped (m9-diagnosis-nul-prefix-kept). A NUL in the log's first 8 KiB is a
    binary file to diagnose_run (_refuse_binary): its row is the status reader's alone."""
    from mcp_server.runs import Run
    from mcp_server.training.runstate import read_progress

    run = _run_dir(tmp_path, _rows(60))
    path = run / "train" / "logs" / "progress.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    split = NUL_AT[at]
    path.write_bytes(b"".join(lines[:split]) + b"\0" * length + b"".join(lines[split:]))
    records, note = read_progress(Run(run))
    assert ([r["step"] for r in records], note) == (list(range(1, 61)), None), (at, length, len(records), note)
    if len(b"".join(lines[:split])) >= 8192:
        d = diagnose_run(DiagnoseRequest(source=str(run), validate_patches=False))
        assert (d.steps_logged, d.last_step) == (60, 60), (at, length, d.steps_logged, d.last_step)


# What read_log keeps of a stdout log over LOG_READ_LIMIT (its comment): the first MiB and the last 4 MiB.
HEAD, TAIL = 1 << 20, 4 << 20
FILLER = b"[rank1] NCCL INFO comm teardown: waiting for the other ranks to reach the barrier ......\n"


def _oom_windows():
    """(name, log size, where the OOM line starts): each window's edges, one filler line inside and outside."""
    from mcp_server.diagnosis.metrics import LOG_READ_LIMIT

    step, big = len(FILLER), LOG_READ_LIMIT + 4 * HEAD
    yield "a log one line under the limit, its OOM first", LOG_READ_LIMIT - step, 0
    yield "a log at the limit, its OOM in the middle", LOG_READ_LIMIT, LOG_READ_LIMIT // 2
    yield "a log one line over the limit, its OOM in the middle", LOG_READ_LIMIT + step, LOG_READ_LIMIT // 2
    for name, edge in (("the head's end", HEAD), ("the tail's start", big - TAIL)):
        yield f"a long log, its OOM a line before {name}", big, edge - 2 * step
        yield f"a long log, its OOM a line after {name}", big, edge + step


WINDOWS = list(_oom_windows())


@pytest.mark.parametrize("name, size, at", WINDOWS, ids=[w[0] for w in WINDOWS])
def test_a_long_stdout_log_is_read_by_its_head_and_its_last_four_mib(tmp_path, workspace, name, size, at):
    """A CUDA OOM line placed at each edge of the windows read_log reads (the whole log up to LOG_READ_LIMIT; above
    it the first MiB and the last 4: a late OOM followed by a MiB and more of other ranks' teardown chatter):
    found exactly when its line lies inside a window (m9-diagnosis-log-tail-short)."""
    from mcp_server.diagnosis.metrics import LOG_READ_LIMIT

    oom = (OOM + "\n").encode()
    before = FILLER * (at // len(FILLER))
    data = before + oom
    data += FILLER * ((size - len(data)) // len(FILLER) + 1)
    data = data[:size - 1] + b"\n" if len(data) >= size else data
    run = build(Shape("long", one(), {}), tmp_path)
    (run / "train" / "logs" / "stdout.log").write_bytes(data)
    start = len(before)
    inside = len(data) <= LOG_READ_LIMIT or start + len(oom) <= HEAD or start >= len(data) - TAIL
    d = diagnose_run(DiagnoseRequest(source=str(run), validate_patches=False))
    assert ("cuda_out_of_memory" in {f.code for f in d.findings}) == inside, (name, len(data), start, inside)


def _no_key(how: str, tmp_path: Path, monkeypatch, workspace: Path) -> None:
    """Each way the evidence key cannot be read (evidence.key_path's lookups, _checked_path's refusal)."""
    empty = tmp_path / "empty-state"
    empty.mkdir()
    if how == "LLM_FINETUNING_STATE_DIR at an empty folder":
        monkeypatch.setenv("LLM_FINETUNING_STATE_DIR", str(empty))
    elif how == "XDG_STATE_HOME at an empty folder":
        monkeypatch.delenv("LLM_FINETUNING_STATE_DIR")
        monkeypatch.setenv("XDG_STATE_HOME", str(empty))
    elif how == "HOME at an empty folder":
        monkeypatch.delenv("LLM_FINETUNING_STATE_DIR")
        monkeypatch.delenv("XDG_STATE_HOME", raising=False)
        monkeypatch.setenv("HOME", str(empty))
    elif how == "the key a folder":
        (empty / "evidence.key").mkdir()
        monkeypatch.setenv("LLM_FINETUNING_STATE_DIR", str(empty))
    elif how == "the key inside the workspace":  # the real key copied there: refused where it lies
        from mcp_server.evidence import key_path

        inside = workspace / "state"
        inside.mkdir()
        (inside / "evidence.key").write_bytes(key_path().read_bytes())
        monkeypatch.setenv("LLM_FINETUNING_STATE_DIR", str(inside))


NO_KEY = ("LLM_FINETUNING_STATE_DIR at an empty folder", "XDG_STATE_HOME at an empty folder",
          "HOME at an empty folder", "the key a folder", "the key inside the workspace")


@pytest.mark.parametrize("how", NO_KEY)
def test_with_no_readable_evidence_key_no_progress_line_is_trusted(tmp_path, workspace, monkeypatch, how):
    """A run's progress log (6 signed lines, then a hand-written one with KL 777 and reward 99) read where the key
    cannot be read: no line is known to be the trainer's, so none is used (diagnosis reads no step), and both
    readers say why
    (m9-diagnosis-no-key-trusts-all: every line was trusted, kl_explosion raised with patches)."""
    from mcp_server.runs import Run
    from mcp_server.training.runstate import read_progress

    run = _run_dir(tmp_path, _rows(6))
    with open(run / "train" / "logs" / "progress.jsonl", "a") as handle:
        handle.write(json.dumps(_rows(1, first=7, kl=777.0, reward=99.0)[0]) + "\n")
    _no_key(how, tmp_path, monkeypatch, workspace)
    records, note = read_progress(Run(run))
    assert records == [] and note and note.startswith("7 progress lines unsigned or altered"), (records, note)
    assert "evidence key" in note, note
    with pytest.raises(UserInputError, match="holds no logged training step .*; 7 progress lines unsigned or "
                       "altered: not used .*evidence key "):
        diagnose_run(DiagnoseRequest(source=str(run), validate_patches=False))


# ---------------------------------------------------------------- the m10 audit (issue 48): names, records, markers
# Each table below is generated from a declaration the product keeps elsewhere than the line it tests: the
# progress log's contract (training/trainer/progress.py PROGRESS_KEYS, what the trainer writes) against the
# reader's aliases; the signed records a reader consults x every state a record can be in; every subset of the
# files that say "this folder is a run of ours"; the message forms a refused write takes, produced by the writers.
def _contract_names() -> dict[str, str]:
    """progress.jsonl's own name -> the TRL name the trainer writes it from, where the two differ."""
    from mcp_server.training.trainer.progress import PROGRESS_KEYS

    return {key: sources[0] for key, sources in PROGRESS_KEYS.items() if key != sources[0]}


def _moved(shape: Shape) -> set[str]:
    """The TRL metrics a shape's log calls set to other values than a healthy run's."""
    moved = set()
    for attempt in shape.attempts():
        n = len(attempt)
        for i, (_, logs) in enumerate(attempt):
            healthy = trl_logs(i, n)
            moved |= {k for k, v in logs.items() if k not in healthy or healthy[k] != v and not (
                isinstance(v, float) and math.isnan(v))}
    return moved


CONTRACT_ROWS = [(shape, key) for shape in SHAPES if not (shape.export or shape.refused)
                 for key, trl in _contract_names().items() if trl in _moved(shape)]


def _contract_only(progress: Path) -> None:
    """The run's progress log with each metric under the contract's name alone (TRL's name dropped where the
    contract renames it), signed again: a log the trainer's contract allows, as another writer of it would."""
    renamed = set(_contract_names().values())
    rows = [{k: v for k, v in json.loads(text).items() if k != "mac" and k not in renamed}
            for text in progress.read_text().splitlines()]
    write_signed_lines(progress, rows)


@pytest.mark.parametrize("shape, key", CONTRACT_ROWS, ids=[f"{s.name}: {k}" for s, k in CONTRACT_ROWS])
def test_a_progress_log_under_the_contracts_names_alone_gets_the_same_findings(tmp_path, workspace, shape, key):
    """Every shape whose log moves a metric the progress-log contract renames (clipped_ratio,
    completion_mean_length, lr), with that log holding only the contract's names: the same findings as under
    TRL's (m10-diagnosis-clipped-ratio-unaliased: a log under clipped_ratio raised no truncation finding)."""
    run = build(shape, tmp_path)
    progress = run / "train" / "logs" / "progress.jsonl"
    _contract_only(progress)
    assert _contract_names()[key] not in progress.read_text() and f'"{key}"' in progress.read_text()
    d = diagnose_run(DiagnoseRequest(source=str(run), validate_patches=False))
    assert {f.code: f.severity for f in d.findings} == shape.findings, [(f.code, f.explanation[:120])
                                                                        for f in d.findings]


def test_every_renamed_contract_metric_has_a_row():
    """A name the contract gives a metric that no row moves is untested: lr has the rate table's rows below."""
    covered = {key for _, key in CONTRACT_ROWS} | {"lr"}
    assert set(_contract_names()) <= covered, set(_contract_names()) - covered


def _names_of(trl: str) -> list[str]:
    """Every name the reader accepts for a TRL metric: its own, each alias (metrics.ALIASES) and the contract's."""
    from mcp_server.diagnosis.metrics import ALIASES

    return sorted({trl, *(a for a, t in ALIASES.items() if t == trl),
                   *(k for k, t in _contract_names().items() if t == trl)})


def _clipped_values() -> dict[str, float]:
    from mcp_server.diagnosis.context import CLIPPED_ERROR, CLIPPED_WARN

    values = {"0": 0.0}
    for name, edge in (("warn", CLIPPED_WARN), ("error", CLIPPED_ERROR)):
        values |= {f"below {name}": math.nextafter(edge, 0.0), f"at {name}": edge,
                   f"above {name}": math.nextafter(edge, 1.0)}
    return values


CLIPPED_SOURCES = ("the run's progress log", "a jsonl export", "a W&B CSV export", "a trainer_state.json")
CLIPPED_ROWS = [(source, name, value) for source in CLIPPED_SOURCES for name in _names_of("completions/clipped_ratio")
                for value in _clipped_values()]


@pytest.mark.parametrize("source, name, value", CLIPPED_ROWS)
def test_the_clipped_share_under_every_name_on_every_source_is_judged_at_its_thresholds(tmp_path, workspace, source,
                                                                                        name, value):
    """The share of cut completions logged under each name the reader accepts for it, on each source that logs
    it, at, below and above each threshold the truncation finding uses (completions end: no 'never terminate'):
    completions_truncated exactly from CLIPPED_WARN on, its evidence TRL's name."""
    from mcp_server.diagnosis.context import CLIPPED_WARN, MIN_CUT_LOGS

    share = _clipped_values()[value]
    n = 2 * MIN_CUT_LOGS
    rows = [{"step": i + 1, **{k: v for k, v in trl_logs(i, n).items() if k != "completions/clipped_ratio"},
             name: share} for i in range(n)]
    if source == "the run's progress log":
        path = write_signed_lines(_run_dir(tmp_path) / "train" / "logs" / "progress.jsonl", rows)
    elif source == "a jsonl export":
        path = _write_jsonl(tmp_path / "metrics.jsonl", rows)
    elif source == "a W&B CSV export":
        path = tmp_path / "export.csv"
        wandb = [{"train/global_step": r["step"], **{f"r - train/{k}": v for k, v in r.items() if k != "step"}}
                 for r in rows]
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, list(wandb[0]))
            writer.writeheader()
            writer.writerows(wandb)
    else:
        path = tmp_path / "trainer_state.json"
        path.write_text(json.dumps({"global_step": n, "log_history": rows}))
    d = diagnose_run(DiagnoseRequest(source=str(path), validate_patches=False))
    cut = [f for f in d.findings if f.code in ("completions_truncated", "completions_never_terminate")]
    assert [f.code for f in cut] == (["completions_truncated"] if share >= CLIPPED_WARN else []), (share, cut)
    assert all(e.metric == "completions/clipped_ratio" for f in cut for e in f.evidence[:2]), cut


def _begin_states() -> dict[str, Callable]:
    """Every state train/logs/train-begin.json can be in, as (run, record) -> None writers: what the trainer
    signed, written by hand, altered after signing, signed for another run or for another of this run's files
    (copied in), not JSON, absent."""
    from mcp_server.evidence import sign_run
    from mcp_server.runs import Run

    def signed(run, record):
        write_signed(Run(run).train_begin, record)

    def altered(run, record):  # signed saying max_steps 13, then edited to say `record`
        signed_text = json.dumps(sign_run(Run(run), Run(run).train_begin, {**record, "max_steps": 13}))
        assert '"max_steps": 13' in signed_text
        Run(run).train_begin.write_text(signed_text.replace('"max_steps": 13', '"max_steps": 12'))

    def other_run(run, record):
        other = Run(Path(run).parent / "other")
        Run(run).train_begin.write_text(json.dumps(sign_run(other, other.train_begin, record)))

    def other_file(run, record):
        Run(run).train_begin.write_text(json.dumps(sign_run(Run(run), Run(run).train_summary, record)))

    return {"signed": signed, "unsigned": lambda run, record: Run(run).train_begin.write_text(json.dumps(record)),
            "altered": altered, "signed for another run": other_run, "signed as another file": other_file,
            "not JSON": lambda run, record: Run(run).train_begin.write_text("{"), "absent": lambda run, record: None}


# What the record says (learning_rate, the step its schedule begins at) x what the progress log logs after it.
BEGIN_SAYS = {
    "the config's rate": ({"learning_rate": 1e-6, "global_step": 6, "max_steps": 12}, 1e-6),
    "another rate": ({"learning_rate": 0.1, "global_step": 6, "max_steps": 12}, 1e-6),
    "no rate, the log above the config's after its step": ({"global_step": 6, "max_steps": 12}, 1e-4),
    "no rate, the log at the config's": ({"global_step": 6, "max_steps": 12}, 1e-6),
}
RATE_ROWS = [(state, says, name, signed_log) for state in _begin_states() for says in BEGIN_SAYS
             for name in _names_of("learning_rate") for signed_log in (True, False)]


@pytest.mark.parametrize("state, says, name, signed_log", RATE_ROWS)
def test_the_rate_the_schedule_runs_from_is_read_only_from_what_the_trainer_signed(tmp_path, workspace, state, says,
                                                                                   name, signed_log):
    """The rate note (diagnosis/rate_applied.py) reads train-begin.json and the progress log: it is said exactly
    when the record is the trainer's own (signed for this run and this file, unaltered) and names another rate
    than the config's, or names none while the trainer's signed lines log a rate above the config's after the
    record's step; the rate logged under each name the reader accepts. Through diagnose_run and training_status
    (m10-diagnosis-rate-begin-unsigned: a hand-written record made both say the change did not act)."""
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import training_status

    record, after = BEGIN_SAYS[says]
    run = _run_dir(workspace)
    rows = [{"step": s, **{k: v for k, v in trl_logs(s - 1).items() if k != "learning_rate"},
             name: 1e-6 if s <= 6 else after} for s in range(1, 13)]
    progress = run / "train" / "logs" / "progress.jsonl"
    if signed_log:
        write_signed_lines(progress, rows)
    else:
        _write_jsonl(progress, rows)
    (run / "train" / "logs" / "stdout.log").touch()
    _begin_states()[state](run, record)
    noted = state == "signed" and (says == "another rate" or signed_log and says.startswith("no rate, the log above"))
    d = diagnose_run(DiagnoseRequest(source=str(run), validate_patches=False))
    status = training_status(StatusRequest(run=str(run)))
    said = [text for text in (d.summary, status.note or "")
            if "the config's 1e-06" in text or "the config says" in text]
    assert len(said) == (2 if noted else 0), (d.summary, status.note)


def _ours() -> dict[str, Callable]:
    """The files that say a folder is a run of this project (diagnosis.metrics.emitted_here), each as a writer:
    its config, its run.json, the launcher's signed record of its launch kept beside the key (a valid one, and one
    tampered with: both say a launch was recorded)."""
    from mcp_server.evidence import _launch_entry

    def tampered(run: Path) -> None:
        record_launch(run, "L1")
        path, _ = _launch_entry(run)
        path.write_text(path.read_text().replace('"L1"', '"L2"'))

    return {"train/config.yaml": lambda run: (run / "train" / "config.yaml").write_text(yaml.safe_dump(CONFIG)),
            "run.json": lambda run: (run / "run.json").write_text(json.dumps({"state": "running"})),
            "the launch record": lambda run: record_launch(run, "L1"), "a tampered launch record": tampered}


def _subsets(names) -> list[tuple[str, ...]]:
    import itertools

    return [c for k in range(len(names) + 1) for c in itertools.combinations(names, k)]


OURS_ROWS = [(kept, where) for kept in _subsets(list(_ours())) for where in UNSIGNED_STAND_INS
             if not {"the launch record", "a tampered launch record"} <= set(kept)]  # one record per run: either


@pytest.mark.parametrize("kept, where", OURS_ROWS, ids=[f"{'+'.join(k) or 'none kept'}: {w}" for k, w in OURS_ROWS])
def test_a_run_is_known_as_ours_by_any_file_that_says_so(tmp_path, workspace, kept, where):
    """A run directory whose progress log is gone, with KL 777 written into a stand-in (a checkpoint's
    trainer_state.json, a copy, printed lines), and every subset of the files that say it is a run of this project
    kept: while any one is left, nothing but its signed progress log is its metrics (none read, the summary says
    why); with none left it is any TRL output folder, read from the stand-in (m10-diagnosis-moved-config-unsigned-
    metrics: the config and run.json moved away, the launch record alone left, the 777 read as its metrics)."""
    run = tmp_path / "runs" / "r"
    (run / "train" / "logs").mkdir(parents=True)
    (run / "train" / "logs" / "stdout.log").touch()
    for name in kept:
        _ours()[name](run)
    UNSIGNED_STAND_INS[where](run, _rows(4, kl=777.0, reward=99.0))
    d = diagnose_run(DiagnoseRequest(source=str(run), validate_patches=False))
    if kept:
        assert (d.steps_logged, d.metrics_path) == (0, None) and "progress.jsonl is missing" in d.summary, d
        assert "kl_explosion" not in {f.code for f in d.findings}, d.findings
    else:
        assert "kl_explosion" in {f.code for f in d.findings}, d


# ---------------------------------------------------------------- a refused write, in every form its writers print
DISK_FULL_ERRNOS = {"ENOSPC", "EDQUOT", "EFBIG"}  # the disk (or a quota, or a file size limit) refused the write


def _log_findings(tmp_path: Path, text: str) -> set[str]:
    """The environment findings of a bare stdout log holding `text` alone."""
    from mcp_server.diagnosis.environment import LOG_PATTERNS

    log = tmp_path / "slurm-1.out"
    log.write_text(text + "\n")
    d = diagnose_run(DiagnoseRequest(source=str(log), validate_patches=False))
    return {f.code for f in d.findings} & set(LOG_PATTERNS)


def _refused(write: Callable[[Path], None], path: Path) -> str:
    """The exception line a writer prints when the file it writes may not grow (RLIMIT_FSIZE, SIGXFSZ ignored:
    the kernel refuses the write with EFBIG, as a full disk refuses one with ENOSPC), in this process."""
    import resource
    import traceback

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    before = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, hard))
    try:
        write(path)
    except Exception as exc:  # noqa: BLE001 - whatever the writer raises is what its log shows
        return "".join(traceback.format_exception_only(exc)).strip().splitlines()[-1]
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, before)
    raise AssertionError(f"{path.name} was written past the file size limit")


def _torch_save(path: Path, **kw) -> None:
    import torch

    torch.save({"w": torch.zeros(1 << 18)}, path, **kw)


def _safetensors_save(path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(1 << 18)}, str(path))


# The writers a run's files go through: a checkpoint's optimizer.pt and scheduler.pt (torch.save's zip writer), a
# legacy torch.save, the weights (safetensors, in Rust), the trainer's own JSON and logs (Python's io).
WRITERS = {
    "torch.save": _torch_save,
    "torch.save, the legacy format": lambda path: _torch_save(path, _use_new_zipfile_serialization=False),
    "safetensors' save_file": _safetensors_save,
    "Python's io": lambda path: path.write_bytes(b"0" * (1 << 20)),
}


def _words(name: str) -> tuple[str, str]:
    import errno
    import os

    number = getattr(errno, name)
    return os.strerror(number), str(number)


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_write_the_disk_refused_is_disk_full_in_every_form_its_writer_prints(tmp_path, workspace, writer):
    """Each writer a run's files go through, refused a write for real (in this process, the file size limit
    lowered): what it prints is a disk_full finding alone in a log; and where the words are the errno's, the same
    line with every errno's words in their place is disk_full exactly for the errnos of a refused write
    (ENOSPC, EDQUOT, EFBIG). torch 2.x's zip writer says only 'unexpected pos N vs M'."""
    import errno

    line = _refused(WRITERS[writer], tmp_path / "refused.bin")
    assert "disk_full" in _log_findings(tmp_path, line), line
    words, number = _words("EFBIG")
    if words not in line:
        return
    wrong = []
    for name in sorted(set(errno.errorcode.values())):
        if name in ("EFBIG",) or getattr(errno, name) == errno.EFBIG:
            continue
        their_words, their_number = _words(name)
        text = line.replace(f"Errno {number}]", f"Errno {their_number}]").replace(
            f"os error {number})", f"os error {their_number})").replace(words, their_words)
        if ("disk_full" in _log_findings(tmp_path, text)) != (name in DISK_FULL_ERRNOS):
            wrong.append(text)
    assert not wrong, wrong


def _torch_writer_forms() -> list[str]:
    """torch's zip writer's own failure message (PyTorchStreamWriter::valid, caffe2/serialize/inline_container.cc:
    'PytorchStreamWriter failed ' + what + name, then ': ' + miniz's error or, when a write came back short, '.'),
    for every record torch.save writes (read back from a real save) and the archive's central directory."""
    import io
    import zipfile

    import torch

    buffer = io.BytesIO()
    torch.save({"w": torch.zeros(4)}, buffer)
    names = zipfile.ZipFile(buffer).namelist()
    archive = names[0].split("/")[0]
    whats = [f"writing file {name.split('/', 1)[1]}" for name in names]
    whats.append(f"writing central directory for archive {archive}")
    return [f"RuntimeError: PytorchStreamWriter failed {what}{end}" for what in whats
            for end in (": file write failed", ".")]


def test_torchs_zip_writer_refused_a_write_is_disk_full_in_each_of_its_messages(tmp_path, workspace):
    """Every message torch's zip writer can end a save with, alone in a log: disk_full
    (m10-diagnosis-torch-save-disk-full: 'PytorchStreamWriter failed writing file data/0: file write failed' was
    not one)."""
    missed = [line for line in _torch_writer_forms() if "disk_full" not in _log_findings(tmp_path, line)]
    assert not missed, missed


def _examples(pattern: str, flags: int = 0) -> list[str]:
    """A line for every alternative of a regular expression (each branch, each optional part left out and put
    in, each repeat at its least): the forms a signature table declares."""
    try:
        from re import _constants as c, _parser as parser
    except ImportError:  # Python 3.10
        import sre_constants as c
        import sre_parse as parser

    category = {c.CATEGORY_DIGIT: "0", c.CATEGORY_WORD: "a", c.CATEGORY_SPACE: " "}

    def one(op, av) -> list[str]:
        if op is c.LITERAL:
            return [chr(av)]
        if op in (c.ANY, c.NOT_LITERAL):
            return ["x"]
        if op is c.IN:
            first_op, first = av[0]
            return [chr(first) if first_op is c.LITERAL else chr(first[0]) if first_op is c.RANGE
                    else category[first]]
        if op is c.CATEGORY:
            return [category[av]]
        if op is c.BRANCH:
            return [s for branch in av[1] for s in seq(branch)]
        if op is c.SUBPATTERN:
            return seq(av[-1])
        if op in (c.MAX_REPEAT, c.MIN_REPEAT):
            low, high, sub = av
            counts = sorted({low, min(low + 1, high)})
            return [s * k for k in counts for s in (seq(sub) if k else [""])]
        if op is c.AT:
            return [""]
        raise AssertionError(f"no example for {op} in {pattern}")

    def seq(items) -> list[str]:
        out = [""]
        for op, av in items:
            out = [a + b for a in out for b in one(op, av)]
        return out

    return sorted(set(seq(parser.parse(pattern, flags))))


def _signature_rows() -> list[tuple[str, str]]:
    from mcp_server.diagnosis.environment import LOG_PATTERNS

    return [(code, line) for code, pattern in LOG_PATTERNS.items()
            for line in _examples(pattern.pattern, pattern.flags & ~re.UNICODE) if line.strip()]


SIGNATURE_ROWS = _signature_rows()


@pytest.mark.parametrize("code, line", SIGNATURE_ROWS)
def test_every_form_in_the_log_signature_table_alone_in_a_log_is_its_finding(tmp_path, workspace, code, line):
    """Every form each log signature declares (environment.LOG_PATTERNS), alone in a log: that code's finding and
    no other signature's."""
    assert _log_findings(tmp_path, line) == {code}, (code, line)

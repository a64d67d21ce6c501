"""`llm-finetuning demo --model smollm2-135m` (`make demo-smollm2`): the seven phases of /finetune on a real
pretrained model, SmolLM2-135M-Instruct (mcp_server/smollm2.py), on CPU.

The same walk as the tiny demo (mcp_server/demo.py: the same core functions, phases, artifact names and --json
summary), on a model nobody built to obey the plugin. The task (mcp_server/smollm2_task.py) is one the base model
already solves part of the time, so the base-rate check routes straight to GRPO (no SFT warm start); the recipe
is what emit_grpo_config gives for the CPU target with LoRA, and every setting the demo changes is listed with
its reason in CHANGED_SETTINGS and the run's training brief.

What a CPU run on a real small model is for: rehearsing the whole lifecycle and checking the rewards on real text
before GPU hours are spent. What it is not: a substitute for the GPU run (a 135M model's behaviour, speed and
memory say little about a 7B model's). The weights are the Q4_1 GGUF dequantised, not the original bf16
checkpoint (smollm2.QUANTISED_NOTE): the figures are this conversion's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic import BaseModel, Field

from mcp_server import smollm2
from mcp_server.demo import (
    _evaluate, _finish, _fresh_run_dir, _phase_environment, _phase_export, _phase_gate, _phase_training,
    _quiet_libraries, _Walk,
)
from mcp_server.demo_models import SMOLLM2_KERNELS, DemoSummary
from mcp_server.demo_report import Console
from mcp_server.emission.emit import emit_grpo_config
from mcp_server.inspection.gate import check_inspection_gate, record_inspection_verdict
from mcp_server.inspection.models import InspectRequest, SampleRequest, VerdictRequest
from mcp_server.inspection.review import inspect_rewards
from mcp_server.inspection.sampling import sample_completions
from mcp_server.recipe.models import GRPORecipeRequest
from mcp_server.runs import Run
from mcp_server.smollm2_task import split_task
from mcp_server.tiny import write_jsonl
from mcp_server.worker import runs_in_training
from mcp_server.workspace import atomic_write_text, eval_root

REWARD = {"name": "mcp_server.smollm2_task.final_number_reward", "params": {}, "weight": 1.0}


class SmolDemoSettings(BaseModel):
    """The walk's sizes, chosen for 2 CPU cores (the phase split is in the summary; README gives a run's)."""

    max_operand: int = Field(default=9, description="Sums of two numbers 0..max_operand: 100 problems; the model "
                             "gets most two-digit operands wrong however it answers, so GRPO has little to teach")
    held_out: float = Field(default=0.5, description="Share of the problems held out as goldens: half (50), for "
                            "the paired test's power; 10 steps of 4 prompts see 40 of the 50 training prompts")
    max_completion_length: int = Field(default=12, description="Completion budget in tokens, sampling and "
                                       "evaluation alike: '13 + 5 = 18' takes 8.")
    grpo_steps: int = Field(default=10, description="GRPO optimizer steps.")
    grpo_learning_rate: float = Field(default=5e-4, description="GRPO peak learning rate (linear decay to 0).")
    num_generations: int = Field(default=8, description="GRPO group size (the recipe's).")
    temperature: float = Field(default=1.0, description="Sampling temperature (TRL's default).")
    inspection_prompts: int = Field(default=8, description="Prompts sampled for the inspection (x group size).")
    grpo_seed: int | None = Field(default=None, description="GRPO's seed (the LoRA adapter's initial weights, the "
                                  "prompt order and the sampled completions); None: the recipe's (3407).")
    grpo_dynamic_sampling: int | None = Field(
        default=None, description="DAPO's dynamic sampling in the GRPO phase: at most this many extra generation "
        "rounds per batch (None: off; bench/bench_dynamic_sampling.py --demo smollm2 compares the two).")
    export: bool = Field(default=True, description="Walk phase 6 (export and its smoke test). "
                         "bench/bench_kernels.py turns it off: the lift is decided at the gate, before the export.")

    @property
    def eval_max_new_tokens(self) -> int:  # what demo._evaluate reads: the same budget as training's
        return self.max_completion_length


def changed_settings(settings: SmolDemoSettings) -> dict[str, tuple[object, str]]:
    """Every config value the demo sets over what emit_grpo_config gives for the CPU target (LoRA), and why."""
    seed = {} if settings.grpo_seed is None else {
        "seed": (settings.grpo_seed, "a GRPO seed set by the caller (the recipe's is 3407), to measure the "
                 "lift's spread across seeds (bench/bench_kernels.py)")}
    return {
        "max_steps": (settings.grpo_steps, "the recipe's 3 epochs (225 steps) take hours on 2 CPU cores; a few "
                      "steps are enough for this task's lift (answer first, then stop) and keep the walk in minutes"),
        "learning_rate": (settings.grpo_learning_rate, "the recipe's LoRA rate (1e-5 for a 0.1B model) moves "
                          "nothing in 10 steps; 5e-4 is above the settled LoRA range (diagnose_run says so), "
                          "acceptable for a 10-step rehearsal, not for a real run"),
        "warmup_steps": (0, "the recipe's 5% warm-up of 225 steps (11) would be the whole run"),
        "lr_scheduler_type": ("linear", "TRL's default decay to 0 instead of the recipe's constant rate: at a "
                              "rehearsal's high rate only the first steps are full-size (docs/guide.md: the "
                              "measured run)"),
        "max_completion_length": (settings.max_completion_length, "the task's answers take under 12 tokens; "
                                  "the recipe's unmeasured CPU budget (128) would spend the CPU on preambles"),
        "gradient_checkpointing": (False, "TRL's default recomputes each layer in the backward to save memory a "
                                   "135M LoRA run on CPU does not need: only time"),
        "logging_steps": (1, "every step's reward in the log and on the progress bar (10 steps in all)"),
        "save_strategy": ("no", "one save at the end, the checkpoint the gate judges"),
        "report_to": ("none", "the demo reads train/logs/progress.jsonl itself"),
        "disable_tqdm": (True, "the demo draws its own progress bar"),
    } | seed


def _phase_baseline(walk: _Walk, settings: SmolDemoSettings):
    console = walk.console
    t0 = time.time()
    console.phase(0, "eval harness and baseline")
    base = smollm2.ensure_smollm2_model()
    console.print(f"  model: {smollm2.NAME} ({smollm2.QUANTISED_NOTE})\n  directory: {base}")
    train_rows, held_rows = split_task(settings.max_operand, settings.held_out)
    goldens = eval_root() / f"goldens-demo-smollm2-{settings.max_operand}.jsonl"
    if not goldens.is_file():  # goldens are fixed once written: a baseline records their sha256
        write_jsonl([{k: r[k] for k in ("prompt", "question", "answer")} for r in held_rows], goldens)
    console.print(f"  task: 'What is a + b?' for a, b in 0..{settings.max_operand}, the answer read as the "
                  f"completion's last number within {settings.max_completion_length} tokens; {len(train_rows)} "
                  f"training prompts, {len(held_rows)} held-out goldens (disjoint)")
    baseline = _evaluate(console, str(base), goldens, "base model", settings, "auto", graders=[REWARD])
    walk.summary.baseline_pass_rate = baseline.pass_rate
    walk.phase_done("0 baseline", t0, f"base model {baseline.pass_rate:.0%} on {baseline.n} goldens",
                    goldens=goldens, baseline=baseline.baseline_path)
    return base, train_rows, held_rows, goldens, baseline


def _phase_method(walk: _Walk, settings: SmolDemoSettings, base: Path, train_rows: list[dict], baseline):
    """Phase 1: off-ramps, the base-rate check, the recipe, and the inspection on real samples."""
    console, run = walk.console, walk.run
    t0 = time.time()
    console.phase(1, "method choice, base-rate check and reward inspection")
    console.print("  off-ramps: a prompt change was tried first (the task's phrasing is the plainest one); a "
                  "bigger model is outside an offline CPU walk. A programmatic check exists -> GRPO/RLVR.")
    data = write_jsonl([{"prompt": r["prompt"], "answer": r["answer"]} for r in train_rows], run.train_data)
    emitted = emit_demo_config(run.dir, base, data, settings)
    sampled = sample_completions(SampleRequest(
        run=str(run.dir), num_prompts=settings.inspection_prompts, seed=0, engine="transformers"))
    review = inspect_rewards(InspectRequest(run=str(run.dir)))
    console.print(f"  {review.num_samples} real samples scored: base success rate {review.base_success_rate:.0%} "
                  f"of prompts (pass@1 {review.mean_success_rate:.0%}); GRPO can learn: {review.grpo_can_learn}")
    if not review.base_success_rate:
        # The skill's route when the base never succeeds: an SFT warm start first (the tiny demo walks it). This
        # task was chosen because the base succeeds; a base that stops succeeding is a finding, not a detour.
        walk.summary.problems.append("the base model never succeeded on the sampled prompts: GRPO would see zero "
                                     "reward; the route is an SFT warm start first (llm-finetuning demo shows it)")
    console.print(f"  [yellow]A person reads {review.review_md_path} here (real completions, the likely "
                  "mis-scored first) and judges every score.[/] The demo records the verdict on their behalf.")
    verdict = record_inspection_verdict(VerdictRequest(
        run=str(run.dir), verdict="pass", reviewer="llm-finetuning demo (automated, no person read the samples)",
        agree_with_rest=True, note="demo: the last number of a real completion against the exact sum; no person "
                                   "read the samples"))
    gate = check_inspection_gate(str(run.dir))
    brief = atomic_write_text(run.brief, training_brief(baseline, review, settings))
    walk.phase_done("1 method + inspection", t0, f"base success {review.base_success_rate:.0%} of sampled prompts "
                    f"-> GRPO (no warm start); inspection gate {'open' if gate.passed else 'CLOSED'}",
                    samples=sampled.samples_path, review=review.review_md_path, verdict=verdict.verdict_path,
                    brief=brief)
    return data, emitted


def emit_demo_config(run_dir: Path, base: Path, data: Path, settings: SmolDemoSettings):
    """emit_grpo_config for the CPU target with LoRA, the demo's changes as overrides (each with its reason)."""
    changes = changed_settings(settings)
    sampling = ({} if settings.grpo_dynamic_sampling is None else
                {"dynamic_sampling": {"max_extra_rounds": settings.grpo_dynamic_sampling}})
    return emit_grpo_config(GRPORecipeRequest(
        model=str(base), dataset=str(data), answer_column="answer", rewards=[REWARD], gpu="cpu", finetune="lora",
        run_dir=str(run_dir), overrides={key: value for key, (value, _) in changes.items()}, **sampling,
        override_reason="a 10-step CPU rehearsal on a 135M model: " + "; ".join(
            f"{key}: {why}" for key, (_, why) in changes.items()),
    ))


def training_brief(baseline, review, settings: SmolDemoSettings) -> str:
    changes = "\n".join(f"  - `{key}: {value}`: {why}" for key, (value, why) in changed_settings(settings).items())
    return f"""# Training brief: demo on {smollm2.NAME}

- Model: {smollm2.QUANTISED_NOTE}. LoRA (r16, all linear layers), CPU, float32.
- Goal: the model states the sum of two numbers 0..{settings.max_operand} as the last number of a completion of
  at most {settings.max_completion_length} tokens ("What is 13 + 5?" -> "13 + 5 = 18").
- Baseline: {baseline.pass_rate:.0%} on {baseline.n} held-out goldens
  (95% CI {baseline.ci_low:.0%}-{baseline.ci_high:.0%}), greedy.
- Off-ramps: the plainest phrasing of the question is the prompt; retrieval does not apply; a bigger model is
  outside an offline CPU walk.
- Method: GRPO/RLVR. The base-rate check: {review.base_success_rate:.0%} of sampled prompts had a success, so
  GRPO has a signal and starts from the base model (no SFT warm start).
- Reward: mcp_server.smollm2_task.final_number_reward (1.0 when the completion's last number is the sum): the
  built-in correctness_reward reads an <answer> tag this model never writes.
- Inspection: {review.num_samples} real samples; the verdict was recorded by the demo, not by a person.
- Recipe: emit_grpo_config for the CPU target with LoRA, except:
{changes}
- What this run is for: rehearsing the lifecycle and checking the reward on real text. It is not a substitute for
  the GPU run: a 135M model's behaviour, speed and memory say little about a larger model's.
"""


def _phase_data(walk: _Walk, data: Path, train_rows: list[dict], held_rows: list[dict], goldens: Path) -> None:
    t0 = time.time()
    walk.console.phase(2, "data")
    golden_questions = {r["question"] for r in held_rows}
    overlap = sum(r["question"] in golden_questions for r in train_rows)
    card = atomic_write_text(walk.run.data_card, f"""# Data card: demo on {smollm2.NAME}

- Source: generated by mcp_server.smollm2_task (split_task), deterministic; licence: same as this project.
- Size: {len(train_rows)} training prompts; goldens: {len(held_rows)} held-out problems ({goldens.name}).
- Format: prompt-only chat messages (`prompt`, a user turn; the template adds its default system prompt) plus the
  gold sum (`answer`), read by final_number_reward.
""")
    report = atomic_write_text(walk.run.validation_report, f"""# Validation report: demo on {smollm2.NAME}

- Rows: {len(train_rows)} ({data})
- Rows missing the `answer` column: {sum(not r.get("answer") for r in train_rows)}
- Overlap with the goldens (exact question match): {overlap}
""")
    walk.phase_done("2 data", t0, f"{len(train_rows)} prompt-only rows, {overlap} overlap with the goldens",
                    data=data, data_card=card, validation_report=report)


@runs_in_training  # needs torch / TRL / transformers: the training interpreter's worker
def run_smollm2_demo(run_name: str | None = None, as_json: bool = False,
                     settings: SmolDemoSettings | None = None) -> DemoSummary:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(var, "1")  # the demo never reaches a hub
    settings = settings or SmolDemoSettings()
    _quiet_libraries()
    console = Console(to_stderr=as_json)
    start = time.time()
    run = Run(_fresh_run_dir(run_name or "demo-smollm2"))
    summary = DemoSummary(ok=False, quick=False, run_dir=str(run.dir), seconds=0.0, baseline_pass_rate=0.0,
                          model=smollm2.NAME)
    console.print(f"[bold]llm-finetuning demo[/]: the seven phases of /finetune on {smollm2.NAME}, a real "
                  f"pretrained model, on CPU\n  run directory: {run.dir}")
    walk = _Walk(console=console, summary=summary, run=run, settings=settings, quick=False, start=start,
                 kernels=SMOLLM2_KERNELS)  # what bench/bench_kernels.py measured, printed beside the verdict
    base, train_rows, held_rows, goldens, baseline = _phase_baseline(walk, settings)
    data, emitted = _phase_method(walk, settings, base, train_rows, baseline)
    _phase_data(walk, data, train_rows, held_rows, goldens)
    _phase_environment(walk)
    heading = "training (GRPO with LoRA from the base model)"
    if not summary.problems and _phase_training(walk, emitted, heading, lr_note=None):
        promotion = _phase_gate(walk, baseline)
        if settings.export:  # off, a REJECT still makes the summary not ok (_finish reads the verdict)
            _phase_export(walk, promotion)
    # Every run measured met the goal, so a REJECT fails the walk; were one to miss, a REJECT is that CPU's draw.
    return _finish(console, summary, start, lift_holds=SMOLLM2_KERNELS.meets == SMOLLM2_KERNELS.runs)


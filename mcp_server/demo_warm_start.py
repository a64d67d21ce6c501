"""The tiny demo's SFT warm start, shipped as data (issue 32).

Trained at run time, the warm start was the CPU's: the same SFT steps under another torch CPU kernel set (avx512,
avx2, default) stopped at another step with another model, from 17% to 23% of the held-out sums, and GRPO's lift
over it ranged from -1 to +14 points (p < 0.01 in 0 of 9 runs). So `make demo` reads one warm start, built once by
scripts/build_tiny_warm_start.py to a stated success range (checked by the build) and pinned by the sha256 of its
weights (checked at load); only GRPO runs on the user's CPU. The quick walk (`demo --quick`, another task) still
trains its own warm start with SFT at run time: it checks the plumbing, not the lift.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from mcp_server.reporting import Report, silent

SHIPPED_WARM_START = Path(__file__).resolve().parent / "tiny_warm_start"
WARM_START_SHA256 = "333fa5d0fdf1f1eedf68f3ab26d83a5b1ddae67b38f5d2f9b2a58acb8895e229"
# The task it was built for: sums of two numbers 0..WARM_MAX_OPERAND (the demo's max_operand must be this one).
WARM_MAX_OPERAND = 29
# Greedy success on WARM_CHECK_ROWS of its own training prompts (never the goldens: they judge GRPO), as GRPO sees
# them: room to learn, and enough sampled successes in GRPO's groups. Checked on training prompts kept out of the
# SFT rows instead, success plateaued at 5-10% (held out: 8% of the goldens); GRPO from there sampled 5% successes
# at temperature 1 and its reward did not rise in 60 steps.
WARM_RANGE = (0.35, 0.6)
WARM_CHECK_ROWS = 100
# SFT: TRL SFTTrainer at a constant rate (a 100k-parameter model from scratch), checked every WARM_CHECK_EVERY steps.
WARM_MAX_STEPS, WARM_CHECK_EVERY, WARM_LR, WARM_BATCH = 1500, 50, 3e-3, 32
EVAL_MAX_NEW_TOKENS = 28  # answers take ~23 tokens


def check_rows(train_rows: list[dict]) -> list[dict]:
    """The build's check: every 6th training prompt, up to WARM_CHECK_ROWS (all of them are SFT rows too)."""
    return train_rows[::6][:WARM_CHECK_ROWS]


def build_warm_start(target: Path, train_rows: list[dict], report: Report = silent) -> tuple[Path, int, float]:
    """SFT on the training split until greedy success on its check rows reaches WARM_RANGE's low end; SystemExit
    when it ends outside WARM_RANGE. Returns (model dir, SFT steps, check success)."""
    from mcp_server.evaluation.evaluate import evaluate_rows
    from mcp_server.tiny import ensure_tiny_model
    from mcp_server.training.sft_warm_start import WarmStartSettings, sft_warm_start

    check = check_rows(train_rows)

    def success_rate(model, tokenizer) -> float:
        items = evaluate_rows(None, check, [{"name": "correctness_reward"}], EVAL_MAX_NEW_TOKENS,
                              loaded=(model, tokenizer))
        return sum(i.passed for i in items) / len(items)

    settings = WarmStartSettings(max_steps=WARM_MAX_STEPS, check_every=WARM_CHECK_EVERY, target=WARM_RANGE[0],
                                 learning_rate=WARM_LR, batch_size=WARM_BATCH)
    warm = sft_warm_start(ensure_tiny_model(), train_rows, Path(target), settings, success_rate, report)
    rate = warm.success_rate or 0.0
    if not WARM_RANGE[0] <= rate <= WARM_RANGE[1]:
        raise SystemExit(f"warm start outside its range: {rate:.0%} of {len(check)} of its training prompts "
                         f"after {warm.steps} SFT steps (range {WARM_RANGE[0]:.0%}-{WARM_RANGE[1]:.0%})")
    return warm.model_dir, warm.steps, rate


def shipped_warm_start(target: Path) -> Path:
    """The shipped warm start, its weights checked against WARM_START_SHA256, copied to `target`."""
    return copy_pinned(SHIPPED_WARM_START, WARM_START_SHA256, Path(target), "scripts/build_tiny_warm_start.py",
                       "mcp_server/demo_warm_start.py")


def copy_pinned(source: Path, sha256: str, target: Path, built_by: str, pinned_in: str) -> Path:
    """A model shipped as data (a demo's warm start), its weights checked against their pinned sha256 before it is
    copied to `target`: bytes that are not the pinned ones would make the demo's figures another model's."""
    from mcp_server.tiny import state_sha256

    if not (source / "model.safetensors").is_file():
        raise SystemExit(f"the shipped warm start is missing: {source} ({built_by} builds it)")
    found = state_sha256(source)
    if found != sha256:
        raise SystemExit(f"the shipped warm start's weights are not the pinned ones: sha256 {found}, pinned "
                         f"{sha256} ({pinned_in})")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    return target

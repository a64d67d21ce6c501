"""One rule for "most groups carry no learning signal", said where the person acts on it.

A group of G completions that all score alike has zero advantage: GRPO's loss and gradient are 0 for it. Most groups
alike means most steps train nothing. The rule is the one evaluate_model's base-rate warning applies to the share
p^G + (1-p)^G it predicts (diagnosis.success_rate.baseline_signal_warning): a share at or over NO_SIGNAL_SHARE.
Here it is applied to the share the review measured on real samples (walk 11: 11 of 12 reviewed groups alike, the
replies cut at 16 tokens before the answer; the verdict and the launch said nothing and 3 steps, 34 minutes,
trained nothing), at record_inspection_verdict (a pass) and launch_training, with the causes the samples show.
"""

from __future__ import annotations

from mcp_server.config import FIELD
from mcp_server.runs import Run
from mcp_server.userfiles import read_json_if_present

NO_SIGNAL_SHARE = 0.5  # groups without spread at or over this share: GRPO has little or nothing to learn from


def zero_share(p: float, g: int) -> float:
    """The chance a group of g completions, each paid with probability p, has no spread."""
    return p ** g + (1 - p) ** g


def mostly_without_signal(share: float) -> bool:
    """The one rule: a share of groups without spread (measured or predicted) at which GRPO has little to learn."""
    return share >= NO_SIGNAL_SHARE


def review_signal_warning(result: dict) -> str | None:
    """The warning for a review (inspect_rewards' result, as review.json keeps it) whose groups mostly score alike,
    with the likely causes its samples show; None when most groups have spread."""
    groups, zero = result.get("num_prompts") or 0, result.get("zero_variance_groups") or 0
    if not groups or not mostly_without_signal(zero / groups):
        return None
    k, n = result.get("samples_per_prompt") or 0, result.get("num_samples") or 0
    causes = []
    cut, limit = result.get("truncated") or 0, (result.get("lengths") or {}).get("max_new_tokens")
    if n and mostly_without_signal(cut / n):
        at = f"{FIELD.max_completion_length}={limit}" if limit else FIELD.max_completion_length
        causes.append(f"{cut} of {n} reviewed completions were cut at {at} before they ended: an answer after the "
                      "cut is never paid, so a group of cut replies scores alike (raise max_completion_length from "
                      "the review's length advice, then sample and inspect again)")
    p = result.get("mean_success_rate")
    if isinstance(p, (int, float)) and k >= 2 and mostly_without_signal(zero_share(p, k)):
        causes.append(f"{p:.0%} of the samples succeed: a group of {k} has no spread with probability p^{k} + "
                      f"(1-p)^{k} = {zero_share(p, k):.0%} at that rate (more completions per prompt, easier "
                      "prompts, or SFT first)")
    if not causes:
        causes.append("the reward gives a group's completions the same score though they differ: read the groups "
                      "in review.md")
    return (f"{zero} of {groups} reviewed prompt groups ({zero / groups:.0%}) score alike (zero reward spread): a "
            "group without spread has zero advantage, so GRPO's gradient is 0 for it, and with most groups alike "
            "most steps train nothing (grad_norm 0; diagnose_run says no_reward_signal only after the first step). "
            "Likely: " + "; ".join(causes))


def launch_signal_warning(run: Run) -> str | None:
    """review_signal_warning for the review the run's gate passed on (inspection/review.json); None without one."""
    result = (read_json_if_present(run.review) or {}).get("result")  # the gate judged it: no file, no warning
    return review_signal_warning(result) if isinstance(result, dict) else None

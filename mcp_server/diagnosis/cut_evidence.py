"""Whether the completions cut at max_completion_length are the ones scoring lower: the evidence that decides whether
truncation explains groups that score alike (no_reward_signal, signal_lost) or a reward that never pays
(task_never_scores, reward_never_pays). Issue 49: half the completions cut, the uncut half scoring 0 too, was blamed
on the cut ("an easier task would not help"), though the completions that ended failed as well.

TRL logs no per-sample truncation flag (its completions table holds the prompt, the completion, each reward and the
advantage, not whether the completion ended), so the evidence is read from what each log measures:
`completions/clipped_ratio` (the cut share c), `reward` (the batch mean), `reward_std` (TRL's spread over the whole
batch) and the completions a log covers (per_device_train_batch_size x gradient_accumulation_steps x GPUs /
num_iterations per optimizer step, times the steps between logs). A log's reward is c x (the cut ones' mean) +
(1 - c) x (the finished ones' mean), so:

- too few finished completions (under MIN_UNCUT over the late half of the logs) cannot tell (lengthening the limit
  is what shows whether finished answers score): the cut is blamed for groups scoring alike only where nothing was
  paid either (success_rate.cut_is_cause: with a success rate to read, it says whether that rate predicts them);
- a log with both kinds and reward_std 0 scored every completion alike: the finished ones scored what the cut
  ones did, so the cut is not why they score alike;
- across logs whose cut share moves, the least-squares line of reward on the cut share gives both means (at c = 0
  and c = 1): the cut ones score lower only when its slope is below zero by more than two standard errors;
- a cut share that never moves, with rewards that differ, cannot say which kind scores lower: not blamed, said.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from mcp_server.config import FIELD
from mcp_server.diagnosis.context import Ctx, slope

# Finished completions (over the late half of the logs) under which the logs cannot tell whether they score
# differently from the cut ones: fewer than one group at the recipe's num_generations (4).
MIN_UNCUT = 4
ALIKE_STD = 1e-6  # a batch-wide reward_std at or under this scored every completion alike


@dataclass
class CutEvidence:
    """What the logs say about the cut completions' rewards against the finished ones'."""

    verdict: str  # too_few | lower | alike | not_lower | unknown
    cut: float  # the late cut share
    uncut: int  # finished completions over the late half of the logs (estimated from the cut share)
    logs: int  # logs in the late half
    cut_reward: float | None = None  # fitted mean reward of a cut completion (lower / not_lower)
    uncut_reward: float | None = None  # ... of a finished one; for alike, the reward every completion scored

    @property
    def blamed(self) -> bool:
        """Truncation may be the cause: the cut ones score lower, or too few completions ended to tell (for groups
        scoring alike, success_rate.cut_is_cause decides)."""
        return self.verdict in ("too_few", "lower")

    def because(self) -> str:
        """Why the cut is blamed, from the numbers (a clause)."""
        if self.verdict == "too_few":
            return (f"only about {self.uncut} completion(s) ended over the last {self.logs} log(s), too few to tell "
                    "whether finished ones would score any better: lengthening the limit is what shows it")
        return (f"the cut ones score lower: about {self.cut_reward:.3g} against {self.uncut_reward:.3g} for those "
                "that ended (the reward fitted on the cut share, which moved between logs)")

    def not_the_cause(self) -> str:
        """Why the cut is not named as the cause (a sentence), or "" when it is."""
        share = f"{self.cut:.0%} of the completions are cut at max_completion_length"
        if self.verdict == "alike":
            return (f" {share}, but the about {self.uncut} that ended scored the same as the cut ones (every "
                    f"completion at {self.uncut_reward:.3g}, reward_std 0): the cut is not why they score alike.")
        if self.verdict == "not_lower":
            return (f" {share}, but the cut ones do not score lower (about {self.cut_reward:.3g} against "
                    f"{self.uncut_reward:.3g} for those that ended, the reward fitted on the cut share): the cut is "
                    "not why they score alike.")
        if self.verdict == "too_few":
            return (f" {share}, and only about {self.uncut} completion(s) ended over the last {self.logs} log(s): too "
                    "few to tell whether finished ones would score better, so the cut is not named as the cause "
                    "(read the samples; lengthening the limit is what shows it).")
        if self.verdict == "unknown":
            return (f" {share}; whether the cut ones are the ones scoring lower the logs cannot tell (the cut share "
                    "did not move between logs): read the samples before lengthening the limit.")
        return ""


def completions_per_step(ctx: Ctx) -> float:
    """Completions generated per optimizer step (per_device_train_batch_size x gradient_accumulation_steps x GPUs /
    num_iterations)."""
    def number(key: str, fallback: int) -> int:
        value = ctx.get(key, fallback)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else fallback

    gpus = getattr(ctx.run.request, "num_gpus", None)
    return (number(FIELD.per_device_train_batch_size, 8) * number(FIELD.gradient_accumulation_steps, 1)
            * (gpus if isinstance(gpus, int) and gpus > 0 else 1) / number("num_iterations", 1))


def steps_per_log(ctx: Ctx) -> float:
    """Optimizer steps between logs (the median gap; 1 for a single log)."""
    steps = [r["step"] for r in ctx.run.rows]
    gaps = [b - a for a, b in zip(steps, steps[1:]) if b > a]
    return statistics.median(gaps) if gaps else 1


def completions_per_log(ctx: Ctx) -> float:
    """Completions one log covers: generated per optimizer step times the steps between logs."""
    return completions_per_step(ctx) * steps_per_log(ctx)


def cut_evidence(ctx: Ctx) -> CutEvidence | None:
    """The evidence (module doc); None when no log has both a cut share and a reward."""
    points = [(row["step"], row["completions/clipped_ratio"], row["reward"], row.get("reward_std"))
              for row in ctx.run.rows if _finite(row.get("completions/clipped_ratio")) and _finite(row.get("reward"))]
    if not points:
        return None
    late = points[-max(1, len(points) // 2):]
    n = completions_per_log(ctx)
    uncut = round(sum((1 - c) * n for _, c, _, _ in late))
    cut = statistics.fmean(c for _, c, _, _ in late)
    found = CutEvidence("unknown", cut, uncut, len(late))
    if uncut < MIN_UNCUT:
        found.verdict = "too_few"
        return found
    alike = [(c, r) for _, c, r, std in late if 0 < c < 1 and _finite(std) and std <= ALIKE_STD]
    if sum((1 - c) * n for c, _ in alike) >= max(MIN_UNCUT, uncut / 2):
        found.verdict, found.uncut_reward = "alike", alike[-1][1]
        return found
    if len(points) >= 3 and len({c for _, c, _, _ in points}) >= 2:
        b, se = slope([(c, r) for _, c, r, _ in points])
        cs, rs = [c for _, c, _, _ in points], [r for _, _, r, _ in points]
        found.uncut_reward = statistics.fmean(rs) - b * statistics.fmean(cs)  # the fitted line at c = 0 ...
        found.cut_reward = found.uncut_reward + b  # ... and at c = 1
        found.verdict = "lower" if b < -1e-9 and -b > 2 * se else "not_lower"
    return found


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

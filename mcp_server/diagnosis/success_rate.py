"""Whether a low success rate explains the groups with zero reward spread (walk 9: 1 prompt per step x 8 completions,
a reward paying about 3% at the base, 2 of 3 logged groups without spread, was blamed on truncation with "more
generations or an easier task would not help", and chained to the learning rate).

A group of G completions, each paid with probability p, has zero spread with probability p^G + (1-p)^G (all fail
or all pass): at p = 0.03 and G = 8, 0.78. p is read from the logged reward means on the reward's range (a reward
whose logged mean and batch-wide reward_std fit one paying 0 or 1 is read as binary; another on [0, 1] widened to
the logged means: a two-point reading at the range's ends, the most mass at the floor a mean allows). The groups
the observed share rests on are the logs times the groups each log covers (completions per log / G); the observed
count of zero-spread groups is within what p predicts unless a count as high has under FIT_LEVEL chance
(binomial). Within it, and with something paid (p > 0), the low success rate is the cause: more completions per
prompt, more prompts per step, an easier curriculum or an SFT warm start help, with the figures. Truncation is
blamed for the same groups only with evidence (cut_evidence: the cut ones score lower), or where nothing was paid
and too few completions ended to tell (no success rate to read: the cut may hide every answer).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from mcp_server.config import FIELD
from mcp_server.diagnosis.context import KL_WARN_FLOOR, Ctx
from mcp_server.diagnosis.cut_evidence import CutEvidence, completions_per_step, cut_evidence, steps_per_log
from mcp_server.inspection.signal_share import mostly_without_signal, zero_share

FIT_LEVEL = 0.05  # a zero-spread count at least this likely under p is within what p predicts
FEW_GROUPS = 20  # under this many groups the observed share tells little (the finding says so)
BINARY_TOLERANCE = 0.05  # |reward_std - the std a 0/1 reward with that mean gives| within which a log reads binary
HALF = 0.5  # the share of groups with spread the advice's figures aim at
# Zero-spread groups after the KL grew past KL_WARN_FLOOR that let a high learning rate explain them
MIN_LINK_GROUPS = 8


@dataclass
class SuccessRate:
    """The low-success reading of a run's zero-spread groups."""

    p: float  # the estimated chance a completion is paid
    low: float  # the reward's range the mean is read on
    high: float
    binary: bool  # the logs fit a reward paying 0 or 1
    mean: float  # the logged reward mean, over the logs read
    generations: int  # G
    groups_per_step: float
    groups: int  # groups the observed share rests on
    zero: int  # of them, without spread
    expected: float  # p^G + (1-p)^G
    chance: float  # the chance of at least `zero` of `groups` under `expected`

    @property
    def fits(self) -> bool:
        """Something was paid, something was not, and the observed zero-spread count is within what p predicts."""
        return 0 < self.p < 1 and self.chance >= FIT_LEVEL

    def explanation(self, share: float) -> str:
        p, g = self.p, self.generations
        reading = ("a reward paying 0 or 1" if self.binary else
                   f"read on the range {self.low:g} to {self.high:g} the logs show, paid at its top or not")
        few = "; so few groups tell little" if self.groups < FEW_GROUPS else ""
        per_step = max(1, round(self.groups_per_step))
        more_prompts = max(2 * per_step, 8)
        target = 1 - HALF ** (1 / g)  # the success rate at which half the groups have spread at this G
        rare = min(p, 1 - p)  # the rarer outcome: success on a hard task, failure on a nearly solved one
        needed = math.ceil(math.log(HALF) / math.log(1 - rare)) if rare < 1 - HALF ** (1 / 2) else 2
        if p > HALF:  # nearly every completion paid: the groups that all pass teach nothing
            return (f"{share:.0%} of the groups had zero reward spread, which a high success rate predicts: the "
                    f"logged reward mean {self.mean:.3g} ({reading}) reads as about {p:.1%} of completions paid, and "
                    f"a group of {g} has no spread with probability p^{g} + (1-p)^{g} = {self.expected:.0%} (the "
                    f"share rests on {self.groups} group(s){few}). The task is nearly solved for this model: a harder "
                    f"curriculum, or more completions per prompt (about {needed} give half the groups spread). ")
        return (f"{share:.0%} of the groups had zero reward spread, which a low success rate predicts: the logged "
                f"reward mean {self.mean:.3g} ({reading}) reads as about {p:.1%} of completions paid, and a group of "
                f"{g} has no spread with probability p^{g} + (1-p)^{g} = {self.expected:.0%}. The share rests on "
                f"{self.groups} group(s) ({self.zero} without spread){few}; a count as high has "
                f"{self.chance:.0%} chance at that rate, within what it predicts. More samples per success are what "
                f"help: at num_generations {2 * g} about {zero_share(p, 2 * g):.0%} of groups would have no spread "
                f"(about {needed} completions per prompt give half the groups spread); more prompts per step (now "
                f"{per_step} group(s) per step, each with spread at {1 - self.expected:.0%} chance: with "
                f"{more_prompts}, a step has at least one with spread at {1 - self.expected ** more_prompts:.0%}); "
                f"or an easier curriculum or an SFT warm start, raising the base success rate to about {target:.0%} "
                f"gives half the groups spread at {g} completions. ")


def at_least(k: int, n: int, q: float) -> float:
    """P(X >= k) for X ~ Binomial(n, q)."""
    return min(1.0, sum(math.comb(n, i) * q ** i * (1 - q) ** (n - i) for i in range(max(0, k), n + 1)))


def _binary(rows: list[tuple[float, float, float | None]], n: float) -> bool:
    """Every log fits a reward paying 0 or 1: its mean in [0, 1] and its batch-wide std the one such a reward gives
    (TRL's unbiased std over the log's n completions)."""
    for _, mean, std in rows:
        if not -1e-9 <= mean <= 1 + 1e-9:
            return False
        if std is not None and n >= 2:
            want = math.sqrt(max(0.0, mean * (1 - mean)) * n / (n - 1))
            if abs(std - want) > BINARY_TOLERANCE * max(1.0, want):
                return False
    return True


def success_rate(ctx: Ctx, metric: str = "frac_reward_zero_std") -> SuccessRate | None:
    """The reading (module doc); None without num_generations, the zero-spread share or the reward logged."""
    g = ctx.get(FIELD.num_generations)
    if not isinstance(g, int) or isinstance(g, bool) or g < 2:
        return None
    rows = [(r[metric], r["reward"], r.get("reward_std")) for r in ctx.run.rows
            if _finite(r.get(metric)) and _finite(r.get("reward"))]
    if not rows:
        return None
    per_step = completions_per_step(ctx) / g
    per_log = max(1, round(per_step * steps_per_log(ctx)))
    rows = [(f, m, s if _finite(s) else None) for f, m, s in rows]
    binary = _binary(rows, per_log * g)
    means = [m for _, m, _ in rows]
    low, high = (0.0, 1.0) if binary else (min(0.0, min(means)), max(1.0, max(means)))
    mean = statistics.fmean(means)
    p = min(1.0, max(0.0, (mean - low) / (high - low)))
    groups = per_log * len(rows)
    zero = round(sum(min(1.0, max(0.0, f)) * per_log for f, _, _ in rows))
    expected = zero_share(p, g)
    return SuccessRate(p, low, high, binary, mean, g, per_step, groups, zero, expected,
                       at_least(zero, groups, expected))


def cut_is_cause(cut: CutEvidence | None, rate: SuccessRate | None) -> bool:
    """Whether truncation is why groups score alike: the cut ones score lower (the evidence), or too few ended to
    tell while nothing was paid (no success rate to read). Too few to tell with something paid is not enough."""
    if cut is None:
        return False
    if cut.verdict == "lower":
        return True
    return cut.verdict == "too_few" and (rate is None or rate.p <= 0)


def cut_explains(ctx: Ctx, effect: str) -> bool:
    """Whether completions_truncated can cause `effect`: groups scoring alike (cut_is_cause) or a reward that never
    pays (where the evidence blames the cut) only with evidence; its other effects (a falling or flat reward) as the
    registry declares."""
    if effect not in ("no_reward_signal", "signal_lost", "task_never_scores", "reward_never_pays"):
        return True
    found = cut_evidence(ctx)
    if found is None:
        return True
    if effect in ("no_reward_signal", "signal_lost"):
        return cut_is_cause(found, success_rate(ctx))
    return found.blamed


def spread_lost_after_kl(ctx: Ctx) -> bool:
    """Whether a high learning rate's evidence covers the zero-spread groups: they appear once the KL has grown (past
    KL_WARN_FLOOR: the policy moved off the reference), on at least MIN_LINK_GROUPS groups, at a higher share than
    before. A KL that never grew, or 2 groups after it, do not tie the groups to the rate."""
    g = ctx.get(FIELD.num_generations)
    g = g if isinstance(g, int) and not isinstance(g, bool) and g >= 1 else 1
    per_log = max(1.0, completions_per_step(ctx) / g * steps_per_log(ctx))
    rows = [(r["kl"], min(1.0, max(0.0, r["frac_reward_zero_std"]))) for r in ctx.run.rows
            if _finite(r.get("kl")) and _finite(r.get("frac_reward_zero_std"))]
    grown = next((i for i, (kl, _) in enumerate(rows) if kl >= KL_WARN_FLOOR), None)
    if grown is None:
        return False
    before, after = [f for _, f in rows[:grown]], [f for _, f in rows[grown:]]
    return (sum(after) * per_log >= MIN_LINK_GROUPS
            and statistics.fmean(after) > (statistics.fmean(before) if before else 0.0))


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def baseline_signal_warning(passed: int, n: int, group: int, given: str) -> str | None:
    """The warning for a base model's pass rate at which GRPO has little or nothing to learn from: most groups of
    `group` completions (`given`: where that size came from) all fail alike, so have no advantage (walk 10: a 0/40
    baseline said nothing; the sampling round after it routed to SFT first). None when most groups have spread."""
    if not n or passed / n > 0.5:
        return None
    share = zero_share(passed / n, group)
    if not mostly_without_signal(share):  # the rule the review's measured share is held to (inspection.signal_share)
        return None
    cannot = "cannot learn" if passed == 0 else "has little to learn"
    return (f"a greedy pass rate of {passed}/{n}: if its sampled completions fare alike, GRPO {cannot} from this "
            f"task for this model. A group of {group} "
            f"completions ({given}) has no spread with probability p^{group} + (1-p)^{group} = {share:.0%} at "
            f"p = {passed / n:.0%}, and a group without spread has no advantage. The way on: SFT first (a warm "
            "start on worked answers), or an easier curriculum (prompts it solves sometimes), then measure again; "
            "sample_completions and inspect_rewards measure the sampled rate the gate routes on")


def more_generations_patch(ctx: Ctx) -> dict:
    """Twice the completions per prompt with the same prompts per optimizer step and the same policy lag: twice the
    gradient accumulation (each micro-batch keeps its size, so memory does not grow; a step takes about twice as
    long), and twice any generation structure the config sets, so an on-policy run stays on-policy (doubling the
    generation batch alone made it off-policy). patch_effects states what it changes."""
    g = int(ctx.get(FIELD.num_generations))
    accumulation = ctx.get(FIELD.gradient_accumulation_steps)
    patch: dict = {FIELD.num_generations: 2 * g,
                   FIELD.gradient_accumulation_steps: 2 * (accumulation if isinstance(accumulation, int) else 1)}
    for key in ("generation_batch_size", "steps_per_generation"):
        if isinstance(ctx.config.get(key), int):
            patch[key] = 2 * ctx.config[key]
    return patch

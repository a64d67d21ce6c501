"""Family 'signal': whether the GRPO advantage carries anything (zero-spread groups, a lost signal, a falling or
flat reward)."""

from __future__ import annotations

import math
import statistics

from mcp_server.config import FIELD
from mcp_server.diagnosis.context import (
    SIGNAL_LOST_LOGS,
    shown,
    CLIPPED_ERROR,
    CORRECTNESS_NAME,
    Ctx,
    FLAT_MIN_POINTS,
    ZERO_STD_ERROR,
    ZERO_STD_WARN,
    ends,
    finding,
    finite,
    first_last,
    significant_change,
    slope,
)
from mcp_server.diagnosis.cut_evidence import cut_evidence
from mcp_server.diagnosis.environment import training_ended
from mcp_server.diagnosis.samples import rule_never_terminate
from mcp_server.diagnosis.success_rate import (cut_is_cause, more_generations_patch, spread_lost_after_kl,
                                               success_rate)
from mcp_server.recipe.models import DEFAULT_EXTRA_ROUNDS, MAX_EXTRA_ROUNDS
from mcp_server.diagnosis.models import DiagnosisFinding, Evidence


def rule_no_signal(ctx: Ctx) -> list[DiagnosisFinding]:
    # a run with dynamic sampling trains on the kept groups: their zero-spread share is the one that counts
    metric = KEPT if ctx.finite_series(KEPT) else "frac_reward_zero_std"
    frac = ctx.finite_series(metric)
    std = ctx.finite_series("reward_std")
    if frac:
        share = statistics.fmean(v for _, v in frac)
        late = ends([v for _, v in frac], 0.5)[1]
        evidence = [Evidence(metric=metric, step=frac[0][0], value=frac[0][1]),
                    Evidence(metric=metric, step=frac[-1][0], value=frac[-1][1])]
    elif std:
        share = sum(v <= 1e-6 for _, v in std) / len(std)
        late = share
        evidence = []
    else:
        return []
    if std:
        evidence.append(Evidence(metric="reward_std", step=std[-1][0], value=std[-1][1]))
    if share < ZERO_STD_ERROR and late < ZERO_STD_WARN:
        return []
    rewards = finite(v for _, v in ctx.series("reward"))
    constant = bool(rewards) and max(rewards) - min(rewards) < 1e-9 and all(v <= 1e-6 for _, v in std)
    clipped = [v for _, v in ctx.finite_series("completions/clipped_ratio")]
    # the cut is the cause only where the logs say the cut ones score lower, or nothing was paid and too few ended
    # to tell (issue 49; walk 9: too few to tell, with a low success rate that predicts the share, is not enough)
    cut = cut_evidence(ctx) if clipped and ends(clipped, 0.5)[1] >= CLIPPED_ERROR else None
    rate = success_rate(ctx) if metric != KEPT else None
    cause = ("completions_never_terminate" if rule_never_terminate(ctx) else
             "completions_truncated" if cut_is_cause(cut, rate) else None)
    if cause:
        measured = (f"{ends(clipped, 0.5)[1]:.0%} of the completions cut at the end" if clipped else
                    "the completions never end")  # said as measured: the cause's own finding may not be listed
        why = f"; {cut.because()}" if cause == "completions_truncated" and cut is not None else ""
        sure = cause != "completions_truncated" or (cut is not None and cut.verdict == "lower")
        found = finding("no_reward_signal", "error" if share >= ZERO_STD_ERROR else "warning", evidence,
                        f"{share:.0%} of the groups had zero reward spread, because their completions are cut at "
                        f"max_completion_length and all scored alike ({measured}{why}): fix that first."
                        + (" More generations or an easier task would not help." if sure else
                           " No completion was paid, so no success rate can be read from these logs."))
        found.caused_by = cause
        return [found]
    note = cut.not_the_cause() if cut is not None else ""
    if rate is not None and rate.fits and not constant and not spread_lost_after_kl(ctx):  # not a collapse's
        return [finding("no_reward_signal", "error" if share >= ZERO_STD_ERROR else "warning", evidence,
                        rate.explanation(share) + dynamic_sampling_advice(share, False) + note,
                        more_generations_patch(ctx))]
    if constant:
        evidence.append(Evidence(metric="reward", step=ctx.series("reward")[-1][0], value=rewards[-1]))
        if rewards[0] == 0:
            why = ("Every completion scores 0: the task is too hard for the model, or the reward never matches "
                   "(a format the model does not produce). Check the base success rate from the inspection; SFT "
                   "first when it is zero. The patch samples more completions per prompt to find rare successes.")
        else:
            why = (f"The reward is constant ({rewards[0]:g}) for every completion: the reward function ignores the "
                   "completion (broken, or the task is already solved). No config change helps: fix the reward and "
                   "re-run the inspection gate.")
    else:
        why = ("Most groups give all their completions the same reward, so their advantage is zero and they "
               "teach nothing. Raise num_generations (the patch doubles it, with twice the gradient accumulation: "
               "the same prompts per optimizer step, still on-policy), raise "
               "temperature, or make the reward graded (partial credit). "
               + dynamic_sampling_advice(share, metric == KEPT))
    patch = {} if constant and rewards[0] != 0 else more_generations_patch(ctx)
    return [finding("no_reward_signal", "error" if share >= ZERO_STD_ERROR else "warning", evidence,
                    f"{share:.0%} of the groups had zero reward spread. " + why + note, patch)]


# logged by the trainer's dynamic sampling (recipe/dynamic_sampling_trainer.py)
KEPT = "dynamic_sampling/zero_std_kept"


def dynamic_sampling_advice(share: float, on: bool) -> str:
    """What DAPO's dynamic sampling would do about a zero-spread `share`, and its cost (`on`: the run has it and
    still trained on zero-spread groups: its cap was reached)."""
    if on:
        return ("Dynamic sampling is on and still filled batches with zero-spread groups: it reached its cap of extra "
                "generation rounds (dynamic_sampling/extra_rounds): raise max_extra_rounds (emit again with "
                "dynamic_sampling), or make the task's difficulty fit the model.")
    expected = 1 / max(1e-9, 1 - share)  # generation batches drawn, on average, to fill one with spread
    rounds = min(MAX_EXTRA_ROUNDS, max(DEFAULT_EXTRA_ROUNDS, math.ceil(expected - 1e-9)))
    return (f"Or train only on groups with spread: emit again with dynamic_sampling: {{max_extra_rounds: {rounds}}} "
            "(DAPO's dynamic sampling, in train.py; on by default for the dapo variant): zero-spread groups are "
            "dropped and the batch refilled with fresh prompts; its cost is generation: at this share about "
            f"{min(expected, 1 + rounds):.1f}x TRL's per step (1 / (1 - share), at most {1 + rounds}x), memory "
            "unchanged" + ("; at this share even that cap would often be reached, so fix the difficulty first."
                           if expected > 1 + rounds else "."))


def rule_reward_falling(ctx: Ctx) -> list[DiagnosisFinding]:
    names = ["reward"] + [k for k in sorted(ctx.run.metric_names())
                          if k.startswith("rewards/") and k.endswith("/mean") and CORRECTNESS_NAME.search(k)]
    falling = []
    for name in names:
        points = ctx.finite_series(name)
        change = significant_change(points)
        spread = [v for _, v in ctx.finite_series("reward_std" if name == "reward" else name[:-5] + "/std")]
        scale = max(sum(spread) / len(spread) / 2 if spread else 0.0, 0.05 * abs(points[0][1]) if points else 0.0, 1e-6)
        if change < 0 and -change >= scale:
            falling.append((name, change))
    if not falling:
        return []
    evidence = [e for name, _ in falling for e in first_last(ctx, name)]
    what = ", ".join(f"{n} {c:+.3g}" for n, c in falling)
    return [finding("reward_falling", "warning", evidence,
                    f"The reward is falling ({what} over the run): the policy is getting worse at the task. Read the "
                    "latest samples first, then the findings ranked above (mismatch, entropy, learning rate). Do not "
                    "raise the learning rate or train longer; no config change is justified by the fall alone.")]


def rule_flat(ctx: Ctx) -> list[DiagnosisFinding]:
    reward = ctx.finite_series("reward")
    std = finite(v for _, v in ctx.series("reward_std"))
    if len(reward) < FLAT_MIN_POINTS or not std or statistics.fmean(std) <= 1e-6:
        return []  # too early to call it flat, or no signal at all (no_reward_signal says so)
    # reward_std is TRL's spread over the whole batch (grpo_trainer: nanstd(rewards)): it is above 0 when groups
    # differ from each other even if every group is uniform. frac_reward_zero_std says whether groups have spread.
    zero = [v for _, v in ctx.finite_series("frac_reward_zero_std")]
    if zero and ends(zero, 0.5)[1] >= ZERO_STD_WARN:
        return []  # the groups have no spread: no_reward_signal, not a flat reward
    span = reward[-1][0] - reward[0][0]
    b, se = slope(reward)
    change, noise = b * span, se * span
    spread = statistics.fmean(std)
    # Flat: no significant upward trend (under two standard errors of the fitted change) and no sizeable one
    # either (the batch's reward std, averaged over the run).
    if change >= 2 * noise or change >= spread or change <= -2 * noise:
        return []  # rising, or falling (reward_falling says so): not flat
    early, late = ends([v for _, v in reward])
    evidence = [Evidence(metric="reward", step=reward[0][0], value=reward[0][1]),
                Evidence(metric="reward", step=reward[-1][0], value=reward[-1][1]),
                Evidence(metric="reward_std (mean)", value=round(spread, 6))]
    lr, _ = ctx.learning_rate
    low, high = ctx.lr_range()
    away = ctx.moving_away()
    patch = {FIELD.learning_rate: min(2 * lr, high)} if lr and 2 * lr <= high and not away and not ctx.diverged else {}
    caution = (f" Do not raise the learning rate: {'; '.join(away)}." if away else "")
    return [finding("reward_flat", "warning", evidence,
                    f"Over {span} steps the mean reward moved {change:+.3g} (first third {early:.3g}, last third "
                    f"{late:.3g}) although rewards vary (mean reward_std {spread:.3g}, TRL's batch-wide spread"
                    + (f"; {1 - statistics.fmean(zero):.0%} of groups have spread" if zero else "") + "). Check the "
                    "learning rate (too low?), whether a format reward drowns the task reward, and whether the model "
                    "can improve at all (base success rate). Train longer only if the trend is positive." + caution,
                    patch)]


def _zero_update(row: dict) -> bool:
    """A log whose every group had zero reward spread and whose update had no gradient."""
    frac, std, grad = row.get("frac_reward_zero_std"), row.get("reward_std"), row.get("grad_norm")
    spread_gone = (frac is not None and frac >= 1 - 1e-9) or (frac is None and std is not None and std <= 1e-9)
    return spread_gone and grad is not None and abs(grad) <= 1e-12


def _no_reward(row: dict) -> bool:
    """A log whose reward is missing or NaN: no reward function scored anything."""
    reward = row.get("reward")
    return "reward" in row and (reward is None or not math.isfinite(reward))


def rule_signal_lost(ctx: Ctx) -> list[DiagnosisFinding]:
    """The run is learning nothing: SIGNAL_LOST_LOGS logs in a row after the run's first (which precedes its first
    update; a resumed launch's first line does not) with every group at zero spread and grad_norm 0, or no reward
    at all. Once training has ended, every log after the first is enough, however few (a 2-step run's one update).
    A guard stop: every further step is wasted compute."""
    first = ctx.run.first_step if ctx.run.first_step is not None else next((r["step"] for r in ctx.run.rows), None)
    rows = [r for r in ctx.run.rows if r["step"] != first]
    need = SIGNAL_LOST_LOGS
    if training_ended(ctx.run.home) is not None:  # the run has ended: no more logs are coming
        need = max(1, min(need, len(rows)))
    tail = rows[-need:]
    if len(tail) < need:
        return []
    if all(_no_reward(r) for r in tail):
        why, metrics = "no reward function scored any completion (reward NaN)", ("reward",)
    elif all(_zero_update(r) for r in tail):
        why, metrics = ("every group had zero reward spread and the update had no gradient (grad_norm 0)",
                        ("frac_reward_zero_std", "reward_std", "grad_norm", "reward"))
    else:
        return []
    evidence = [Evidence(metric=m, step=r["step"], value=shown(r[m])) for r in (tail[0], tail[-1]) for m in metrics
                if r.get(m) is not None]
    when = (f"For the last {len(tail)} logs (steps {tail[0]['step']}-{tail[-1]['step']})" if len(tail) > 1 else
            f"At step {tail[0]['step']} (the only log after the run's first; training has ended)")
    return [finding("signal_lost", "error", evidence,
                    f"{when} {why}: the run "
                    "learns nothing and every further step is wasted. Read the samples at the first of these steps; "
                    "the cause ranked above (a broken update, completions cut or never ending, a reward that "
                    "returns None) is what to fix. No config change follows from the lost signal alone.")]

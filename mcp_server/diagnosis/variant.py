"""Family 'variant': variant symptoms and reward hacking (length bias, a reward that climbs alone), and the
note on GRPO's near-zero loss."""

from __future__ import annotations

import statistics

from mcp_server.config import FIELD
from mcp_server.diagnosis.context import (
    first_last,
    significant_change,
    CLIPPED_WARN,
    CORRECTNESS_NAME,
    Ctx,
    LENGTH_CORR,
    LENGTH_RISE,
    LOSS_ZERO,
    correlation,
    ends,
    finding,
    finite,
)
from mcp_server.diagnosis.models import DiagnosisFinding, Evidence


def _rises_with(ctx: Ctx, name: str, length: dict) -> float | None:
    """The correlation of a rising metric with the completion length, None when it does not rise with it."""
    points = dict(ctx.finite_series(name))
    steps = sorted(set(points) & set(length))
    if len(steps) < 5:
        return None
    values = [points[s] for s in steps]
    corr = correlation(values, [length[s] for s in steps])
    early, late = ends(values)
    return corr if corr is not None and corr >= LENGTH_CORR and late > early else None


def rule_length(ctx: Ctx) -> list[DiagnosisFinding]:
    """Completions grow with a reward that pays for length while correctness stays flat. A run whose correctness
    rises with its length learns to reason longer (R1-like): not a finding. Read per reward (rewards/<name>/mean)
    when logged; on the total reward alone the two cannot be told apart, and the finding says so."""
    length = dict(ctx.finite_series("completions/mean_length"))
    values = [length[s] for s in sorted(length)]
    if len(values) < 5 or ends(values)[1] < LENGTH_RISE * ends(values)[0]:
        return []
    names = sorted(k[len("rewards/"):-len("/mean")] for k in ctx.run.metric_names()
                   if k.startswith("rewards/") and k.endswith("/mean"))
    correctness = [n for n in names if CORRECTNESS_NAME.search(n)]
    if any(significant_change(ctx.finite_series(f"rewards/{n}/mean")) > 0 for n in correctness):
        return []  # correctness rises as completions grow: the model learns to reason longer
    candidates = [f"rewards/{n}/mean" for n in names if n not in correctness] if names else ["reward"]
    payers = [(m, c) for m in candidates if (c := _rises_with(ctx, m, length)) is not None]
    if not payers:
        return []
    steps = sorted(length)
    evidence = [Evidence(metric="completions/mean_length", step=steps[0], value=length[steps[0]]),
                Evidence(metric="completions/mean_length", step=steps[-1], value=length[steps[-1]])]
    for metric, corr in payers:
        evidence += first_last(ctx, metric)
        evidence.append(Evidence(metric=f"correlation({metric}, completions/mean_length)", value=round(corr, 3)))
    for name in correctness:
        evidence += first_last(ctx, f"rewards/{name}/mean")
    clipped = ctx.finite_series("completions/clipped_ratio")
    at_cap = bool(clipped) and ends([v for _, v in clipped], 0.5)[1] >= CLIPPED_WARN
    if at_cap:  # completions piling up at the length cap: the truncation is this finding's effect
        evidence += first_last(ctx, "completions/clipped_ratio")
    loss_type = ctx.get(FIELD.loss_type)
    patch = ctx.variant_patch("dr_grpo") if loss_type == "grpo" else {}
    paying = ", ".join(m for m, _ in payers)
    what = (f"{paying} rises with the length while correctness ({', '.join(correctness)}) stays flat: the reward "
            "pays for length, not for solving the task" if names and correctness else
            f"{paying} rises with the length" + (" and no correctness reward is logged to tell a reward that pays "
                                                 "length from a model that learns to reason longer: read the samples"
                                                 if names else " (only the total reward is logged: "
                                                 "rewards/<name>/mean would tell a reward that pays length from a "
                                                 "model that learns to reason longer; read the samples)"))
    fix = ("The loss is 'grpo', whose per-sequence normalisation favours long completions: the patch switches to "
           "Dr.GRPO (emit_grpo_config with symptom=length_bias)." if patch else
           f"The loss ({loss_type}) has no length bias of its own: fix the reward (a length penalty, or pay only "
           "for the answer) and re-inspect; no config change fixes it.")
    if at_cap:
        fix += (" Completions now pile up at max_completion_length: a longer limit would only feed the same "
                "reward.")
    return [finding("length_reward_correlation", "warning", evidence,
                    f"Completion length rose {ends(values)[0]:.3g} -> {ends(values)[1]:.3g} tokens; {what}. " + fix,
                    patch)]


def rule_hacking(ctx: Ctx) -> list[DiagnosisFinding]:
    names = sorted({k[len("rewards/"):-len("/mean")] for k in ctx.run.metric_names()
                    if k.startswith("rewards/") and k.endswith("/mean")})
    correctness = [n for n in names if CORRECTNESS_NAME.search(n)]
    others = [n for n in names if n not in correctness]
    evidence: list[Evidence] = []
    reasons = []
    if correctness and others:
        correct_change = {}
        for name in correctness:
            values = finite(v for _, v in ctx.series(f"rewards/{name}/mean"))
            if len(values) >= 4:
                early, late = ends(values)
                if late < 0.9:  # a correctness reward already near its 0/1 ceiling is not "stuck"
                    correct_change[name] = late - early
        for name in others:
            points = ctx.finite_series(f"rewards/{name}/mean")
            if len(points) < 4 or not correct_change:
                continue
            early, late = ends([v for _, v in points])
            spread = finite(v for _, v in ctx.series(f"rewards/{name}/std"))
            scale = max(statistics.fmean(spread) if spread else 0.0, 0.1 * abs(early), 1e-6)
            climbing = late - early > 0.5 * scale
            stuck = all(change <= 0.02 for change in correct_change.values())
            if climbing and stuck:
                evidence += [Evidence(metric=f"rewards/{name}/mean", step=points[0][0], value=points[0][1]),
                             Evidence(metric=f"rewards/{name}/mean", step=points[-1][0], value=points[-1][1])]
                reasons.append(f"'{name}' climbed {early:.3g} -> {late:.3g} while "
                               + ", ".join(f"'{c}' changed {d:+.3g}" for c, d in correct_change.items()))
        if reasons:  # the correctness side of the evidence, once
            for cname in correct_change:
                cpoints = ctx.finite_series(f"rewards/{cname}/mean")
                evidence += [Evidence(metric=f"rewards/{cname}/mean", step=cpoints[0][0], value=cpoints[0][1]),
                             Evidence(metric=f"rewards/{cname}/mean", step=cpoints[-1][0], value=cpoints[-1][1])]
    kl = ctx.finite_series("kl")
    reward = ctx.finite_series("reward")
    if kl and len(reward) >= 4 and max(v for _, v in kl) >= ctx.kl_bounds[0]:
        r_early, r_late = ends([v for _, v in reward])
        if r_late > r_early:
            peak = max(kl, key=lambda p: p[1])
            evidence += [Evidence(metric="kl", step=peak[0], value=peak[1]),
                         Evidence(metric="reward", step=reward[-1][0], value=reward[-1][1])]
            reasons.append(f"KL jumped to {peak[1]:.3g} while the reward rose {r_early:.3g} -> {r_late:.3g}")
    if not reasons:
        return []
    return [finding("possible_reward_hacking", "warning", evidence,
                    "; ".join(reasons) + ". The policy may have found a way to score without doing the task. Stop the "
                    "run, sample completions from the latest checkpoint, fix the reward and pass the inspection gate "
                    "again; no config change fixes a reward that can be gamed.")]


def rule_loss_near_zero(ctx: Ctx) -> list[DiagnosisFinding]:
    loss = ctx.finite_series("loss")
    if not loss or not ctx.series("reward"):  # only GRPO runs log a reward
        return []
    start = loss[: min(3, len(loss))]
    if any(abs(v) > LOSS_ZERO for _, v in start):
        return []
    return [finding("loss_near_zero_expected", "info",
                    [Evidence(metric="loss", step=s, value=v) for s, v in start],
                    "GRPO's loss is near zero at the start: with group-normalised advantages the policy-gradient term "
                    "averages to about zero (and the KL term starts at zero). Normal, not a bug: watch reward, "
                    "reward_std and frac_reward_zero_std instead.")]

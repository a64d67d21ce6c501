"""Diagnosis rules that read the logged metrics (and the config): divergence in the triage order, the GRPO
signal, the variants' symptoms, reward hacking, and the expected near-zero loss."""

from __future__ import annotations

import math
import re
import statistics

from mcp_server.training.diagnosis_context import (
    CLIPPED_ERROR,
    CLIPPED_WARN,
    CORRECTNESS_NAME,
    ENTROPY_COLLAPSE_ERROR,
    ENTROPY_DROP,
    FLAT_MIN_POINTS,
    LENGTH_CORR,
    LENGTH_RISE,
    LOSS_ZERO,
    ZERO_STD_ERROR,
    ZERO_STD_WARN,
    Ctx,
    significant_change,
    correlation,
    ends,
    finding,
    finite,
    shown,
    slope,
)
from mcp_server.training.log_rules import log_hits, log_line
from mcp_server.training.models import DiagnosisFinding, Evidence
from mcp_server.training.stability_rules import rule_never_terminate
from mcp_server.model_ref import is_moe

# ---------------------------------------------------------------- divergence, in the skill's order
def rule_fp16(ctx: Ctx) -> list[DiagnosisFinding]:
    if not ctx.config.get("fp16") or ctx.gpu_has_bf16 is False:
        return []
    evidence = [Evidence(metric="fp16 (config)", value=True)]
    gpu = ctx.run.request.get("gpu")
    where = f"the {gpu} supports bf16" if gpu and ctx.gpu_has_bf16 else "bf16 is available on every Ampere-or-newer GPU"
    if ctx.diverged:
        bad = ctx.first_nonfinite("loss") or ctx.first_nonfinite("grad_norm")
        if bad:
            evidence.append(
                Evidence(
                    metric="loss" if ctx.first_nonfinite("loss") else "grad_norm", step=bad[0], value=shown(bad[1])
                )
            )
        return [finding("fp16_divergence", "error", evidence,
                        f"The run trained in fp16 and diverged; {where}. fp16's narrow range overflows/underflows "
                        "GRPO's ratio and KL terms. Fix precision first, then re-check the learning rate.",
                        {"fp16": False, "bf16": True})]
    return [finding("fp16_divergence", "warning", evidence,
                    f"The run trains in fp16 where {where}; GRPO in fp16 diverges silently. Switch to bf16.",
                    {"fp16": False, "bf16": True})]


def rule_learning_rate(ctx: Ctx) -> list[DiagnosisFinding]:
    """A rate outside the settled range is a note on a healthy run (a small model or one trained from scratch may
    need it), a warning when the run shows a symptom it explains, an error when the run diverged."""
    lr, evidence = ctx.learning_rate
    if lr is None:
        return []
    low, high = ctx.lr_range()
    if low <= lr <= high:
        return []
    mode = ctx.fine_tune_mode or "full or LoRA (the config is unknown)"
    recipe = ctx.recipe_lr()
    away = ctx.moving_away()
    if lr > high:
        severity = "error" if ctx.diverged else "warning" if away else "info"
        what = ("and the run diverged" if ctx.diverged else f"and {'; '.join(away)}" if away else
                "but the run's metrics are healthy: a note, not a symptom (a small model or training from scratch "
                "can need it); lower it if a divergence finding appears")
        return [finding("lr_out_of_range", severity, [evidence],
                        f"learning_rate={lr:g} is above GRPO's settled range for {mode} fine-tuning "
                        f"({low:g}-{high:g}), "
                        f"{what}. RL updates at supervised rates destroy the policy; the patch sets the recipe's rate.",
                        {"learning_rate": recipe})]
    flat = significant_change(ctx.finite_series("reward")) <= 0 and len(ctx.finite_series("reward")) >= 4
    if away:  # raising the rate on a run that is getting worse would make it worse
        return [finding("lr_out_of_range", "info", [evidence],
                        f"learning_rate={lr:g} is below GRPO's settled range for {mode} fine-tuning "
                        f"({low:g}-{high:g}), "
                        f"but {'; '.join(away)}: raising it now would make that worse, so no patch. Look at the "
                        "findings above first.")]
    return [finding("lr_out_of_range", "warning" if flat else "info", [evidence],
                    f"learning_rate={lr:g} is below GRPO's settled range for {mode} fine-tuning ({low:g}-{high:g})"
                    + (": the reward is not moving. " if flat else ": the reward still moves, so this is a note. ")
                    + "The patch sets the recipe's rate.", {"learning_rate": recipe})]


# A crash that only non-finite weights cause: sampling from NaN/inf probabilities.
NONFINITE_LOG = re.compile(
    r"probability tensor contains either `?inf`?, `?nan`? or element < 0|loss is nan|Loss is NaN", re.I
)


def rule_nan(ctx: Ctx) -> list[DiagnosisFinding]:
    evidence = []
    for metric in ("loss", "grad_norm"):
        bad = ctx.first_nonfinite(metric)
        if bad:
            before = [(s, v) for s, v in ctx.finite_series(metric) if s < bad[0]]
            if before:
                evidence.append(Evidence(metric=metric, step=before[-1][0], value=before[-1][1]))
            evidence.append(Evidence(metric=metric, step=bad[0], value=shown(bad[1])))
    crash = log_hits(ctx.run.log_text, NONFINITE_LOG)[:1] if ctx.run.log_text else []
    evidence += [log_line(*hit) for hit in crash]
    if not evidence:
        return []
    return [finding("nan_loss", "error", evidence,
                    "The loss or gradient norm became non-finite: every later update is garbage. It is nearly always "
                    "a consequence of precision or the learning rate (fix those first, in that order); resume from "
                    "the last checkpoint saved before the first non-finite step, not from a later one.",
                    ctx.divergence_patch())]


def rule_grad_spike(ctx: Ctx) -> list[DiagnosisFinding]:
    spikes = ctx.grad_spikes()
    if not spikes:
        return []
    step, value, level = max(spikes, key=lambda s: s[1] / s[2])
    evidence = [Evidence(metric="grad_norm (running median before)", step=step, value=round(level, 6)),
                Evidence(metric="grad_norm", step=step, value=value)]
    evidence += [Evidence(metric="grad_norm", step=s, value=v) for s, v, _ in spikes if s != step][:3]
    severe = len(spikes) >= 3 or value > 100 * level
    return [finding("grad_norm_spike", "error" if severe else "warning", evidence,
                    f"grad_norm reached {value:.3g} at step {step}, {value / level:.0f}x its running level "
                    f"({len(spikes)} spike(s)). Lower the learning rate and keep max_grad_norm at 1.0 or below; a few "
                    "prompts with extreme rewards can also cause it (scale the reward).",
                    ctx.divergence_patch())]


def rule_kl(ctx: Ctx) -> list[DiagnosisFinding]:
    kl = ctx.series("kl")
    if not kl:
        return []
    bad = next(((s, v) for s, v in kl if not math.isfinite(v)), None)
    top = max(((s, v) for s, v in kl if math.isfinite(v)), key=lambda p: p[1], default=None)
    warn, error = ctx.kl_bounds
    if not bad and (top is None or top[1] < warn):
        return []
    first = kl[0]
    evidence = [Evidence(metric="kl", step=first[0], value=shown(first[1]))]
    peak = bad or top
    evidence.append(Evidence(metric="kl", step=peak[0], value=shown(peak[1])))
    severe = bad is not None or peak[1] >= error
    patch = ctx.divergence_patch()
    beta = float(ctx.get("beta", 0.0) or 0.0)
    if 0 < beta < 0.1:  # a stronger pull to the reference, up to a still-trainable 0.1
        patch["beta"] = round(min(2 * beta, 0.1), 6)
    evidence.append(Evidence(metric="beta" + (" (config)" if "beta" in ctx.config else ""), value=beta))
    return [finding("kl_explosion", "error" if severe else "warning", evidence,
                    f"KL to the reference model rose to {shown(peak[1])} by step {peak[0]}; at beta={beta:g} a warning "
                    f"starts at {warn:.3g} and an error at {error:.3g} nats/token (the bounds scale with beta: a "
                    "weaker "
                    "pull to the reference lets the policy run further unchecked): the policy is running away from "
                    "the reference, often just before reward hacking. "
                    "Lower the learning rate, raise beta, and look at recent completions (sample_completions).",
                    patch)]


# ---------------------------------------------------------------- GRPO signal
def rule_no_signal(ctx: Ctx) -> list[DiagnosisFinding]:
    frac = ctx.finite_series("frac_reward_zero_std")
    std = ctx.finite_series("reward_std")
    if frac:
        share = statistics.fmean(v for _, v in frac)
        late = ends([v for _, v in frac], 0.5)[1]
        evidence = [Evidence(metric="frac_reward_zero_std", step=frac[0][0], value=frac[0][1]),
                    Evidence(metric="frac_reward_zero_std", step=frac[-1][0], value=frac[-1][1])]
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
    cause = ("completions_never_terminate" if rule_never_terminate(ctx) else
             "completions_truncated" if clipped and ends(clipped, 0.5)[1] >= CLIPPED_ERROR else None)
    if cause:
        found = finding("no_reward_signal", "error" if share >= ZERO_STD_ERROR else "warning", evidence,
                        f"{share:.0%} of the groups had zero reward spread, because their completions are cut at "
                        f"max_completion_length and all scored alike ({cause}, ranked above): fix that first. More "
                        "generations or an easier task would not help.")
        found.caused_by = cause
        return [found]
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
               "teach nothing. Raise num_generations (the patch doubles it, keeping the prompts per batch), raise "
               "temperature, or make the reward graded (partial credit).")
    patch = {} if constant and rewards[0] != 0 else more_generations_patch(ctx)
    return [finding("no_reward_signal", "error" if share >= ZERO_STD_ERROR else "warning", evidence,
                    f"{share:.0%} of the groups had zero reward spread. " + why, patch)]


def more_generations_patch(ctx: Ctx) -> dict:
    """Twice the completions per prompt, the same prompts per batch: the generation batch doubles with it."""
    g = int(ctx.get("num_generations", 8))
    patch: dict = {"num_generations": 2 * g}
    if ctx.config.get("generation_batch_size"):
        patch["generation_batch_size"] = 2 * int(ctx.config["generation_batch_size"])
    else:
        steps = ctx.config.get("steps_per_generation") or ctx.get("gradient_accumulation_steps", 1)
        patch["steps_per_generation"] = 2 * int(steps)
    return patch


def rule_truncated(ctx: Ctx) -> list[DiagnosisFinding]:
    clipped = ctx.finite_series("completions/clipped_ratio")
    if not clipped:
        return []
    late = ends([v for _, v in clipped], 0.5)[1]
    # A warning needs a few logs (one cut completion of eight is 0.125); nothing ending at all has its own rule.
    if late < CLIPPED_WARN or (late < CLIPPED_ERROR and len(clipped) < 4) or rule_never_terminate(ctx):
        return []
    evidence = [Evidence(metric="completions/clipped_ratio", step=clipped[0][0], value=clipped[0][1]),
                Evidence(metric="completions/clipped_ratio", step=clipped[-1][0], value=clipped[-1][1])]
    terminated = ctx.finite_series("completions/mean_terminated_length")
    if terminated:
        evidence.append(
            Evidence(metric="completions/mean_terminated_length", step=terminated[-1][0], value=terminated[-1][1])
        )
    length = ctx.config.get("max_completion_length")
    if length is None:
        observed = finite(v for _, v in ctx.series("completions/max_length"))
        length = int(max(observed)) if observed else ctx.get("max_completion_length", 512)
    else:
        evidence.append(Evidence(metric="max_completion_length (config)", value=length))
    severe = late >= CLIPPED_ERROR
    rising = significant_change(clipped) > 0
    return [finding("completions_truncated", "error" if severe else "warning", evidence,
                    f"{late:.0%} of recent completions hit max_completion_length ({length}) before ending"
                    + (" and the share is rising" if rising else "") + " (healthy is under 10%): answers are cut off "
                    "and scored as wrong, and the loss learns from broken text. Raise max_completion_length (check "
                    "memory with plan_memory) and mask truncated completions out of the loss (the DAPO fix), or ask "
                    "for shorter reasoning in the prompt.",
                    {"max_completion_length": int(length) * 2, "mask_truncated_completions": True})]


def rule_flat(ctx: Ctx) -> list[DiagnosisFinding]:
    reward = ctx.finite_series("reward")
    std = finite(v for _, v in ctx.series("reward_std"))
    if len(reward) < FLAT_MIN_POINTS or not std or statistics.fmean(std) <= 1e-6:
        return []  # too early to call it flat, or no signal at all (no_reward_signal says so)
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
    patch = {"learning_rate": min(2 * lr, high)} if lr and 2 * lr <= high and not away else {}
    caution = (f" Do not raise the learning rate: {'; '.join(away)}." if away else "")
    return [finding("reward_flat", "warning", evidence,
                    f"Over {span} steps the mean reward moved {change:+.3g} (first third {early:.3g}, last third "
                    f"{late:.3g}) although rewards vary across the batch (mean reward_std {spread:.3g}). Check the "
                    "learning rate (too low?), whether a format reward drowns the task reward, and whether the model "
                    "can improve at all (base success rate). Train longer only if the trend is positive." + caution,
                    patch)]


# ---------------------------------------------------------------- variant symptoms and reward hacking
def rule_entropy(ctx: Ctx) -> list[DiagnosisFinding]:
    entropy = ctx.finite_series("entropy")
    if len(entropy) < 2:
        return []
    early, late = ends([v for _, v in entropy], 0.25)
    severe = early > 0 and late <= ENTROPY_COLLAPSE_ERROR * early
    if early <= 0 or late > ENTROPY_DROP * early or (len(entropy) < 4 and not severe):
        return []
    patch = ctx.variant_patch("dapo") if not severe else ctx.divergence_patch()
    evidence = [Evidence(metric="entropy", step=step, value=value) for step, value in (entropy[0], entropy[-1])]
    if severe:
        return [finding("entropy_collapse", "error", evidence,
                        f"Policy entropy fell from {early:.3g} to {late:.3g}: the policy has become deterministic, "
                        "every sample of a group is the same, so nothing is left to learn. A fall this steep within "
                        "a few logs is an update that broke the model, not slow convergence: lower the learning rate "
                        "(the patch) and restart from a checkpoint saved before the fall.", patch)]
    return [finding("entropy_collapse", "warning", evidence,
                    f"Policy entropy fell from {early:.3g} to {late:.3g}: samples become near-identical and "
                    "exploration "
                    "stops. The DAPO variant's clip-higher (epsilon_high 0.28) keeps low-probability tokens explorable "
                    "(emit_grpo_config with symptom=entropy_collapse)."
                    + ("" if patch else " The run already uses DAPO's settings: lower the learning rate or raise "
                                        "temperature."),
                    patch)]


def rule_length(ctx: Ctx) -> list[DiagnosisFinding]:
    reward = dict(ctx.finite_series("reward"))
    length = dict(ctx.finite_series("completions/mean_length"))
    steps = sorted(set(reward) & set(length))
    if len(steps) < 5:
        return []
    rs, ls = [reward[s] for s in steps], [length[s] for s in steps]
    corr = correlation(rs, ls)
    l_early, l_late = ends(ls)
    r_early, r_late = ends(rs)
    if corr is None or corr < LENGTH_CORR or l_late < LENGTH_RISE * l_early or r_late <= r_early:
        return []
    evidence = [Evidence(metric="completions/mean_length", step=steps[0], value=ls[0]),
                Evidence(metric="completions/mean_length", step=steps[-1], value=ls[-1]),
                Evidence(metric="reward", step=steps[0], value=rs[0]),
                Evidence(metric="reward", step=steps[-1], value=rs[-1]),
                Evidence(metric="correlation(reward, completions/mean_length)", value=round(corr, 3))]
    clipped = ctx.finite_series("completions/clipped_ratio")
    at_cap = bool(clipped) and ends([v for _, v in clipped], 0.5)[1] >= CLIPPED_WARN
    if at_cap:  # completions piling up at the length cap: the truncation is this finding's effect
        evidence += [Evidence(metric="completions/clipped_ratio", step=clipped[0][0], value=clipped[0][1]),
                     Evidence(metric="completions/clipped_ratio", step=clipped[-1][0], value=clipped[-1][1])]
    patch = ctx.variant_patch("dr_grpo")
    tail = ("" if patch else " The run already uses Dr.GRPO: the reward itself pays for length; add a length_penalty "
            "to the reward and re-inspect.")
    if at_cap:
        tail += (" Completions now pile up at max_completion_length: a longer limit would only feed the same "
                 "reward; fix what pays for length first.")
    return [finding("length_reward_correlation", "warning", evidence,
                    f"Completion length rose {l_early:.3g} -> {l_late:.3g} tokens together with the reward "
                    "(correlation "
                    f"{corr:.2f}): the policy gains reward by growing longer. Dr.GRPO removes the loss's length "
                    "normalisation bias (emit_grpo_config with symptom=length_bias); check that no reward pays for "
                    "length itself." + tail,
                    patch)]


def rule_moe(ctx: Ctx) -> list[DiagnosisFinding]:
    model = ctx.config.get("model_name_or_path")
    if not model:
        return []

    if not is_moe(str(model)) or ctx.get("importance_sampling_level", "token") == "sequence":
        return []
    reason = ctx.run.request.get("override_reason")
    evidence = [
        Evidence(metric="model_name_or_path (config)", value=str(model)),
        Evidence(metric="importance_sampling_level (config)", value=str(ctx.get("importance_sampling_level", "token"))),
    ]
    if reason:
        return [finding("moe_without_gspo", "info", evidence, "Mixture-of-experts model without GSPO, overridden: "
                                                              f"{reason}")]
    return [finding("moe_without_gspo", "error" if ctx.diverged else "warning", evidence,
                    "The policy is a mixture-of-experts model trained with token-level importance ratios: expert "
                    "routing changes between generation and training make those ratios noisy"
                    + (", and this run diverged" if ctx.diverged else "")
                    + ". GSPO's sequence-level ratios are stable under routing (emit_grpo_config with "
                      "symptom=moe_instability).",
                    ctx.variant_patch("gspo"))]


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

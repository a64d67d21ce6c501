"""Families 'update' and 'divergence': precision and the learning rate (the causes), then the symptoms that say
which way a run diverges (entropy, grad norm, NaN, KL)."""

from __future__ import annotations

import math
import re

from mcp_server.config import FIELD
from mcp_server.diagnosis.context import (
    Ctx,
    ENTROPY_COLLAPSE_ERROR,
    ENTROPY_DROP,
    ENTROPY_RISE_ERROR,
    ENTROPY_RISE_MIN,
    ends,
    finding,
    first_last,
    log_hits,
    log_line,
    shown,
    significant_change,
)
from mcp_server.diagnosis.models import DiagnosisFinding, Evidence


def rule_fp16(ctx: Ctx) -> list[DiagnosisFinding]:
    if not ctx.config.get(FIELD.fp16) or ctx.gpu_has_bf16 is False:
        return []
    evidence = [Evidence(metric="fp16 (config)", value=True)]
    gpu = ctx.run.request.gpu
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
                        {FIELD.fp16: False, FIELD.bf16: True})]
    return [finding("fp16_divergence", "warning", evidence,
                    f"The run trains in fp16 where {where}; GRPO in fp16 diverges silently. Switch to bf16.",
                    {FIELD.fp16: False, FIELD.bf16: True})]


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
                "but no divergence, KL, entropy or length change it would cause is logged: a note, not a symptom "
                "(a small model or training from scratch can need it); lower it if a divergence finding appears")
        if severity == "info":  # a note carries no alarm and no patch (walk 13: "a note, not a symptom" with both)
            return [finding("lr_out_of_range", severity, [evidence],
                            f"learning_rate={lr:g} is above GRPO's settled range for {mode} fine-tuning "
                            f"({low:g}-{high:g}), {what} (the recipe's rate is {recipe:g}).")]
        return [finding("lr_out_of_range", severity, [evidence],
                        f"learning_rate={lr:g} is above GRPO's settled range for {mode} fine-tuning "
                        f"({low:g}-{high:g}), "
                        f"{what}. RL updates at supervised rates destroy the policy; the patch sets the recipe's rate.",
                        {FIELD.learning_rate: recipe})]
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
                    + "The patch sets the recipe's rate.", {FIELD.learning_rate: recipe})]


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
    beta = float(ctx.get(FIELD.beta, 0.0) or 0.0)
    if 0 < beta < 0.1:  # a stronger pull to the reference, up to a still-trainable 0.1
        patch[FIELD.beta] = round(min(2 * beta, 0.1), 6)
    evidence.append(Evidence(metric="beta" + (" (config)" if FIELD.beta in ctx.config else ""), value=beta))
    return [finding("kl_explosion", "error" if severe else "warning", evidence,
                    f"KL to the reference model rose to {shown(peak[1])} by step {peak[0]}; at beta={beta:g} a warning "
                    f"starts at {warn:.3g} and an error at {error:.3g} nats/token (the bounds scale with beta: a "
                    "weaker "
                    "pull to the reference lets the policy run further unchecked): the policy is running away from "
                    "the reference, often just before reward hacking. "
                    "Lower the learning rate, raise beta, and look at recent completions (sample_completions).",
                    patch)]


def rule_entropy_rising(ctx: Ctx) -> list[DiagnosisFinding]:
    ends_ = ctx.ratio("entropy")
    if not ends_:
        return []
    early, late = ends_
    points = len(ctx.finite_series("entropy"))
    # An error (a guard stop) needs three logs: one high first batch must not stop a healthy run.
    severe = points >= 3 and late >= ENTROPY_RISE_ERROR * early and late - early >= ENTROPY_RISE_MIN
    if not severe and (points < 4 or not ctx.entropy_exploded()):
        return []
    patch = ctx.divergence_patch()
    temperature = ctx.get(FIELD.temperature, 1.0)
    if isinstance(temperature, (int, float)) and temperature > 1.0:
        patch[FIELD.temperature] = 1.0
    if (ctx.get(FIELD.entropy_coef, 0.0) or 0.0) > 0:
        patch[FIELD.entropy_coef] = 0.0
    return [finding("entropy_rising", "error" if severe else "warning", first_last(ctx, "entropy"),
                    f"Policy entropy rose from {early:.3g} to {late:.3g} nats/token: the policy is spreading its "
                    "probability over more and more tokens, which ends in gibberish (the opposite of a collapse; "
                    "the DAPO fix for collapse makes it worse). Read the latest samples. The usual causes, in order: "
                    "a sampler/trainer mismatch (vLLM), updates too large (learning rate, clip-higher), an entropy "
                    "bonus. The patch lowers the learning rate and removes any entropy bonus or temperature above 1.",
                    patch)]


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

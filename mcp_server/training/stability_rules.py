"""Diagnosis rules for the failures an expert checks first on a GRPO run (references/failure-triage.md): what the
latest samples show (completions that never end, a length collapse, rewards that return None), the sampler vs
trainer mismatch of vLLM runs, importance ratios clipped in off-policy updates, entropy rising into gibberish,
MoE router instability, and a falling reward. Metric names are TRL 1.16's (trl/trainer/grpo_trainer.py)."""

from __future__ import annotations

import math
import re

from mcp_server.training.diagnosis_context import (
    AUX_LOSS_RISE,
    CLIP_RATIO_ERROR,
    CLIP_RATIO_WARN,
    CORRECTNESS_NAME,
    ENTROPY_RISE_ERROR,
    ENTROPY_RISE_MIN,
    IS_RATIO_BAND,
    IS_RATIO_ERROR_BAND,
    IS_RATIO_MAX_WARN,
    LENGTH_COLLAPSE,
    LOGP_DIFF_ERROR,
    LOGP_DIFF_WARN,
    NEVER_TERMINATE,
    Ctx,
    ends,
    finding,
    first_last,
    peak,
    significant_change,
)
from mcp_server.training.log_rules import TRL_ALL_NONE, log_hits, log_line
from mcp_server.training.models import DiagnosisFinding, Evidence

LOGP_MEAN, LOGP_MAX = "sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max"
IS_MIN, IS_MEAN, IS_MAX = ("sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/mean",
                           "sampling/importance_sampling_ratio/max")


def late_mean(ctx: Ctx, name: str) -> float | None:
    values = [v for _, v in ctx.finite_series(name)]
    return ends(values, 0.5)[1] if values else None


# ---------------------------------------------------------------- what the samples show
def rule_never_terminate(ctx: Ctx) -> list[DiagnosisFinding]:
    """Every completion of the late logs hit the limit and none ended: the model does not stop."""
    clipped = ctx.finite_series("completions/clipped_ratio")
    terminated = dict(ctx.finite_series("completions/mean_terminated_length"))
    if len(clipped) < 1 or not terminated:
        return []
    late = clipped[len(clipped) // 2:]
    if min(v for _, v in late) < NEVER_TERMINATE or any(terminated.get(s, 0.0) > 0 for s, _ in late):
        return []
    length = ctx.config.get("max_completion_length") or ctx.get("max_completion_length", 512)
    ended_before = [(s, v) for s, v in sorted(terminated.items()) if v > 0 and s < late[0][0]]
    evidence = [
        Evidence(metric="completions/clipped_ratio", step=late[0][0], value=late[0][1]),
        Evidence(metric="completions/clipped_ratio", step=late[-1][0], value=late[-1][1]),
        Evidence(metric="completions/mean_terminated_length", step=late[-1][0], value=terminated[late[-1][0]]),
        Evidence(
            metric="max_completion_length" + (" (config)" if "max_completion_length" in ctx.config else ""),
            value=length,
        ),
    ]
    if ended_before:
        evidence.append(Evidence(metric="completions/mean_terminated_length", step=ended_before[-1][0],
                                 value=ended_before[-1][1]))
        why = (f"Completions ended on their own until step {ended_before[-1][0]} ({ended_before[-1][1]:.3g} tokens) "
               "and "
               "none has since: the policy stopped emitting its end-of-sequence token, which is a symptom of the "
               "update breaking the model (see the findings ranked above), not of the limit.")
    else:
        why = ("No completion has ended at all. Either the model never emits the token the trainer stops on (the "
               "tokenizer's eos_token must be the chat template's end-of-turn token, e.g. <|im_end|>, and the "
               "generation_config's eos_token_id must include it), the prompts are not rendered with the chat "
               "template (plain-text prompts to a chat model), a thinking model spends the whole budget thinking "
               "(chat_template_kwargs: {enable_thinking: false}, or a larger limit), or the limit is shorter than "
               "any complete answer. sample_completions on the base model shows which.")
    return [finding("completions_never_terminate", "error", evidence,
                    f"Every completion of the last {len(late)} log(s) was cut at max_completion_length ({length}) "
                    f"and none ended: each is scored unfinished, which is why groups get identical rewards. {why} "
                    "Raising the limit does not help a model that does not stop; no config change is justified "
                    "until the samples show why.")]


def rule_length_collapse(ctx: Ctx) -> list[DiagnosisFinding]:
    ends_ = ctx.ratio("completions/mean_length")
    if not ends_ or len(ctx.finite_series("completions/mean_length")) < 4:
        return []
    early, late = ends_
    if late > LENGTH_COLLAPSE * early:
        return []
    evidence = first_last(ctx, "completions/mean_length")
    rising = [k[len("rewards/"):-len("/mean")] for k in sorted(ctx.run.metric_names())
              if k.startswith("rewards/") and k.endswith("/mean") and significant_change(ctx.finite_series(k)) > 0]
    for name in rising:
        evidence += first_last(ctx, f"rewards/{name}/mean")
    paid = (f" The reward(s) {', '.join(rising)} rose meanwhile: short completions are what they pay for "
            "(a format reward that a bare answer tag satisfies, a length penalty)." if rising else "")
    return [finding("completion_length_collapse", "warning", evidence,
                    f"Mean completion length fell from {early:.3g} to {late:.3g} tokens.{paid} Read the latest "
                    "completions (sample_completions on the latest checkpoint): a collapse to a bare answer or to "
                    "an immediate end-of-sequence teaches nothing. No config change is justified from the metrics "
                    "alone: fix the reward that pays for it, or see the findings ranked above when the run diverges.")]


def rule_reward_none(ctx: Ctx) -> list[DiagnosisFinding]:
    """A reward function that returns None for every completion: TRL logs its mean as NaN (nanmean of nothing)."""
    names = sorted(k for k in ctx.run.metric_names() if k.startswith("rewards/") and k.endswith("/mean"))
    dead = []
    for key in names:
        values = [v for _, v in ctx.series(key)]
        if values and all(not math.isfinite(v) for v in values[len(values) // 2:]):
            dead.append(key)
    if not dead:
        return []
    evidence = [Evidence(metric=k, step=ctx.series(k)[-1][0], value=str(ctx.series(k)[-1][1])) for k in dead]
    warned = log_hits(ctx.run.log_text, re.compile(re.escape(TRL_ALL_NONE)))[:1] if ctx.run.log_text else []
    evidence += [log_line(*hit) for hit in warned]
    funcs = ", ".join(k[len("rewards/"):-len("/mean")] for k in dead)
    everything = not ctx.finite_series("reward") and ctx.series("reward")
    return [finding("reward_returns_none", "error", evidence,
                    f"The reward function(s) {funcs} returned None for every completion of the recent logs (TRL "
                    "logs their mean as NaN)" + (": no completion is scored, so nothing is learned" if everything else
                    ": they contribute nothing, the remaining rewards train alone") + ". A reward returns None for "
                    "samples it does not apply to; for all of them it usually reads a column the data set lacks or "
                    "a completion format it never sees. Run inspect_rewards on samples and fix the function.")]


# ---------------------------------------------------------------- sampler vs trainer
def rule_sampler_mismatch(ctx: Ctx) -> list[DiagnosisFinding]:
    diff, diff_max = late_mean(ctx, LOGP_MEAN), peak(ctx, LOGP_MAX)
    ratio, ratio_max, ratio_min = late_mean(ctx, IS_MEAN), peak(ctx, IS_MAX), peak(ctx, IS_MIN, lowest=True)
    if diff is None and ratio is None:
        return []
    reasons, severe = [], False
    if diff is not None and diff >= LOGP_DIFF_WARN:
        reasons.append(f"the trainer's log-probs differ from vLLM's by {diff:.3g} nats/token on average")
        severe |= diff >= LOGP_DIFF_ERROR
    if ratio is not None and not IS_RATIO_BAND[0] <= ratio <= IS_RATIO_BAND[1]:
        reasons.append(f"the mean importance-sampling ratio is {ratio:.3g} (1 when they agree)")
        severe |= not IS_RATIO_ERROR_BAND[0] <= ratio <= IS_RATIO_ERROR_BAND[1]
    if ratio_max is not None and ratio_max.value >= IS_RATIO_MAX_WARN:
        reasons.append(f"an importance-sampling ratio reached {ratio_max.value:.3g}")
    if not reasons:
        return []
    mode = ctx.get("vllm_importance_sampling_mode", "sequence_mask")
    evidence = [
        e
        for e in (
            Evidence(metric=LOGP_MEAN + " (late mean)", value=round(diff, 6)) if diff is not None else None,
            diff_max,
            Evidence(metric=IS_MEAN + " (late mean)", value=round(ratio, 6)) if ratio is not None else None,
            ratio_max,
            ratio_min,
        )
        if e is not None
    ]
    dropped = ""
    if str(mode).endswith("_mask") and ratio_min is not None and ratio_min.value == 0:
        dropped = (f" The correction ({mode}) zeroes what falls outside its bounds, so sequences were dropped from the "
                   "update (importance_sampling_ratio/min 0): the run trains on fewer samples than it generates.")
    patch: dict = {}
    if ctx.get("vllm_importance_sampling_correction", True) is False:
        patch["vllm_importance_sampling_correction"] = True
    if ctx.config.get("fp16") and ctx.gpu_has_bf16 is not False:
        patch.update(fp16=False, bf16=True)
    return [
        finding(
            "sampler_mismatch",
            "error" if severe else "warning",
            evidence,
            "vLLM samples from a different distribution than the model being trained: "
            + "; ".join(reasons)
            + "."
            + dropped
            + " Updates computed on these samples are off-policy by an unknown amount, and "
            "this is the first suspect when entropy rises or the reward falls. Check that vLLM and training "
            "use the same dtype (bf16 both), that the vLLM version is inside TRL's window "
            "(check_environment), that weights are synced every step (LoRA merged before the sync), and "
            "the same chat template and sampling settings on both sides."
            + (
                " The patch turns TRL's importance-sampling correction back on."
                if "vllm_importance_sampling_correction" in patch
                else ""
            ),
            patch,
        )
    ]


def rule_importance_ratio(ctx: Ctx) -> list[DiagnosisFinding]:
    """Policy ratios clipped on many tokens. On-policy (one update per generation) the ratio is exactly 1, so a
    large clipped share means the updates move the policy too far from the one that generated."""
    region = ctx.finite_series("clip_ratio/region_mean")
    if not region:
        return []
    late = late_mean(ctx, "clip_ratio/region_mean")
    top = max(region, key=lambda p: p[1])
    if late < CLIP_RATIO_WARN and top[1] < CLIP_RATIO_ERROR:
        return []
    evidence = [Evidence(metric="clip_ratio/region_mean (late mean)", value=round(late, 6)),
                Evidence(metric="clip_ratio/region_mean", step=top[0], value=top[1])]
    evidence += [e for e in (peak(ctx, "clip_ratio/high_mean"), peak(ctx, "clip_ratio/low_mean")) if e]
    iterations = int(ctx.get("num_iterations", 1) or 1)
    accumulation = int(ctx.get("gradient_accumulation_steps", 1) or 1)
    per_generation = ctx.config.get("steps_per_generation")
    patch: dict = {}
    if iterations > 1:
        patch["num_iterations"] = 1
        evidence.append(Evidence(metric="num_iterations (config)", value=iterations))
    if isinstance(per_generation, int) and per_generation > accumulation:
        patch["steps_per_generation"] = accumulation
        evidence.append(Evidence(metric="steps_per_generation (config)", value=per_generation))
    lr, _ = ctx.learning_rate
    if not patch and lr is not None and max(lr / 2, ctx.lr_range()[0]) < lr:
        patch["learning_rate"] = max(lr / 2, ctx.lr_range()[0])
    return [finding("importance_ratio_blowup", "error" if late >= CLIP_RATIO_ERROR or top[1] >= 2 * CLIP_RATIO_ERROR
                    else "warning", evidence,
                    f"{late:.0%} of tokens had their policy ratio clipped recently (peak {top[1]:.0%} at step "
                    f"{top[0]}; "
                    "healthy is under 20%): each generation is reused for updates that move the policy far from the "
                    "one that sampled it, and the clip discards their gradient. The patch makes the updates more "
                    "on-policy (one update per generation) or, already on-policy, halves the learning rate.", patch)]


# ---------------------------------------------------------------- entropy, router, reward direction
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
    temperature = ctx.get("temperature", 1.0)
    if isinstance(temperature, (int, float)) and temperature > 1.0:
        patch["temperature"] = 1.0
    if (ctx.get("entropy_coef", 0.0) or 0.0) > 0:
        patch["entropy_coef"] = 0.0
    return [finding("entropy_rising", "error" if severe else "warning", first_last(ctx, "entropy"),
                    f"Policy entropy rose from {early:.3g} to {late:.3g} nats/token: the policy is spreading its "
                    "probability over more and more tokens, which ends in gibberish (the opposite of a collapse; "
                    "the DAPO fix for collapse makes it worse). Read the latest samples. The usual causes, in order: "
                    "a sampler/trainer mismatch (vLLM), updates too large (learning rate, clip-higher), an entropy "
                    "bonus. The patch lowers the learning rate and removes any entropy bonus or temperature above 1.",
                    patch)]


def rule_moe_router(ctx: Ctx) -> list[DiagnosisFinding]:
    """TRL logs `aux_loss` (the router's load-balancing loss) when the model has output_router_logits on."""
    ends_ = ctx.ratio("aux_loss")
    if not ends_ or len(ctx.finite_series("aux_loss")) < 4 or ends_[1] < AUX_LOSS_RISE * ends_[0]:
        return []
    sequence = ctx.get("importance_sampling_level", "token") == "sequence"
    patch = {} if sequence else ctx.variant_patch("gspo")
    return [finding("moe_router_instability", "warning", first_last(ctx, "aux_loss"),
                    f"The router's load-balancing loss rose from {ends_[0]:.3g} to {ends_[1]:.3g}: experts are "
                    "being chosen more and more unevenly, so a token's expert (and its log-prob) changes between "
                    "generation and update. "
                    + ("The run already uses sequence-level ratios (GSPO): raise router_aux_loss_coef (a "
                       "GRPOConfig field in TRL 1.16) or lower the learning rate." if sequence else
                       "GSPO's sequence-level ratios tolerate routing changes (emit_grpo_config with "
                       "symptom=moe_instability); the patch switches to it."), patch)]


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

"""Family 'samples': what the latest samples show. Reward functions that raise or return None, completions that
never end, are cut at the limit, or collapse in length. Metric names are TRL 1.16's (trl/trainer/grpo_trainer.py)."""

from __future__ import annotations

import math
import re

from mcp_server.diagnosis.context import (
    ZERO_STD_WARN,
    CLIPPED_ERROR,
    CLIPPED_WARN,
    Ctx,
    LENGTH_COLLAPSE,
    NEVER_TERMINATE,
    TRL_ALL_NONE,
    ends,
    finding,
    first_last,
    log_hits,
    log_line,
    significant_change,
)
from mcp_server.diagnosis.models import DiagnosisFinding, Evidence


# TRL calls every reward function from GRPOTrainer._calculate_rewards; an exception there ends the run.
REWARD_FRAME = re.compile(r'File "[^"]+", line \d+, in _calculate_rewards')


FRAME = re.compile(r'File "([^"]+)", line \d+, in (\w+)')


EXCEPTION_LINE = re.compile(r"^\s*(?:\w+\.)*\w*(Error|Exception|Interrupt|Exit)\b.*$")


def rule_reward_errors(ctx: Ctx) -> list[DiagnosisFinding]:
    """A reward function that raised: the traceback runs through _calculate_rewards into the user's function."""
    text = ctx.run.log_text
    if not text or "_calculate_rewards" not in text:
        return []
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if REWARD_FRAME.search(line)), None)
    if start is None:
        return []
    func, end = None, None
    for i in range(start + 1, min(len(lines), start + 400)):
        frame = FRAME.search(lines[i])
        if frame and "/trl/" not in frame.group(1) and "/torch/" not in frame.group(1) and func is None:
            func = frame.group(2)
        if not lines[i].startswith((" ", "\t")) and EXCEPTION_LINE.match(lines[i]):
            end = i
            break
    if end is None:
        return []
    evidence = [log_line(start + 1, lines[start]), log_line(end + 1, lines[end])]
    return [finding("reward_function_error", "error", evidence,
                    f"The reward function {func or '(see the traceback)'} raised {lines[end].strip()[:200]!r} while "
                    "scoring completions, which ends the run. A reward must return a float (or None for a sample it "
                    "does not apply to) for any text, including empty, truncated or malformed completions: catch "
                    "what it cannot parse. Check it with inspect_rewards on samples; no config change fixes it.")]


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


def rule_never_terminate(ctx: Ctx) -> list[DiagnosisFinding]:
    """Every completion of the late logs hit the limit and none ended: the model does not stop."""
    clipped = ctx.finite_series("completions/clipped_ratio")
    terminated = dict(ctx.finite_series("completions/mean_terminated_length"))
    if len(clipped) < 1 or not terminated:
        return []
    late = clipped[len(clipped) // 2:]
    if min(v for _, v in late) < NEVER_TERMINATE or any(terminated.get(s, 0.0) > 0 for s, _ in late):
        return []
    length, how = ctx.completion_limit()
    ended_before = [(s, v) for s, v in sorted(terminated.items()) if v > 0 and s < late[0][0]]
    evidence = [
        Evidence(metric="completions/clipped_ratio", step=late[0][0], value=late[0][1]),
        Evidence(metric="completions/clipped_ratio", step=late[-1][0], value=late[-1][1]),
        Evidence(metric="completions/mean_terminated_length", step=late[-1][0], value=terminated[late[-1][0]]),
        Evidence(metric=f"max_completion_length ({how})", value=length),
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
                    f"Every completion of the last {len(late)} log(s) was cut at {ctx.limit_text()} "
                    f"and none ended: each is scored unfinished, which is why groups get identical rewards. {why} "
                    "Raising the limit does not help a model that does not stop; no config change is justified "
                    "until the samples show why.")]


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
    length, how = ctx.completion_limit()
    evidence.append(Evidence(metric=f"max_completion_length ({how})", value=length))
    severe = late >= CLIPPED_ERROR
    rising = significant_change(clipped) > 0
    # A signal lost before the cut began is another cause's effect; one lost with the cut is this finding's.
    first_cut = next((s for s, v in clipped if v >= CLIPPED_WARN), None)
    first_dead = next((s for s, v in ctx.finite_series("frac_reward_zero_std") if v >= ZERO_STD_WARN), None)
    dead_before = ctx.signal_gone() and first_dead is not None and first_cut is not None and first_dead < first_cut
    away = ctx.moving_away() + (["most groups lost their reward spread before the cut began"] if dead_before else [])
    overlong = ctx.overlong_punishment()
    patch: dict = {}
    if away or ctx.diverged:
        fix = (f"Do not lengthen completions now: {'; '.join(away) or 'the run diverges'}; a longer limit feeds a "
               "run that is breaking, and masking hides its broken text from the loss. Read the samples and fix "
               "the cause ranked above.")
    elif overlong is not None and overlong.get("max_completion_len", length) == length:
        fix = ("DAPO's soft overlong punishment in train/rewards.json is pinned at this limit (max_completion_len "
               f"{length}): raising max_completion_length alone would score every completion past {length} tokens "
               "-1. Re-emit with emit_grpo_config at the longer limit (it moves both together), or ask for shorter "
               "reasoning in the prompt.")
        if not ctx.get("mask_truncated_completions", False):
            patch = {"mask_truncated_completions": True}
    else:
        fix = ("Raise max_completion_length (check memory with plan_memory) and mask truncated completions out of "
               "the loss (the DAPO fix), or ask for shorter reasoning in the prompt.")
        patch = {"max_completion_length": int(length) * 2, "mask_truncated_completions": True}
    masked = ctx.get("mask_truncated_completions", False) is True
    if masked:
        patch.pop("mask_truncated_completions", None)
    harm = ("they are masked out of the loss (DAPO), so they teach nothing and each costs a full-length "
            "generation" if masked else "answers are cut off and scored as wrong, and the loss learns from broken "
            "text")
    return [finding("completions_truncated", "error" if severe else "warning", evidence,
                    f"{late:.0%} of recent completions hit {ctx.limit_text()} before ending"
                    + (" and the share is rising" if rising else "") + f" (healthy is under 10%): {harm}. " + fix,
                    patch)]


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

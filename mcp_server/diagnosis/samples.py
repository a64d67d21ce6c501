"""Family 'samples': what the latest samples show. Reward functions that raise or return None, completions that
never end, are cut at the limit, or collapse in length. Metric names are TRL 1.16's (trl/trainer/grpo_trainer.py)."""

from __future__ import annotations

import math
import re

from mcp_server.config import FIELD
from mcp_server.diagnosis.context import (
    CORRECTNESS_NAME,
    ZERO_STD_WARN,
    CLIPPED_ERROR,
    CLIPPED_WARN,
    MIN_CUT_LOGS,
    Ctx,
    LENGTH_COLLAPSE,
    NEVER_TERMINATE,
    TRL_ALL_NONE,
    ends,
    finding,
    first_last,
    log_hits,
    log_line,
    late_mean,
    significant_change,
)
from mcp_server.diagnosis.models import DiagnosisFinding, Evidence
from mcp_server.rewards.registry import REGISTRY

NEVER_SCORES_LOGS = 2  # logs in a row, from the first, before "never scored" is a finding


# A reward whose best is 0 (a penalty: length, overlong, repetition) is 0 when nothing is penalised: never paying is
# its healthy state, not a finding.
PENALTY_NAME = re.compile(r"penalt|punish|overlong|cost", re.I)


def _name(key: str) -> str:
    return key[len("rewards/"):-len("/mean")]


def never_paid(ctx: Ctx) -> list[str]:
    """Every reward (TRL logs one rewards/<name>/mean per reward function) exactly 0 at every one of at least
    NEVER_SCORES_LOGS logs, from the first: no completion ever earned it. Penalties excepted (PENALTY_NAME)."""
    return [k for k in sorted(ctx.run.metric_names()) if k.startswith("rewards/") and k.endswith("/mean")
            and not PENALTY_NAME.search(k) and len(ctx.series(k)) >= NEVER_SCORES_LOGS
            and all(math.isfinite(v) and v == 0 for _, v in ctx.series(k))]


def rule_task_never_scores(ctx: Ctx) -> list[DiagnosisFinding]:
    """A reward that never pays, whichever it is: read on every rewards/<name>/mean series.

    task_never_scores: the task's reward (a correctness-named component, or every reward when none is so named) is
    exactly 0 at every log from the first, and most groups have no spread from the first log: no completion was
    ever judged right, so GRPO has nothing to reinforce. The likely causes are the model's (base success 0: SFT
    first) or the reward's reading (answer extraction, answer column), never a config: more generations or steps
    spend compute on a reward that never pays.

    reward_never_pays: another reward (a format reward, say) is exactly 0 at every log while the task's reward
    varies: it adds the same 0 to every completion of every group, so it shapes no advantage and its weight buys
    nothing (open-r1's published logs: rewards/format_reward/mean 0 throughout)."""
    rewards = sorted(k for k in ctx.run.metric_names() if k.startswith("rewards/") and k.endswith("/mean"))
    never = never_paid(ctx)
    if not never:
        return []
    task = [k for k in rewards if CORRECTNESS_NAME.search(k)] or rewards
    task_never = [k for k in never if k in task]
    out = []
    zero = ctx.finite_series("frac_reward_zero_std")
    if task_never and len(zero) >= NEVER_SCORES_LOGS and zero[0][1] >= ZERO_STD_WARN:
        out.append(_task_never_scores(ctx, task_never, task))
    shaping = [k for k in never if k not in task]
    if shaping:
        out.append(_reward_never_pays(ctx, shaping, never))
    return out


def _task_never_scores(ctx: Ctx, never: list[str], task: list[str]) -> DiagnosisFinding:
    zero = ctx.finite_series("frac_reward_zero_std")
    others = [(k, late_mean(ctx, k)) for k in sorted(ctx.run.metric_names())
              if k.startswith("rewards/") and k.endswith("/mean") and k not in task]
    scoring = [(k, v) for k, v in others if v is not None and v > 0]
    evidence = [e for k in never for e in first_last(ctx, k)]
    evidence += [Evidence(metric=k + " (late mean)", value=round(v, 6)) for k, v in scoring]
    evidence.append(Evidence(metric="frac_reward_zero_std", step=zero[0][0], value=zero[0][1]))
    names = ", ".join(_name(k) for k in never)
    format_ok = (f" while {', '.join(_name(k) for k, _ in scoring)} scores "
                 f"({max(v for _, v in scoring):.0%} at best): the completions have the shape the rewards ask for, "
                 "so the answer inside is what never matches" if scoring else "")
    steps = ctx.run.rows[-1]["step"] if ctx.run.rows else 0
    lead, patch = _never_scores_lead(ctx, steps)
    return finding("task_never_scores", "error", evidence,
                   f"{names} is exactly 0 at every one of the {len(ctx.series(never[0]))} logs, from the first"
                   f"{format_ok}. No completion was ever judged right, so every group has the same task reward and "
                   "GRPO has nothing to reinforce. " + lead, patch)


REWARD_READING = ("the reward never matches a right answer: its answer extraction reads another format than the "
                  "model writes, or the answer column is wrong, empty or in another form (e.g. '#### 42' against "
                  "'42')")
RARE = 0.05  # no paid completion at least this likely at the review's rate: the zero is what that rate predicts


def _never_scores_lead(ctx: Ctx, steps: int) -> tuple[str, dict]:
    """The likely causes of a task reward at 0 from the first log, in order, and the patch where sampling more is
    the lead: from the base success the run's review measured where it has one (walk 13: "base success 0: SFT
    first" of a run whose review measured 12% of 16 prompts, about 1.6% of completions, over 4 x 8 completions)."""
    from mcp_server.diagnosis.cut_evidence import completions_per_step
    from mcp_server.diagnosis.success_rate import more_generations_patch

    measured = ctx.review_success()
    tell = (" Read a few samples beside their gold answers (sample_completions, then inspect_rewards) to tell them "
            "apart.")
    none_fixes = " No config change fixes either: more generations or steps spend compute on a reward that never pays."
    if measured is None or measured[0] == 0:
        base = ("base success 0" if measured is None else
                f"the review measured base success 0{'' if measured[2] is None else f' of {measured[2]} prompts'}")
        return ("The likely causes, in order: (1) the model cannot solve any prompt (" + base + "): SFT on worked "
                "solutions first, until the base success rate is above zero (inspect_rewards reports it), then "
                f"GRPO; (2) {REWARD_READING}.{tell}{none_fixes}"), {}
    base, paid, prompts = measured
    said = (f"The review measured a base success of {base:.0%}" + (f" of {prompts} prompts" if prompts else "")
            + (f" ({paid:.1%} of its completions paid)" if paid else "") + " before training, so the model solves "
            "some prompts")
    count = completions_per_step(ctx) * steps
    if not paid or not count:
        return f"{said}. The likely cause: {REWARD_READING} in training.{tell}", {}
    none = (1 - paid) ** count
    if none < RARE:  # that many completions would have paid some: what training scores differs from the review
        return (f"{said}: at that rate the run's {count:.0f} completions pay none with only {none:.1%} chance, so "
                f"what training scores differs from what the review scored. The likely cause: {REWARD_READING}, or "
                f"the training prompts differ from the reviewed ones (chat template, system prompt).{tell}"), {}
    return (f"{said}: at that rate the run's {count:.0f} completions ({steps} step(s) x {count / steps:.0f}) pay none "
            f"with {none:.0%} chance, so a reward at 0 so far is what that rate predicts. The likely causes, in "
            "order: (1) too few completions to meet a rare success: the patch doubles the completions per prompt "
            "(num_generations, with twice the gradient accumulation); more prompts per step or an SFT warm start "
            f"that raises the rate help too; (2) {REWARD_READING}.{tell}"), more_generations_patch(ctx)


def _reward_never_pays(ctx: Ctx, shaping: list[str], never: list[str]) -> DiagnosisFinding:
    paying = [(k, late_mean(ctx, k)) for k in sorted(ctx.run.metric_names())
              if k.startswith("rewards/") and k.endswith("/mean") and k not in never]
    paying = [(k, v) for k, v in paying if v is not None]
    evidence = [e for k in shaping for e in first_last(ctx, k)]
    evidence += [Evidence(metric=k + " (late mean)", value=round(v, 6)) for k, v in paying]
    names = ", ".join(_name(k) for k in shaping)
    trains = (f"; the run trains on {', '.join(_name(k) for k, _ in paying)} alone" if paying else "")
    return finding("reward_never_pays", "warning", evidence,
                   f"{names} is exactly 0 at every one of the {len(ctx.series(shaping[0]))} logs, from the first: "
                   "no completion ever had what it pays for, so it adds the same 0 to every completion of every "
                   f"group, shapes no advantage, and its weight buys nothing{trains}. The likely causes: the prompt "
                   "never asks for that shape (no system prompt or chat template that names the tags), the chat "
                   "template writes part of it itself (a template that prefills <think> leaves the completion "
                   "without the opening tag), thinking is off for a think-format reward, or the reward's pattern is "
                   "stricter than what the model writes (newlines, tag order). Read a few samples against the reward "
                   "(sample_completions, then inspect_rewards); fix the prompt or the reward, or drop it.")


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
        causes = ctx.cause_above()
        why = (f"Completions ended on their own until step {ended_before[-1][0]} ({ended_before[-1][1]:.3g} tokens) "
               "and none has since: the policy stopped emitting its end-of-sequence token"
               + (f", which is a symptom of the update breaking the model ({'; '.join(causes)}: see those findings), "
                  "not of the limit." if causes else
                  ", and nothing else logged (divergence, KL, entropy, length) says the update broke it."))
    else:
        why = ("No completion has ended at all. Either the model never emits the token the trainer stops on (the "
               "tokenizer's eos_token must be the chat template's end-of-turn token, e.g. <|im_end|>, and the "
               "generation_config's eos_token_id must include it), the prompts are not rendered with the chat "
               "template (plain-text prompts to a chat model), a thinking model spends the whole budget thinking "
               "(chat_template_kwargs: {enable_thinking: false}, or a larger limit), or the limit is shorter than "
               "any complete answer. sample_completions on the base model shows which.")
    base = ctx.base_truncation()
    if ctx.cut_before_training():  # the base model's own samples, before any update, were cut already
        at = f"max_new_tokens={base[1]}" if base[1] is not None else "the sampling limit"
        evidence.append(Evidence(metric="inspection: base samples cut at the limit (samples.meta.json)",
                                 value=base[0]))
        why = (f"This was so before training: the inspection's samples of the base model were already {base[0]:.0%} "
               f"cut at {at}, so the limit is shorter than the answers (or the model does not stop), not an effect "
               "of the update. Sample the base model with a longer limit to see where its answers end, and set "
               "max_completion_length from that.")
    return [finding("completions_never_terminate", "error", evidence,
                    f"Every completion of the last {len(late)} log(s) was cut at {ctx.limit_text()} "
                    f"and none ended: each is scored unfinished, which is why groups get identical rewards. {why} "
                    "Raising the limit does not help a model that does not stop; no config change is justified "
                    "until the samples show why.")]


def _too_early_to_cut(ctx: Ctx, clipped: list[tuple[int, float]]) -> list[DiagnosisFinding]:
    """No finding from fewer than MIN_CUT_LOGS logs; a share worth a look is said in the summary instead, with the
    share the review measured before training."""
    share = sum(v for _, v in clipped) / len(clipped)
    if share >= CLIPPED_WARN:
        ctx.too_early.append(f"completions_truncated judges from {MIN_CUT_LOGS} logged steps; so far {share:.0%} of "
                             f"completions hit {ctx.limit_text()}{ctx.review_truncated()}")
    return []


def rule_truncated(ctx: Ctx) -> list[DiagnosisFinding]:
    clipped = ctx.finite_series("completions/clipped_ratio")
    if not clipped:
        return []
    if rule_never_terminate(ctx):  # nothing ending at all has its own rule
        return []
    if len(clipped) < MIN_CUT_LOGS:  # one cut completion of eight is 0.125: said, not judged (issue 49)
        return _too_early_to_cut(ctx, clipped)
    late = ends([v for _, v in clipped], 0.5)[1]
    if late < CLIPPED_WARN:
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
    add_rewards: list[dict] = []
    # Another finding explains the cut when the run diverges, its rate is far out of range, or its KL, entropy or
    # length moves; a reward (or correctness) falling while more answers are cut is the cut's own effect.
    cause_above = ctx.diverged or ctx.rate_far_above() or any(not r.endswith(" is falling") for r in away)
    if away and cause_above:
        fix = (f"Do not lengthen completions now: {'; '.join(away) or 'the run diverges'}; a longer limit feeds a "
               "run that is breaking, and masking hides its broken text from the loss. Read the samples and fix "
               "the cause ranked above.")
    elif away and overlong is None:
        shaping = REGISTRY["soft_overlong_punishment"].followed({}, {FIELD.max_completion_length: int(length)})
        cache = shaping["soft_punish_cache"]  # the reward's Follows: line, DAPO's 4096 of 20480
        fix = (f"Do not lengthen completions now ({'; '.join(away)}): the cut is the likely cause of the fall, as "
               "completions grow into the limit and their answers are cut off and scored wrong. DAPO's soft "
               "overlong punishment (trl.rewards.get_soft_overlong_punishment, DAPO eq. 13) teaches the policy to "
               f"end inside the limit instead: 0 up to {int(length) - cache} tokens, falling linearly to -1 at "
               f"{length}. add_rewards adds it to the run's rewards (L_cache {cache}, DAPO's 4096 of 20480); "
               "re-emit with emit_grpo_config to apply it. Read the latest samples too: reasoning that loops "
               "until the limit is the policy's, not the limit's.")
        add_rewards = [{"name": "soft_overlong_punishment", "weight": 1.0,
                        "params": shaping}]
    elif away:
        fix = (f"Do not lengthen completions now ({'; '.join(away)}): the cut is the likely cause of the fall. The "
               "run already has DAPO's soft overlong punishment, so the policy keeps growing into the limit "
               "against it: read the latest samples (reasoning that loops, an answer that never comes) and ask for "
               "shorter reasoning in the prompt, or raise the punishment's weight.")
    elif overlong is not None and overlong.get("max_completion_len", length) == length:
        fix = ("DAPO's soft overlong punishment in train/rewards.json is pinned at this limit (max_completion_len "
               f"{length}): raising max_completion_length alone would score every completion past {length} tokens "
               "-1. Re-emit with emit_grpo_config at the longer limit (it moves both together), or ask for shorter "
               "reasoning in the prompt.")
        if not ctx.get(FIELD.mask_truncated_completions, False):
            patch = {"mask_truncated_completions": True}
    elif (alike := _cut_scores_alike(ctx)) is not None:  # walk 13: the same diagnosis said the cut is not why
        fix = alike
    else:
        fix = ("Raise max_completion_length (check memory with plan_memory) and mask truncated completions out of "
               "the loss (the DAPO fix), or ask for shorter reasoning in the prompt.")
        patch = {FIELD.max_completion_length: int(length) * 2, FIELD.mask_truncated_completions: True}
    masked = ctx.get(FIELD.mask_truncated_completions, False) is True
    if masked:
        patch.pop(FIELD.mask_truncated_completions, None)
    harm = ("they are masked out of the loss (DAPO), so they teach nothing and each costs a full-length "
            "generation" if masked else "answers are cut off and scored as wrong, and the loss learns from broken "
            "text")
    found = finding("completions_truncated", "error" if severe else "warning", evidence,
                    f"{late:.0%} of recent completions hit {ctx.limit_text()} before ending"
                    + (" and the share is rising" if rising else "")
                    + f" (healthy is under 10%{ctx.review_truncated()}): {harm}. " + fix,
                    patch)
    found.add_rewards = add_rewards
    return [found]


def _cut_scores_alike(ctx: Ctx) -> str | None:
    """Where the completions that ended scored the same as the cut ones, every one alike (cut_evidence: "the cut is
    not why they score alike", as no_reward_signal says it), a clause saying so; else None."""
    from mcp_server.diagnosis.cut_evidence import cut_evidence

    cut = cut_evidence(ctx)
    if cut is None or cut.verdict != "alike":
        return None
    return (f"The about {cut.uncut} completion(s) that ended scored the same as the cut ones (every completion at "
            f"{cut.uncut_reward:.3g}, reward_std 0): the cut is not why they score alike: a longer limit alone would "
            "not make them score, so no patch here; fix the cause ranked above first, then raise "
            "max_completion_length (check memory with plan_memory) or ask for shorter replies in the prompt.")


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

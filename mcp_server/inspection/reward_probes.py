"""Replies built to be right or wrong: a reward tried where the answer is known by construction.

The "likely mis-scored" list (suspects.py) reads the model's replies; on a task whose gold is always echoed in
the question ("Which number is larger, 15 or 38?": the gold 38 is an operand), no reading of a reply can tell a
reward that pays "15 is larger than 38" from one that reads the answer. So this check reads no reply: it builds
them. For up to PROBE_ROWS rows of the run's samples, the first in the data's order (the row's gold g; a wrong value
w: another row's gold of the same length, else g+1 or g-1 for a whole number, so a reward of length alone cannot
tell them apart), it calls each reward of unknown rule (a dotted path) and each built-in answer verifier, as TRL
calls it (review._score: chat-message completions when the prompts are chat, the row's columns as keyword lists), on

- built right: `g`; `The answer is g.`; `g, not w`; and, as sampled, a real sample the reward paid (of up to
  PROBE_ROWS rows it paid, those whose paid sample writes g first);
- built wrong: `w`; `The answer is w.`; `w, not g` (g only inside a wrong statement); that real sample with
  ` Actually, the answer is w.` appended (after a full stop); that real sample with every g (a whole token)
  replaced by w (skipped when it still writes g's value, in words say).

Each wrong reply has a twin of the same length: `w` and `g`, the two "The answer is" forms, `g, not w` and
`w, not g`, the real sample as sampled for the last two (it is not known right: the reward paid it). A reward that
pays none of the bare right forms needs a format (tags): only the swapped real samples count for it. Flagged, in the
sheet's "Read these first" with the reply and its score: a reward that raised on a built reply; a reward that tells
some twins apart (pays right more than wrong) yet pays a wrong reply at least as much as its twin; a reward that
tells no twin apart but pays them (right and wrong alike), when it reads the gold column or no reward of the set
tells right from wrong (no task reward, none that separates): a format or length reward beside a verifier is
shaping, not judging. Every built reply and its score goes to the sheet's last section, so a person can reproduce a
flag. No tokenizer is loaded: each built reply carries the completion_ids of the sample it was built from, so a
reward of token length cannot tell twins apart.
Not on an agentic run (a completion of several messages: tool calls and results), whose rewards read the turns.
tests/test_reward_probes.py measures it on issue 49's walks: each labelled bad reward flagged, no good one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from mcp_server.errors import UserInputError
from mcp_server.inspection.excerpt import excerpt, where_apart
from mcp_server.inspection.models import BuiltReply, RewardProbe
from mcp_server.inspection.success import is_task_spec
from mcp_server.inspection.suspects import verifier_of
from mcp_server.rewards.answers import as_number, values_in
from mcp_server.rewards.registry import REGISTRY
from mcp_server.rewards.spec import RewardSpec
from mcp_server.rewards.text import completion_text

PROBE_ROWS = 3
SHOWN = 2  # paid wrong replies quoted per reward in "Read these first"
Call = Callable[[object, RewardSpec, list[dict]], list[float]]
Pair = tuple[tuple[int, ...], int, str]  # (the right twin(s): the best counts; the wrong reply; bare/not/actually/swap)


def probed(spec: RewardSpec) -> bool:
    """A reward of unknown rule (a dotted path) or a built-in answer verifier."""
    return verifier_of(spec) is not None or spec.name not in REGISTRY


def probe_rewards(funcs: list, specs: list[RewardSpec], names: list[str], samples: list[dict],
                  scores: list[list[float]], golds: list[str | None], call: Call) -> list[RewardProbe]:
    """One RewardProbe per probed reward (`scores[r][i]`: reward r on sample i; `golds[r]`: the column it reads as
    the gold, suspects.gold_column, None where unknown; `call(func, spec, samples)`: the scores as TRL's call gives
    them, UserInputError when the reward raises)."""
    if any(isinstance(s.get("completion"), list) and len(s["completion"]) != 1 for s in samples):
        return []  # an agentic run's turns: one built message is not what its rewards receive
    tried = []
    for r, (func, spec, name) in enumerate(zip(funcs, specs, names)):
        if not probed(spec):
            continue
        verifier = verifier_of(spec)
        replies, inputs, pairs = build_replies(samples, scores[r], verifier[2] if verifier else golds[r] or "answer")
        if not replies:
            continue
        values, crashes = _scores(call, func, spec, replies, inputs)
        replies = [reply.model_copy(update={"score": None if math.isnan(v) else v})
                   for reply, v in zip(replies, values)]
        tried.append((name, replies, pairs, values, crashes, verifier is not None or golds[r] is not None))
    judges = any(is_task_spec(s) for s in specs) or any(_tells(t[2], t[3]) for t in tried)
    return [_judge(name, replies, pairs, values, crashes, reads_gold or not judges)
            for name, replies, pairs, values, crashes, reads_gold in tried]


def _scores(call: Call, func, spec: RewardSpec, replies: list[BuiltReply],
            inputs: list[dict]) -> tuple[list[float], list[str]]:
    """The reward's score on each built reply (NaN: None or raised) and what it raised on, one reply at a time
    when the whole batch raised."""
    try:
        return call(func, spec, inputs), []
    except UserInputError:
        pass
    values, crashes = [], []
    for reply, one in zip(replies, inputs):
        try:
            values += call(func, spec, [one])
        except UserInputError as exc:
            values.append(math.nan)
            crashes.append(f"raised on a reply built as {reply.form}: {excerpt(reply.text, 90)!r} "
                           f"({excerpt(str(exc).split(': ', 1)[-1], 160)}); training crashes the same way on such a "
                           "reply")
    return values, crashes


def _token(value: str) -> re.Pattern:
    """`value` as a whole token: not inside a longer number or word ("19" not in "190", "19.5" or "x19")."""
    return re.compile(rf"(?<![\w.]){re.escape(value)}(?![\w]|\.\d)", re.I)


def wrong_value(gold: str, others: list[str]) -> str | None:
    """A wrong answer for `gold`: another row's gold of the same length, else the nearest whole number of the
    same length (g+1, g-1), else any other gold; None when there is none."""
    distinct = [o for o in dict.fromkeys(others) if o.strip().lower() != gold.lower()
                and (as_number(o) is None or as_number(o) != as_number(gold))]
    same = [o for o in distinct if len(o) == len(gold)]
    if same:
        return same[0]
    if re.fullmatch(r"-?\d+", gold):
        near = [str(int(gold) + 1), str(int(gold) - 1)]
        return next((n for n in near if len(n) == len(gold)), near[0])
    return distinct[0] if distinct else None


def _rows(samples: list[dict], scores: list[float], column: str) -> tuple[list, list]:
    """(gold, sample indexes) per data row: every row in the data's order (the built forms' rows: the same data gives
    the same rows whatever was sampled or paid, so two reviews compare; issue 49's seventh walk saw a hole on one
    run's probe rows and not on another's), and the rows with a paid sample, those whose paid sample writes the gold
    first (the real-sample forms: built from what the reward paid)."""
    rows: dict = {}
    for i, s in enumerate(samples):
        gold = (s.get("columns") or {}).get(column)
        if gold is not None and str(gold).strip():
            rows.setdefault(s.get("row_index", s.get("prompt_index")), (str(gold).strip(), []))[1].append(i)
    ordered = [rows[key] for key in sorted(rows, key=lambda key: (not isinstance(key, int),
                                                                   key if isinstance(key, int) else 0, str(key)))]

    def writes_gold(item):
        gold, idx = item
        return not any(_token(gold).search(completion_text(samples[i]["completion"])) for i in idx if scores[i] > 0)
    return ordered, sorted((row for row in ordered if any(scores[i] > 0 for i in row[1])), key=writes_gold)


def build_replies(samples: list[dict], scores: list[float],
                  column: str) -> tuple[list[BuiltReply], list[dict], list[Pair]]:
    """The replies built from up to PROBE_ROWS rows (the module's docstring): the bare forms on the data's first
    rows, the real-sample forms on rows the reward paid; the samples a reward is called on
    (each with its row's prompt and columns) and the (right twin, wrong) pairs, as indexes."""
    rows, paid_rows = _rows(samples, scores, column)
    golds = [g for g, _ in rows]
    replies, inputs, pairs = [], [], []

    def add(i, built_to_be, form, text, gold, wrong):
        s = samples[i]
        replies.append(BuiltReply(row=s.get("row_index", s.get("prompt_index", 0)), gold=gold, wrong=wrong,
                                  built_to_be=built_to_be, form=form, text=text, score=None))
        chat = isinstance(s.get("completion"), list)
        inputs.append({**s, "completion": [{"role": "assistant", "content": text}] if chat else text})
        return len(replies) - 1

    for gold, idx in rows[:PROBE_ROWS]:
        wrong = wrong_value(gold, golds)
        if wrong is None:
            continue
        first = idx[0]
        g, w = add(first, "right", "g alone", gold, gold, wrong), add(first, "wrong", "w alone", wrong, gold, wrong)
        ga = add(first, "right", "the answer is g", f"The answer is {gold}.", gold, wrong)
        wa = add(first, "wrong", "the answer is w", f"The answer is {wrong}.", gold, wrong)
        gn = add(first, "right", "g, not w", f"{gold}, not {wrong}", gold, wrong)
        pairs += [((g,), w, "bare"), ((ga,), wa, "bare"),
                  ((gn,), add(first, "wrong", "w, not g", f"{wrong}, not {gold}", gold, wrong), "not")]
    for gold, idx in paid_rows[:PROBE_ROWS]:
        wrong = wrong_value(gold, golds)
        if wrong is None:
            continue
        paid = sorted((i for i in idx if scores[i] > 0), key=lambda i: (
            not _token(gold).search(completion_text(samples[i]["completion"])), bool(samples[i].get("truncated"))))
        text, sample = completion_text(samples[paid[0]]["completion"]), f"real sample {samples[paid[0]]['id']}"
        real = add(paid[0], "as sampled", f"{sample} as written (paid)", text, gold, wrong)
        pairs.append(((real,), add(paid[0], "wrong", f"{sample} + ' Actually, the answer is w.'",
                                   f"{_ended(text)} Actually, the answer is {wrong}.", gold, wrong), "actually"))
        swapped = _token(gold).sub(lambda _: wrong, text)
        value = as_number(gold, words=True)
        if swapped != text and (value is None or value not in values_in(swapped)):
            pairs.append(((real,), add(paid[0], "wrong", f"{sample} with g replaced by w", swapped, gold, wrong),
                          "swap"))
    return replies, inputs, pairs


def _ended(text: str) -> str:
    """The text as a finished sentence, so an appended one reads as the reply's last word."""
    text = text.rstrip()
    return text if text.endswith((".", "!", "?")) else text + "."


def _twin(values: list[float], right: tuple[int, ...]) -> float:
    scored = [values[i] for i in right if not math.isnan(values[i])]
    return max(scored) if scored else math.nan


def _counted(values: list[float], pairs: list[Pair]) -> list[Pair]:
    """The pairs that count: all of them when the reward pays a bare right form (`g`, `The answer is g.`), else
    (it needs a format) only the real samples with the answer swapped."""
    if any(values[i] > 0 for right, _, kind in pairs if kind == "bare" for i in right):
        return pairs
    return [p for p in pairs if p[2] == "swap"]


def _tells(pairs: list[Pair], values: list[float]) -> bool:
    """The reward pays some right twin more than its wrong one (a wrong one scored None counts as unpaid)."""
    return any(_twin(values, right) > (0 if math.isnan(values[wrong]) else values[wrong])
               for right, wrong, _ in _counted(values, pairs))


def _judge(name: str, replies: list[BuiltReply], pairs: list[Pair], values: list[float], crashes: list[str],
           alike_counts: bool) -> RewardProbe:
    """The probe's verdict on one reward (the module's docstring); `alike_counts`: paying right and wrong alike is
    a flag (the reward reads the gold, or nothing in the set tells right from wrong)."""
    counted = _counted(values, pairs)
    paid = [(right, wrong) for right, wrong, _ in counted
            if values[wrong] > 0 and not _twin(values, right) > values[wrong]]
    reasons = list(crashes)
    tells = _tells(pairs, values)
    if paid and (tells or alike_counts):
        shown = [_paid(replies[w], replies[max(r, key=lambda i: values[i])], values[w], _twin(values, r))
                 for r, w in paid[:SHOWN]]
        more = f"; {len(paid) - SHOWN} more" if len(paid) > SHOWN else ""
        what = ("a reply built to be wrong" if tells else
                "replies built to be right and wrong alike (it tells none apart)")
        whose = "the built-in" if name in REGISTRY else "your reward"
        reasons.append(f"{whose} {name} paid {what}: " + "; ".join(shown)
                       + f"{more} ({len(paid)} of {len(counted)} wrong replies paid at least as much as their "
                       "twin; every built reply: the sheet's last section)")
    return RewardProbe(reward=name, flagged=bool(reasons), reasons=reasons, replies=replies)


def _paid(wrong: BuiltReply, twin: BuiltReply, paid: float, twin_paid: float) -> str:
    """A paid wrong reply quoted beside its right twin, each cut (when long) around where the two differ."""
    apart = where_apart(wrong.text, twin.text)
    return (f"{paid:g} to {excerpt(wrong.text, 120, apart)!r} (row {wrong.row}, gold '{wrong.gold}', built as "
            f"{wrong.form}; its twin {excerpt(twin.text, 90, where_apart(twin.text, wrong.text))!r} got "
            f"{twin_paid:g})")


def flagged_probes(review_result: dict) -> list[str]:
    """A line per reward the review's probes flagged (what a pass verdict passes over), its first reason."""
    return [f"{probe.get('reward')}: {(probe.get('reasons') or ['flagged'])[0]}"
            for probe in review_result.get("reward_probes") or [] if isinstance(probe, dict) and probe.get("flagged")]

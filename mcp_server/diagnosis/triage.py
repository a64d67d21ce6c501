"""Cause and effect: which finding explains which, from the evidence's timing and the mechanisms the registry
declares (each code's `causes`).

A finding's onset is the first logged step at which its rule, reading the log up to that step, finds it (a
config or log finding is there from the start). A finding is an effect of another when the registry says that
code can cause it and the cause's onset is not later than the effect's. An effect names its root cause in
`caused_by`, loses its own patch (the cause's patch is the fix) and is ranked right after its cause. The first
finding is the earliest root cause the evidence supports; when two unrelated causes fit the same effects, both
say so and name the samples to read to decide (`read_samples_at`).
"""

from __future__ import annotations

import re
from dataclasses import replace

from mcp_server.diagnosis.context import Ctx
from mcp_server.diagnosis.success_rate import cut_explains, spread_lost_after_kl
from mcp_server.diagnosis.models import DiagnosisFinding
from mcp_server.diagnosis.registry import REGISTRY, RULE_OF, TRIAGE_ORDER

LINEAR_SCAN = 64  # logs scanned one by one for an onset; a longer log is bisected
# A rule needs a few logs to call a trend (a length correlation 5, a truncation share 4): a cause whose rule fired
# up to this many logs after its effect's still fits; one that fired later came after the effect.
ONSET_SLACK = 4


def onset(ctx: Ctx, finding: DiagnosisFinding) -> int | None:
    """The first logged step at which the finding's rule fires on the log up to that step; None for a finding
    that rests on the config or the stdout log (there from the start)."""
    code = REGISTRY.get(finding.code)
    rows = ctx.run.rows
    if code is None or code.reads != "metrics" or not rows:
        return None
    check = RULE_OF[finding.code]

    def fires(n: int) -> bool:
        prefix = Ctx(replace(ctx.run, rows=rows[:n]))
        prefix._defaults = ctx._defaults
        return any(f.code == finding.code and f.severity != "info" for f in check(prefix))

    if len(rows) <= LINEAR_SCAN:
        return next((rows[n - 1]["step"] for n in range(1, len(rows) + 1) if fires(n)), rows[-1]["step"])
    low, high = 1, len(rows)  # bisect: the rules' evidence grows with the log
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if fires(mid) else (mid + 1, high)
    return rows[low - 1]["step"]


def can_cause(ctx: Ctx, cause: DiagnosisFinding, effect: DiagnosisFinding) -> bool:
    if cause is effect or cause.severity == "info" or effect.code not in REGISTRY[cause.code].causes:
        return False
    if effect.code in ("completions_never_terminate", "completions_truncated") and ctx.cut_before_training():
        return False  # the base model's samples were cut before any update: no training finding caused it
    if cause.code == "completions_truncated" and not cut_explains(ctx, effect.code):
        return False  # the completions that ended scored alike too, or not higher: the cut is not what did it
    if cause.code == "lr_out_of_range":  # a low rate explains a flat reward, a high one a divergence
        lr, _ = ctx.learning_rate
        low = lr is not None and lr < ctx.lr_range()[0]
        if low != (effect.code == "reward_flat"):
            return False
        if effect.code == "no_reward_signal" and not spread_lost_after_kl(ctx):
            return False  # walk 9: groups without spread before the KL grew, or too few after it, are not the rate's
    if cause.onset is None:
        return True
    if effect.onset is None:
        return False
    index = {row["step"]: i for i, row in enumerate(ctx.run.rows)}
    return index.get(cause.onset, 0) <= index.get(effect.onset, 0) + ONSET_SLACK


def _key(f: DiagnosisFinding) -> tuple:
    return (-1 if f.onset is None else f.onset, TRIAGE_ORDER.get(f.code, len(TRIAGE_ORDER)))


def link(ctx: Ctx, findings: list[DiagnosisFinding]) -> None:
    """Set onset, caused_by, other_causes and read_samples_at; clear the patches of effects."""
    problems = [f for f in findings if f.severity != "info"]
    for f in problems:
        f.onset = onset(ctx, f)
    causes = {id(e): [c for c in problems if can_cause(ctx, c, e)] for e in problems}

    def roots(f: DiagnosisFinding, seen: frozenset = frozenset()) -> set[str]:
        direct = [c for c in causes[id(f)] if c.code not in seen]
        if not direct:
            return {f.code}
        return set().union(*(roots(c, seen | {f.code}) for c in direct))

    by_code = {f.code: f for f in problems}
    for f in problems:
        found = roots(f) - {f.code}
        if not found:
            f.caused_by = None
            continue
        ordered = sorted((by_code[c] for c in found), key=_key)
        f.caused_by = ordered[0].code
        f.other_causes = [c.code for c in ordered[1:]]
        # every effect says what fixes it, as its root has it; its own patch and the words for it are withdrawn
        f.explanation = without_own_remedy(f.explanation) + effect_note(f.caused_by, by_code[f.caused_by])
        f.patch, f.add_rewards = {}, []
    for root in (f for f in problems if f.caused_by is None):
        effects = [f for f in problems if f.caused_by == root.code or root.code in f.other_causes]
        rivals = sorted({c for e in effects for c in [e.caused_by, *e.other_causes]} - {root.code, None})
        steps = [s for s in [root.onset, *(e.onset for e in effects)] if s is not None]
        if effects and steps:
            root.read_samples_at = min(steps)
        if rivals:
            root.other_causes = rivals
            root.explanation += (f" Another cause fits the same evidence: {', '.join(rivals)}. Read the samples at "
                                 f"step {root.read_samples_at} (sample_completions on the checkpoint nearest it) "
                                 "to decide which before applying a patch.")


# A sentence in which a finding proposes its own config change (its patch, an emission with other fields): an
# effect's is withdrawn with its patch (walk 12: no_reward_signal said "The patch samples more completions" under
# task_never_scores, which says no config change fixes it).
OWN_REMEDY = re.compile(r"\b(the patch|emit again)\b", re.IGNORECASE)


def without_own_remedy(text: str) -> str:
    """`text` less its sentences that propose the finding's own config change (OWN_REMEDY)."""
    sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z0-9])", text)  # "... successes. 50% of the completions ..." too
    return " ".join(s for s in sentences if not OWN_REMEDY.search(s))


def effect_note(code: str, cause: DiagnosisFinding) -> str:
    """What an effect says of its root cause's fix, as that cause has it: its patch, or no config change."""
    if cause.patch or cause.add_rewards:
        return (f" This is an effect of {code} (ranked above): its patch is the fix, so this finding carries none of "
                "its own.")
    return (f" This is an effect of {code} (ranked above), which no config change fixes: what it says to do is the "
            "fix, so this finding carries no patch of its own.")


def rank(findings: list[DiagnosisFinding]) -> list[DiagnosisFinding]:
    """Problems before notes; the root causes by onset (earliest first; the config's from the start), then the
    triage order; each cause followed by its effects in the order they appeared."""
    problems = [f for f in findings if f.severity != "info"]
    notes = sorted((f for f in findings if f.severity == "info"), key=lambda f: TRIAGE_ORDER.get(f.code, 99))
    roots = sorted((f for f in problems if f.caused_by is None), key=_key)
    out: list[DiagnosisFinding] = []
    for root in roots:
        out.append(root)
        out += sorted((f for f in problems if f.caused_by == root.code), key=_key)
    out += [f for f in problems if f not in out]
    return out + notes

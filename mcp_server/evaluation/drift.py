"""The checkpoint gate's drift measurement (promote_checkpoint): the base and the checkpoint decoded on a frozen
drift suite, the base's score recorded signed per model (eval/baselines.jsonl) and its first chunk enough to say
the suite cannot measure this model; drift_rule.py judges the numbers."""

from __future__ import annotations

import json
from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server.evaluation.evaluate import (
    baseline_ledger, baseline_model_pin, baseline_unrecorded, eval_plan, item_passed,
    load_goldens, model_key, record_baseline,
)
from mcp_server.evaluation.graders_apart import score_rows
from mcp_server.generation import generate, planned, render_prompt
from mcp_server.inspection.pins import model_content
from mcp_server.evaluation.models import DriftResult, PromoteRequest
from mcp_server.evaluation.drift_rule import judge_drift, judge_rerun
from mcp_server.evaluation.tiny_suite import drift_suite_path
from mcp_server.inspection.pinned_load import load_pinned
from mcp_server.reporting import Report, silent
from mcp_server.rewards.answers import first_line_answers
from mcp_server.rewards.basic import DEFAULT_TAGS
from mcp_server.rewards.spec import RewardSpec
from mcp_server.workspace import atomic_write_text, eval_root, sha256_file

DRIFT_FIRST_ITEMS = 12  # the base's first chunk of the drift suite: none of it passed ends its decoding
# The drift suite's graders, picked per row by its "grader" field (default "correctness"), with their rules: what
# NOT MEASURED names. Registry rewards with fixed parameters, or first_line_answers: no user code (graders_apart).
DRIFT_GRADERS = {"format": RewardSpec(name="format_reward"), "correctness": RewardSpec(name="correctness_reward"),
                 "number": RewardSpec(name="correctness_reward", params={"tag": None}), "text": None}
GRADER_RULES = {
    "correctness": "the reply's one <answer>...</answer> tag holds the answer (no tag, no pass)",
    "format": "the reply is <reasoning>...</reasoning><answer>...</answer>, nothing before its first tag",
    "number": "the plain reply's final stated answer ('= 7', 'The answer is 17.', its only number) is the answer",
    "text": "the reply's first line is the answer, or begins or ends with it as whole words, any case",
}
DRIFT_ROW = ('{"prompt": [{"role": "user", "content": "What is the capital of France?"}], "answer": "Paris", '
             '"grader": "text"}')


# ---------------------------------------------------------------- drift
def _drift_rows(suite: Path) -> tuple[list[dict], list[str]]:
    rows = load_goldens(suite, field="drift_suite")
    graders = []
    for i, row in enumerate(rows):
        kind = row.get("grader", "correctness")
        if kind not in DRIFT_GRADERS:
            raise UserInputError("drift_suite", f"row {i}: grader '{kind}' is not one of {', '.join(DRIFT_GRADERS)}"
                                 f" ({'; '.join(f'{k}: {v}' for k, v in GRADER_RULES.items())})")
        graders.append(kind)
    return rows, graders


def grade_drift_replies(rows: list[dict], replies: list[str]) -> list[bool]:
    """Pass or fail of each drift-suite row's reply, by the row's own grader (its "grader" field: GRADER_RULES)."""
    passes = []
    for row, reply in zip(rows, replies, strict=True):
        kind = row.get("grader", "correctness")
        if DRIFT_GRADERS[kind] is None:
            passes.append(first_line_answers(reply, row.get("answer")))
        else:
            passes.append(bool(item_passed(score_rows([row], [reply], [DRIFT_GRADERS[kind]])[0])))
    return passes


def _drift_passes(
    model_ref, loaded, rows, graders, max_new_tokens, temperature=0.0, seed=3407, report: Report = silent,
    replies: list | None = None,
) -> list[bool]:
    """Pass or fail of each drift-suite row; rows are graded by their own grader kind, decoded together, in this
    process; `replies`, when given, gets the decoded replies."""
    model, tokenizer = loaded
    texts = [render_prompt(tokenizer, r["prompt"]) for r in rows]
    kinds = graders
    ended: dict = {}
    completions = generate(model, tokenizer, texts, max_new_tokens, temperature=temperature, seed=seed, report=report,
                           give_up=lambda i, text: kinds[i] == "format" and not format_reachable(text), ended=ended)
    failed = sum(kind == "format" and not format_reachable(c) for kind, c in zip(kinds, completions))
    if failed and ended.get("steps", max_new_tokens) < max_new_tokens:
        report(len(rows), len(rows), f"{failed} of {len(rows)} replies failed the format from their first words: "
               f"each ended there, decoding stopped at token {ended['steps']} of up to {max_new_tokens}")
    if replies is not None:
        replies[:] = completions
    return grade_drift_replies(rows, completions)


def format_reachable(text: str) -> bool:
    """Whether a reply beginning with `text` can still pass the drift suite's format grader (format_reward, strict:
    nothing before its first tag): what it shows so far, less its last character (half of one, perhaps), is a
    prefix of that tag or begins with it. Exact: a reply given up on could never have passed."""
    seen, opening = text.lstrip()[:-1], f"<{DEFAULT_TAGS[0]}>"
    return opening.startswith(seen) or seen.startswith(opening)


def _drift_pass_rate(model_ref, loaded, rows, graders, max_new_tokens, report: Report = silent) -> float:
    """Greedy pass rate on the drift suite."""
    passes = _drift_passes(model_ref, loaded, rows, graders, max_new_tokens, report=report)
    return sum(passes) / len(passes)


def base_drift_path(base: str, suite: Path, content: str | None = None) -> Path:
    """eval/drift-<model>-<suite>[-<content>].json: a base model's drift record is of its content too (model_content
    of its pin: issue 48, round 10 F3), beside a record of other weights at the same path, never in its place."""
    tail = f"-{content[:12]}" if content else ""
    return eval_root() / f"drift-{model_key(base)}-{sha256_file(suite)[:12]}{tail}.json"


def floor_note(decoded: int | None, items: int | None) -> str:
    """What a base drift record that stopped at the first chunk says (DRIFT_FIRST_ITEMS), else ""."""
    if decoded is None or items is None or decoded >= items:
        return ""
    return (f"the base passes none of the first {decoded} items: the suite cannot measure drift for this "
            f"model (rule: 0 of the first {DRIFT_FIRST_ITEMS} ends the base's decoding; a base passing 1 item in 5 "
            f"scores 0 of {DRIFT_FIRST_ITEMS} by chance {0.8 ** DRIFT_FIRST_ITEMS:.0%} of the time)")


def grader_counts(graders: list[str]) -> dict[str, int]:
    """How many rows each grader kind grades, in GRADER_RULES' order."""
    return {kind: graders.count(kind) for kind in GRADER_RULES if kind in graders}


def _shown(replies: list[str], n: int = 3, width: int = 80) -> list[str]:
    """The first `n` replies, each cut to `width` characters: what NOT MEASURED shows of the base's replies."""
    return [r if len(r) <= width else r[:width] + "..." for r in replies[:n]]


def unmeasured_note(drift) -> tuple[str, str]:
    """Why the drift is NOT MEASURED (a DriftResult in band "unmeasured"), and what shows the cause and measures it:
    the grader(s) the rows were graded by, the base's first replies, and the row format to use (walk 12: plain-text
    rows graded by the default correctness grader, which reads an <answer> tag, scored 0 with no word of why)."""
    why = floor_note(drift.base_items_decoded, drift.suite_items) or \
        f"the base model passes {drift.base_pass_rate:.1%} of the frozen suite"
    graded = ", ".join(f"{kind} ({n} rows: {GRADER_RULES[kind]})" for kind, n in drift.graders.items())
    how = f"graded by {graded}; " if graded else ""
    if drift.base_replies:
        how += "the base's first replies: " + ", ".join(json.dumps(r) for r in drift.base_replies)
        if "correctness" in drift.graders and not any("<answer>" in r for r in drift.base_replies):
            how += " (none has the <answer> tag the correctness grader reads)"
        how += "; "
    return why, (how + f"to measure drift give rows the base passes, one JSON object a line, e.g. {DRIFT_ROW} "
                 '("grader": "text" for a plain-text answer, "number" for a number, "correctness" (the default) '
                 "only where the base writes <answer> tags)")


def base_drift_recorded(base: str, suite: Path, pin: dict | None) -> bool:
    """Whether the base's drift record on `suite` is in eval/ as recorded (_base_drift reads it, decodes nothing)."""
    path = base_drift_path(base, suite, model_content(pin))
    return path.is_file() and baseline_unrecorded(path) is None


def _base_drift(base: str, base_ref, suite: Path, rows, graders, max_new_tokens, report: Report = silent,
                pin: dict | None = None) -> dict:
    """The base model's greedy drift record, measured once per (model, suite), kept in eval/ and recorded, signed,
    in eval/baselines.jsonl: a file not recorded there as it is (an earlier version's, or one written by hand) is
    measured again. The suite is decoded in two parts: the first DRIFT_FIRST_ITEMS items, and when the base passes
    none of them, no more (issue 49: 3.5 of 6.4 minutes decoding a suite the base scores 0% on); else the whole
    suite in one pass, as the checkpoint is decoded. `pin`: the base content the record is of (the baseline's
    model_pin); the base model is decoded only when it is that content now."""
    content = model_content(pin)
    path = base_drift_path(base, suite, content)
    if base_drift_recorded(base, suite, pin):
        record = json.loads(path.read_text(encoding="utf-8"))
        report(1, 1, f"measured before, recorded in {baseline_ledger().name}: passed {record.get('passed', '?')} of "
               f"{record.get('decoded', '?')} items decoded ({record.get('items', len(rows))} in the suite)")
        return record
    now = model_content(baseline_model_pin(base_ref)) if pin is not None else None
    if now != content:
        raise UserInputError("model", f"the base model {base} is not now the content its baseline measured (files "
                             f"sha256 {str(content)[:12]}; now {str(now)[:12]}): its drift would be of another model. "
                             "Put its files back as they were, then promote again")
    loaded = load_pinned(base_ref, pin, what="decoded")  # the content the record names (round 18, b05)
    record = {"model": base, "model_pin": pin, "suite": str(suite), "suite_sha256": sha256_file(suite),
              "items": len(rows), "max_new_tokens": max_new_tokens, "graders": grader_counts(graders)}
    replies: list = []
    first = _drift_passes(base_ref, loaded, rows[:DRIFT_FIRST_ITEMS], graders[:DRIFT_FIRST_ITEMS], max_new_tokens,
                          report=report, replies=replies) if len(rows) > DRIFT_FIRST_ITEMS else None
    if first is not None and not any(first):
        record.update(pass_rate=0.0, passed=0, decoded=len(first), passes=first)
    else:
        passes = _drift_passes(base_ref, loaded, rows, graders, max_new_tokens, report=report, replies=replies)
        record.update(pass_rate=sum(passes) / len(passes), passed=sum(passes), decoded=len(passes), passes=passes)
    record["replies"] = replies  # the base's decoded replies, each as its row's grader saw it (walk 12)
    text = json.dumps(record, indent=2) + "\n"
    atomic_write_text(path, text)
    record_baseline(path, text)  # the sha256 of these bytes, never the file read back
    return record


def check_drift(
    request: PromoteRequest, base: str, base_ref, ckpt_loaded, max_new_tokens: int, report: Report = silent,
    pin: dict | None = None,
) -> DriftResult:
    suite = Path(request.drift_suite).expanduser() if request.drift_suite else drift_suite_path()
    if not suite.is_file():
        raise UserInputError("drift_suite", f"no such file: {suite}")
    rows, graders = _drift_rows(suite)

    def stage(name: str, decodes: bool = True, first: bool = False) -> Report:  # a checkpoint: its base's size
        return stage_report(report, name, drift_plan(base_ref, len(rows), max_new_tokens, first) if decodes else None)

    record = _base_drift(base, base_ref, suite, rows, graders, max_new_tokens,
                         stage("drift suite, base model", not base_drift_recorded(base, suite, pin), True), pin)
    base_rate = record["pass_rate"]
    if judge_drift(base_rate, base_rate) == "unmeasured":  # no drop can show: the checkpoint is not decoded on it
        result = DriftResult(suite=str(suite), suite_sha256=sha256_file(suite), base_pass_rate=base_rate,
                             base_items_decoded=record.get("decoded"), suite_items=len(rows),
                             checkpoint_pass_rate=None, drop_points=None, band="unmeasured", ok=True,
                             graders=grader_counts(graders), base_replies=_shown(record.get("replies") or []))
        why, how = unmeasured_note(result)
        report(1, 1, f"drift suite: NOT MEASURED, {why}; the checkpoint is not decoded on it; {how}")
        return result
    ckpt_rate = _drift_pass_rate(None, ckpt_loaded, rows, graders, max_new_tokens,
                                 report=stage("drift suite, checkpoint"))
    band = judge_drift(base_rate, ckpt_rate)
    result = DriftResult(
        suite=str(suite), suite_sha256=sha256_file(suite), base_pass_rate=base_rate, checkpoint_pass_rate=ckpt_rate,
        drop_points=round((base_rate - ckpt_rate) * 100, 2), band=band, ok=band in ("noise", "unmeasured"),
    )
    if band == "rerun":  # noise or real? sample both models under other seeds, item by item
        base_loaded = load_pinned(base_ref, pin, what="decoded")
        base_passes, ckpt_passes = {}, {}
        for seed in request.rerun_seeds:
            base_passes[str(seed)] = _drift_passes(None, base_loaded, rows, graders, max_new_tokens,
                                                   request.rerun_temperature, seed,
                                                   stage(f"drift rerun seed {seed}, base model"))
            ckpt_passes[str(seed)] = _drift_passes(None, ckpt_loaded, rows, graders, max_new_tokens,
                                                   request.rerun_temperature, seed,
                                                   stage(f"drift rerun seed {seed}, checkpoint"))
        judged = judge_rerun(base_passes, ckpt_passes)
        result.rerun_drops, result.rerun_mean_drop, result.ok = judged.drops, judged.mean_drop, judged.noise
        result.rerun_gained, result.rerun_lost, result.rerun_p_value = judged.gained, judged.lost, judged.p_value
    return result


def drift_plan(base_ref, items: int, max_new_tokens: int, first: bool = False) -> dict:
    """eval_plan for a drift stage, in the suite's words (items, not goldens). `first`: the base's stage, whose
    first DRIFT_FIRST_ITEMS items are what runs for sure (walk 10: "plan: 40 goldens", then 12 decoded)."""
    chunk = DRIFT_FIRST_ITEMS if first and items > DRIFT_FIRST_ITEMS else items
    plan = eval_plan(base_ref, chunk, max_new_tokens)
    text = plan["text"].replace(f"{chunk} goldens", f"{chunk} drift items", 1)
    if chunk < items:
        text = (f"the first {chunk} of {items} drift items (all {items} decoded after them only if the base "
                f"passes one of the first {chunk}); " + text.replace(f"{chunk} drift items, ", "", 1))
    return {**plan, "text": text}


def stage_report(report: Report, stage: str, plan: dict | None = None) -> Report:
    """The report of one decoding stage (baseline, checkpoint, drift, rerun), its messages naming the stage; made as
    the stage begins, it reports the start (each stage counts from 0), with its `plan` (eval_plan) when given."""
    report(0, None, f"{stage}: starting" + (f"; plan: {plan['text']}" if plan else ""))
    return planned(lambda done, total, message: report(done, total, f"{stage}: {message}"), plan)

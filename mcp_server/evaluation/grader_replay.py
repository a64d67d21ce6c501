"""The grader replay: promote_checkpoint grades the baseline's stored replies again before it trusts a comparison.

A baseline is identified by its graders' code and the files they open in the process (rewards.reads), not by what a
grader reaches otherwise: a file read by a child process it starts (`subprocess.run(["cat", path])`), an environment
variable, the clock, the network (issue 48, round 15 F1: the file a grader read through /bin/cat said "fail" when the
base model was measured and "pass" at promotion: PROMOTE by +100 points with the checkpoint being the base model
itself). What the trainer does for the review (inspection.replay, inspection.row_probes: the reviewed pairs scored
again at launch), promote does for the baseline: its stored replies (every golden's completion, kept in
eval/baseline-*.json since evaluate_model was first written) are graded again by the graders the checkpoint is about
to be judged with, in the same process, called as the baseline called them (every reply in one call, in goldens
order); each score must be the stored one (`replay_scores.same_score`). After the checkpoint is graded, its replies
and the baseline's are graded again once more (`regrade_after`): a grader whose scores move while the promotion runs
(a file changed while the checkpoint decodes, a grader that pays on its first call only) is refused too. Refused
naming the grader, the items (index and the reply's start), stored against now, and the way on.

Tolerance (`replay_scores.same_score`): exact for a stored score that is a whole number (0/1, booleans, counts: no
noise can make an integer reward off by a little), and always exact on which side of 0 a score falls (a pass is a
score above 0); otherwise relative 1e-6 (absolute 1e-9 near 0). The replay feeds the same replies and rows to the
same code in the same call shape, so a deterministic grader gives the bits it gave; the tolerance is for a grader
computing in float32 with a threaded reduction (torch on several cores: last-bit differences, about 1e-7 relative),
and it is far below any change of rule. NaN matches NaN (the baseline keeps it as NaN).

A baseline that keeps no completions (none written by evaluate_model; a file shaped by hand or by a version before
it) cannot be replayed: refused, saying so, never passed silently. evaluate_model then files a new baseline beside it
(evaluate._file_baseline: one whose replies its graders score otherwise than stored, or none stored, is a baseline of
another rule), and `replayed_pick` chooses, of the baselines promote may use, the first whose replay holds.

The stored replies are texts the workspace holds: an input changed after the baseline to pay every reply but the
baseline's stored ones replayed "the same scores" and signed a PROMOTE at +100 points for a checkpoint answering
`llllll` (round 17, b04). So the baseline also keeps the grades of its blind probes (replay_scores.blind_pairs,
rewards.blind_texts: replies derived from the evidence key and the baseline's identity, the texts never stored),
graded again with the stored replies each time (before the checkpoint decodes and after); one graded otherwise
refuses, naming the grader and the probe by number, kind and golden (never its text). A baseline without them (written
before) is refused as one without replies is; evaluate_model then files one beside it.

Cost: the graders run three more times over the goldens (the baseline's replies twice, the checkpoint's once), no
decoding, plus 12 blind probes each time; promote's reasons give the seconds (0.01-0.06 s for the 20 goldens of
`bench/hostile_r15/promote_subprocess.sh`, whose promotion takes ~20 s on a CPU). What it cannot see: a grader that
scores the baseline's replies as stored and the checkpoint's otherwise, consistently (its code decides that, and its
code is pinned), an input changed and put back within the checkpoint's own grading call, or an input that tells
the blind probes from a model's replies or spares every text the graders were ever shown (rewards.blind_texts).
"""

from __future__ import annotations

import time
from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server.evaluation.evaluate import read_goldens, resolve_goldens
from mcp_server.evaluation.graders_apart import grade, graded
from mcp_server.evaluation.replay_scores import BLIND_KEY, blind_grades, blind_moved, blind_pairs, moved, \
    stored_items
from mcp_server.rewards import reads
from mcp_server.rewards.read_events import ENV_PREFIX

def regraded(rows: list[dict], *batches: tuple[list[dict], list]) -> list[list[dict[str, float]]]:
    """Each batch's (items, graders) completions graded again now, as evaluate_model graded them (one call per
    grader, every item), in the keyless worker, every batch in one round trip (graders_apart.graded)."""
    return graded([(rows, [i["completion"] for i in items], graders) for items, graders in batches])


def variables_moved(before, after: dict) -> list[str]:
    """A line per environment variable the graders read when the baseline was measured (rewards.read_events) that
    reads otherwise now, where the graders grade (the keyless worker: their point of use)."""
    before = before if isinstance(before, dict) else {}
    env = {k: v for k, v in after.items() if k.startswith(ENV_PREFIX) and k in before}
    return reads.unlike({k: v for k, v in before.items() if k in env}, env)


def blind_regraded(rows: list[dict], baseline: dict, items: list[dict], graders: list) -> list[str]:
    """The baseline's blind probes (replay_scores.blind_pairs) graded again now: a line per grader that scores one
    otherwise than the baseline recorded (none recorded: a line saying so)."""
    if not isinstance(baseline.get(BLIND_KEY), dict):
        return ["it keeps no blind probes"] if items else []
    pairs = blind_pairs(baseline, [i["completion"] for i in items])
    now = blind_grades(grade, rows, pairs, graders, reads.Reads())
    return blind_moved(baseline[BLIND_KEY], now, pairs)


def baseline_goldens(goldens: str | None, baseline: dict) -> tuple[Path, str, list[dict]]:
    """The goldens file (`goldens` given, else the baseline's), the sha256 and rows of ONE read of it (the bytes
    hashed are the rows returned, round 19), which must be the baseline's: its sha256, and each row the item the
    baseline stored at its index (same_items)."""
    path = resolve_goldens(goldens) if goldens else Path(baseline["goldens"])
    if not path.is_file():
        raise UserInputError("goldens", f"the baseline's goldens file {path} is gone; restore it (sha256 "
                             f"{baseline['goldens_sha256']}) or re-baseline under another model name")
    rows, sha = read_goldens(path)
    if sha != baseline["goldens_sha256"]:
        raise UserInputError(
            "goldens", f"{path} (sha256 {sha[:12]}) is not the goldens the baseline was measured on "
            f"({baseline['goldens']}, sha256 {baseline['goldens_sha256'][:12]}): the comparison would mean nothing",
        )
    same_items(path, baseline, rows)
    return path, sha, rows


def _texts(prompt) -> list[str]:
    """The text a goldens prompt puts before the model: the string, or each chat message's content."""
    if isinstance(prompt, str):
        return [prompt.strip()]
    if isinstance(prompt, list):  # a message's content: text, or parts of which the text ones are rendered
        parts = [p for m in prompt if isinstance(m, dict) for p in (
            m.get("content") if isinstance(m.get("content"), list) else [m.get("content")])]
        return [str(p.get("text") if isinstance(p, dict) else p).strip() for p in parts
                if (p.get("text") if isinstance(p, dict) else p)]
    return [str(prompt)]


def same_items(path: Path, baseline: dict, rows: list[dict]) -> None:
    """Each goldens row is the item the baseline stored at its index: its prompt's text in the prompt the baseline
    decoded (rendered by the base's chat template), its answer the stored one. Promote pairs the checkpoint's
    items with the baseline's by index (round 19, b08: a baseline measured on other prompts under the goldens'
    sha256 paired each reply with another question); the first item that differs is refused, named."""
    items = baseline.get("items")
    if not isinstance(items, list) or not items:
        return  # no stored items: the grader replay refuses the baseline (it keeps no replies)
    if len(items) != len(rows):
        raise UserInputError("baseline", f"the baseline stores {len(items)} items, {path} holds {len(rows)} rows: "
                             "it was not measured on these goldens; measure the base model again with "
                             "evaluate_model")
    for index, (item, row) in enumerate(zip(items, rows)):
        stored = str(item.get("prompt")) if isinstance(item, dict) else ""
        answer = None if row.get("answer") is None else str(row.get("answer"))
        missing = next((text for text in _texts(row.get("prompt")) if text not in stored), None)
        if missing is not None or (isinstance(item, dict) and item.get("answer") != answer):
            what = f"its prompt {missing[:60]!r} is not in" if missing is not None else "its answer is not"
            raise UserInputError("baseline", f"goldens item {index} of {path}: {what} the baseline's item "
                                 f"{index} (the baseline decoded {stored[-80:]!r}): the baseline was not measured "
                                 "on these goldens' items, so no reply pairs with its question. Measure the base "
                                 "model again with evaluate_model on this file")


AGAIN = ("evaluate the base model again with the same goldens and graders (evaluate_model; CLI: llm-finetuning "
         "evaluate-model MODEL --goldens FILE --graders ...): it files a baseline of the graders as they score now "
         "beside this one, and promote_checkpoint judges against the baseline whose replies its graders score as "
         "stored")


def replay_baseline(path: Path, baseline: dict, goldens: str | None) -> float:
    """Grade the baseline's stored replies again with its graders; the seconds it took. UserInputError (field
    "baseline") when it cannot run or a score differs: the module's doc."""
    start = time.monotonic()
    rows = baseline_goldens(goldens, baseline)[2]
    items = stored_items(baseline, len(rows))
    if items is None:
        raise UserInputError("baseline", f"the grader replay could not run: {path.name} keeps no completion for "
                             f"each of its {len(rows)} goldens (a baseline evaluate_model did not write as it writes "
                             "now), so nothing shows that its graders still score as they did when it was measured. "
                             f"Not compared: {AGAIN}")
    if not isinstance(baseline.get(BLIND_KEY), dict):
        raise UserInputError("baseline", f"the grader replay could not run: {path.name} keeps no blind probes "
                             "(replies derived from the evidence key: a baseline evaluate_model wrote before it "
                             "kept them), so nothing shows that its graders still score replies other than its own "
                             f"as they did. Not compared: {AGAIN}")
    graders = baseline.get("graders") or []
    read = reads.Reads()
    now = grade(rows, [i["completion"] for i in items], graders, read)
    lines = variables_moved(baseline.get("graders_reads"), read.pins()) + moved(items, now, graders)
    lines += blind_regraded(rows, baseline, items, graders)
    if lines:
        raise UserInputError("baseline", f"the grader replay: {path.name}'s stored replies and blind probes, graded "
                             "again now by its graders, do not get the scores it stored (or a variable they read "
                             f"moved): {' | '.join(lines)}. A grader reads something the baseline's pins do not cover "
                             "(a file read by a process it starts, an environment variable, the clock, the network) "
                             "and it changed since the baseline was "
                             f"measured ({baseline.get('written_at', 'when is not recorded')}): the checkpoint would "
                             "be graded by another rule than the base model. Put back what the graders read as it "
                             f"was then, or, if they score as they should now, {AGAIN}")
    return time.monotonic() - start


def replayed_pick(ordered: list[tuple[Path, dict]], goldens: str | None, check) -> tuple[Path, dict, float]:
    """(its file, the baseline, the replay's seconds): of `ordered` (promote's order of preference), the first whose
    replay holds, each checked by `check(path, baseline)` first (an edited one is refused); the first's refusal when
    none holds."""
    refusal = None
    for path, baseline in ordered:
        check(path, baseline)
        try:
            return path, baseline, replay_baseline(path, baseline, goldens)
        except UserInputError as exc:
            if not str(exc).startswith("baseline: the grader replay"):
                raise
            refusal = refusal or exc
    raise refusal


def regrade_after(path: Path, baseline: dict, rows: list[dict], items: list, graders: list) -> float:
    """After the checkpoint was graded: its replies and the baseline's graded again; UserInputError when a score
    moved during the promotion. The seconds it took."""
    start = time.monotonic()
    ours = [i.model_dump() if hasattr(i, "model_dump") else i for i in items]
    stored = stored_items(baseline, len(rows)) or []
    again_ours, again_stored = regraded(rows, (ours, graders), (stored, graders))
    lines = [f"the checkpoint's {line}" for line in moved(ours, again_ours, graders)]
    lines += [f"the baseline's {line}" for line in moved(stored, again_stored, graders)]
    lines += [f"the baseline's {line}" for line in blind_regraded(rows, baseline, stored, graders)]
    if lines:
        raise UserInputError("graders", "the grader replay after the checkpoint was graded: the same replies graded "
                             f"again get other scores: {' | '.join(lines)}. A grader's scores moved while this "
                             "promotion ran (a file it reads through a process it starts changed meanwhile, or it "
                             "depends on the clock or on how often it is called): no comparison is made with it. Put "
                             f"back what the graders read as it was when {path.name} was measured and promote again; "
                             "a grader whose score depends on anything but the reply and its row cannot judge one")
    return time.monotonic() - start

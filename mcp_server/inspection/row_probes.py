"""Row probes: every training row scored once at review and again by the trainer before its first step (issue 48).

The replay (inspection.replay) scores the reviewed samples again, so it sees an input that moves a sampled prompt's
score. A reward can read an input keyed by the row (an answer key read through a process it starts, an environment
variable holding a table) that is changed after the verdict for the rows nobody sampled: the replay saw the same
scores and training ran on the changed ones (round 15, G2). So inspect_rewards also scores each training row, as
the trainer's loader reads the rows (training_inputs.load_training_inputs: the rows the verdict's "trained" pin
holds, in order), with a reviewed completion paired to it: for each reward, the samples it scored non-zero (all
samples where it scored none), row j with the (j mod count)-th of them, so a weight a reward multiplies its score
by shows. The scores go to review.json (KEY: the rows' count and hash, each reward's paired sample ids and one score
per row), which the verdict pins; the trainer's replay scores the same pairs (the trainer's own rows, after any
re-filter the verdict records) and compares them as it compares the samples: a difference names the reward, the
row and both scores, and exits (status 3), on every rank (replay.replay_review).

Probed: every reward written in the workspace (a dotted path), rubric_judge (its judge is a model or a callable
outside the project) and a built-in reward wrapping one of those (length_penalty's `reward`). Left out, and named
in the review: the project's other built-in rewards, whose code is the project's own and reads nothing but the
completion, its row and the reward's parameters.
What it costs: one reward call per training row per probed reward (in batches of CHUNK rows), at review and at
launch; inspect_rewards' progress line and the trainer's replay line say how long. Rows past CAP (the first CAP rows
in the data's order are probed) are not probed: the review and the launch line name them, and a change keyed to
them would not show. What a probe cannot show: a reward that pays nothing for a row with the paired completion
(a correctness reward given another prompt's answer) shows no weight it multiplies by on that row.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import time
from collections.abc import Callable

from mcp_server.errors import UserInputError
from mcp_server.reporting import Report, silent
from mcp_server.rewards.registry import REGISTRY
from mcp_server.rewards.spec import RewardSpec
from mcp_server.runs import Run

KEY = "row_probes"  # review.json: the record (the verdict pins review.json)
CAP = 20_000  # rows probed, the first in the data's order
# each row scored alone, at review and at replay: a reward that reads its position in the batch scores a row
# alike whichever rows a re-filter dropped
CHUNK = 1
JUDGES = frozenset({"rubric_judge"})  # built-in, yet its judge is outside the project's code
# How the review scores a batch (review._score: called as TRL calls rewards), handed in by the caller.
Score = Callable[[list, list, list], list]


class Unreplayable(Exception):
    """The record cannot be replayed here (what to do in the message): the replay refuses with it."""


def same(stored, now: float) -> bool:
    """Whether `now` is the score the review stored as `stored` (review._json_float: None for NaN, 6 decimals)."""
    if stored is None:
        return math.isnan(now)
    if isinstance(stored, bool) or not isinstance(stored, (int, float)) or math.isnan(now):
        return False
    return round(now, 6) == stored or math.isclose(now, stored, rel_tol=1e-9, abs_tol=1e-12)


def shown(value) -> str:
    return "None" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:g}" \
        if isinstance(value, (int, float)) else str(value)


def probed(spec: RewardSpec) -> bool:
    """A reward written in the workspace (a dotted path), a built-in one whose judge is outside (JUDGES), or one
    that wraps such a reward (length_penalty's `reward`: any reward spec among its parameters)."""
    name = spec.name.removeprefix("mcp_server.rewards.")
    return name not in REGISTRY or name in JUDGES or any(_writes(v) for v in spec.params.values())


def _writes(value) -> bool:
    """Whether a parameter holds a reward spec (a mapping with a name) that is probed."""
    if isinstance(value, dict):
        if isinstance(value.get("name"), str) and probed(RewardSpec.model_validate(value)):
            return True
        return any(_writes(v) for v in value.values())
    return isinstance(value, list) and any(_writes(v) for v in value)


def _row_sample(j: int, row: dict, sample: dict) -> dict:
    """Row j as the sampler writes a sample of it (its prompt, its other columns) with `sample`'s completion."""
    return {"id": f"row {j}", "prompt_index": j, "sample_index": 0, "row_index": j, "prompt": row.get("prompt"),
            "columns": {k: v for k, v in row.items() if k != "prompt"}, "completion": sample["completion"],
            "completion_ids": sample.get("completion_ids") or []}


def _scores(score: Score, func, spec: RewardSpec, rows: list[tuple[int, dict]], pool: list[dict]) -> list[float]:
    out: list[float] = []
    for start in range(0, len(rows), CHUNK):
        batch = [_row_sample(j, row, pool[j % len(pool)]) for j, row in rows[start:start + CHUNK]]
        out += score([func], [spec], batch)[0]
    return out


@contextlib.contextmanager
def training_rows(run: Run):
    """(the rows as train/train.py's loader reads them, their hash), usable while the block runs (their arrow files
    live in a fresh cache folder removed after it)."""
    from mcp_server.inspection.training_inputs import load_training_inputs, rows_sha256

    with tempfile.TemporaryDirectory(prefix="datasets-") as cache:
        dataset = load_training_inputs(run, cache, fingerprinted=False)["dataset"]
        yield dataset, rows_sha256(dataset)


def rows_of(dataset, count: int) -> list[dict]:
    """The first `count` rows as plain dicts (what the sampler hands a sample's prompt and columns from)."""
    plain = dataset.with_format(None)
    return list(plain.select(range(min(count, len(plain)))))


def review_rows(run: Run, score: Score, funcs: list, specs: list[RewardSpec], names: list[str], samples: list[dict],
                scores: list[list[float]], meta: dict, warnings: list[str], report: Report = silent) -> dict:
    """inspect_rewards' probes: the record review.json keeps under KEY (what the sheet should warn of: added to
    `warnings`)."""
    chosen = [r for r, s in enumerate(specs) if probed(s)]
    record: dict = {"cap": CAP, "left_out": [names[r] for r in range(len(specs)) if r not in chosen], "rewards": {}}
    if not chosen:
        return {**record, "rows": None, "probed_rows": 0}
    if not run.config.is_file():  # sampled with a model and data set, nothing emitted: no rows train from it yet
        warnings.append("no training config yet (train/config.yaml): the training rows are not probed; a launch "
                        "refuses this review's verdict, so inspect again after emit_grpo_config")
        return {**record, "rows": None, "probed_rows": 0, "no_config": True}
    started = time.monotonic()
    try:
        with training_rows(run) as (dataset, sha):
            rows = rows_of(dataset, CAP)
            total = len(dataset)
    except UserInputError as exc:
        raise UserInputError("run", f"the training rows cannot be read as the trainer reads them, so they cannot "
                             f"be probed ({exc})") from None
    loaded = time.monotonic()
    by_id = {s.get("id"): s for s in samples}
    for r in chosen:
        pool = [s.get("id") for i, s in enumerate(samples) if scores[r][i] != 0 and scores[r][i] == scores[r][i]]
        pool = pool or [s.get("id") for s in samples]
        try:
            values = _scores(score, funcs[r], specs[r], list(enumerate(rows)), [by_id[i] for i in pool])
        except UserInputError as exc:
            raise UserInputError(f"rewards[{r}]", f"on the training rows, each paired with a reviewed completion "
                                 f"(the row probes): {str(exc).split(': ', 1)[-1]}") from None
        record["rewards"][names[r]] = {"pool": pool, "scores": [None if v != v else round(v, 6) for v in values]}
    record.update(rows=total, rows_sha256=sha, probed_rows=len(rows))  # no timings: a review is the same bytes again
    calls = len(rows) * len(chosen)
    report(1, 1, f"row probes: {calls} reward calls in {time.monotonic() - loaded:.2f} s, the {total} rows read as "
                 f"the trainer reads them in {loaded - started:.2f} s")
    trained = meta.get("trained") if isinstance(meta.get("trained"), dict) else {}
    if trained.get("rows_sha256") not in (None, sha):
        warnings.append("the training rows are not the rows the samples were drawn from (the data changed since): "
                        "sample again before recording a verdict")
    if total > len(rows):
        warnings.append(uncovered(record))
    return record


def uncovered(record: dict) -> str:
    total, probed_rows = record.get("rows") or 0, record.get("probed_rows") or 0
    return (f"training rows {probed_rows}-{total - 1} ({total - probed_rows} of {total}) are not probed (the row "
            f"probes stop at {record.get('cap')} rows): an input keyed to those rows is not checked at launch")


def summary(record: dict | None) -> str:
    """What the review probed and what it costs (reward calls; the time: inspect_rewards' progress line and the
    trainer's replay line; none here, so that the same review is the same bytes)."""
    if not record:
        return "no training rows probed"
    left = record.get("left_out") or []
    kept = f"; left out (the project's own code, reads only the completion and its row): {', '.join(left)}" \
        if left else ""
    if not record.get("rewards"):
        return f"no training rows probed: no reward written in the workspace{kept}"
    calls = record["probed_rows"] * len(record["rewards"])
    capped = f"; {uncovered(record)}" if record["rows"] > record["probed_rows"] else ""
    return (f"probed {record['probed_rows']} training rows x {len(record['rewards'])} rewards "
            f"({', '.join(record['rewards'])}), each row paired with a reviewed completion: {calls} reward calls "
            f"here and again at each launch{capped}{kept}")


def replay_rows(run: Run, score: Score, record, verdict: dict, funcs: list, specs: list[RewardSpec],
                names: list[str], samples: list[dict], dataset) -> tuple[str, list[str]]:
    """The trainer's probes (the module's doc): (what it compared, one line per reward whose row scores differ).
    Unreplayable for a record that cannot be replayed. `dataset`: the rows the trainer read and its point-of-use
    check verified (None: read here, and compared with the rows the review probed)."""
    if isinstance(record, dict) and record.get("no_config") and any(probed(s) for s in specs):
        _stop("the review was made before the run had a training config, so it probed no training row: inspect "
              "again and record a new verdict")
    if not isinstance(record, dict) or not isinstance(record.get("rewards"), dict):
        if any(probed(s) for s in specs):
            _stop("the review probed none of the training rows (recorded before row probes): a reward's input "
                    "keyed to a row nobody sampled would not show. Inspect again and record a new verdict.")
        return "", []
    if not record["rewards"]:
        return "", []
    if dataset is not None:
        compared, differ = _compare(score, record, verdict, funcs, specs, names, samples, dataset)
    else:
        with training_rows(run) as (loaded, sha):
            if not verdict.get("data_updates") and sha != record.get("rows_sha256"):
                _stop("the training rows are not the rows the review probed (the data changed since): put them "
                        "back, or sample and inspect again and record a new verdict")
            compared, differ = _compare(score, record, verdict, funcs, specs, names, samples, loaded)
    capped = f"; {uncovered(record)}" if (record.get("rows") or 0) > record.get("probed_rows", 0) else ""
    return f"probed {compared} training rows x {len(record['rewards'])} rewards{capped}", differ


def _targets(record: dict, verdict: dict, count: int) -> list[tuple[int, int]]:
    """(row j as the review probed it, its index in the data that trains): through the re-filters the verdict
    records (a dropped row no longer trains: not probed)."""
    targets = []
    for j in range(int(record.get("probed_rows") or 0)):
        k = row_after_refilters(j, verdict)
        if k is DROPPED:
            continue
        if not isinstance(k, int) or not 0 <= k < count:
            _stop(f"training row {j}, which the review probed, is not a row of the data that trains")
        targets.append((j, k))
    return targets


def _stop(line: str):
    raise Unreplayable(line)


def _compare(score: Score, record: dict, verdict: dict, funcs: list, specs: list[RewardSpec], names: list[str],
             samples: list[dict], dataset) -> tuple[int, list[str]]:
    plain = dataset.with_format(None)
    targets = _targets(record, verdict, len(plain))
    picked = list(plain.select([k for _, k in targets]))
    rows = [(j, row) for (j, _), row in zip(targets, picked)]
    by_id = {s.get("id"): s for s in samples}
    lines = []
    for name, entry in record["rewards"].items():
        pool = [by_id.get(i) for i in entry.get("pool") or []]
        if name not in names or not pool or None in pool:
            _stop(f"the row probes name the reward {name} or reviewed samples that are not the ones this process "
                    "trains with: inspect again and record a new verdict")
        r = names.index(name)
        try:
            now = _scores(score, funcs[r], specs[r], rows, pool)
        except UserInputError as exc:
            _stop(f"the review's row probes cannot be replayed: {exc}")
        stored = entry.get("scores") or []
        differ = [(j, stored[j] if j < len(stored) else "none recorded", v) for (j, _), v in zip(rows, now)
                  if j >= len(stored) or not same(stored[j], v)]
        if differ:
            j, then, v = differ[0]
            lines.append(f"the reward {name} scores {len(differ)} of the {len(rows)} training rows (each probed "
                         f"with a reviewed completion) differently than the review recorded (row {j}: reviewed "
                         f"{shown(then)}, now {shown(v)})")
    return len(rows), lines


DROPPED = object()


def data_updates(verdict: dict) -> list[dict]:
    """The re-filters the verdict records (resume_training's, inspection.refilter), in order."""
    updates = verdict.get("data_updates")
    return [u for u in updates if isinstance(u, dict)] if isinstance(updates, list) else []


def row_after_refilters(index, verdict: dict):
    """A row's index in the data that trains after the verdict's re-filters (each keeps `kept_rows`, indices into
    the data before it); DROPPED when one of them dropped the row."""
    for update in data_updates(verdict):
        kept = update.get("kept_rows")
        if not isinstance(kept, list):
            return None  # a record that says no rows: the sample is no row of the data (refused)
        if not isinstance(index, int):
            return index
        if index not in kept:
            return DROPPED
        index = kept.index(index)
    return index

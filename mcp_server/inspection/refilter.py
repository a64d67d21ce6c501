"""resume_training's `refilter` (issue 47): re-filter a run's data on resume from what its own logged completions show,
by the difficulty filter's rule (inspection/difficulty.py), and make the new data the verdict's data.

Where the completions are: with `log_completions: true`, TRL's GRPOTrainer.log writes, at every logging step, the
last generation batch it scored (its `_logs` deques, generation_batch_size rows gathered over every process) to
<output_dir>/completions/completions_<step>.parquet: `prompt` (the data set's prompt as the trainer read it),
`completion`, one column per reward function (named as TRL names it, trl.trainer.utils.get_callable_name) and
`advantage`. The deques are not cleared when logged, so a table equal to the one before (no generation since) is
counted once.

Each logged prompt is matched to the rows of the file train/config.yaml trains on (its prompt column, by content; a
prompt that is no row is left out and counted), its completions scored by the review's success rule (the run's
train/rewards.json and review.json's success_threshold, inspection.success), and the rule applied (difficulty.judge:
a prompt with at least min_samples logged completions all solved or none solved is dropped, keep_share keeps that
share). The pass rates judge the policy as it trained, not the base model.

What it writes: the kept rows to the next data/refilter-<n>/kept.jsonl and what went and why to record.json beside
it (the data an earlier launch trained on is never rewritten), train/config.yaml's datasets entry naming that file,
and in inspection/verdict.json the new data as the verdict's data: pins["data"] moves to it, and a `data_updates`
entry records the file, the rows kept (indices into the data before) and the rows' fingerprint as the trainer's
loader reads them (inspection.training_inputs), which the trainer's point-of-use check then expects
(inspection.trained): any other edit, to that file or another, is still refused. Refused with nothing written
(UserInputError('refilter')): no completions logged, logged rewards that are not the run's, prompts that are no row
of the data, a rule that would drop every prompt.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import tempfile
import time
from pathlib import Path

from mcp_server.config import trl_default
from mcp_server.dataset import read_file
from mcp_server.errors import UserInputError
from mcp_server.inspection import difficulty
from mcp_server.inspection.files import read_run_rewards
from mcp_server.inspection.models import DifficultyFilter
from mcp_server.inspection.pins import config_pins
from mcp_server.inspection.success import is_success
from mcp_server.inspection.training_inputs import load_training_inputs, prompt_column
from mcp_server.rewards import build_reward_funcs
from mcp_server.rewards.spec import RewardSpec
from mcp_server.runs import Run, read_json_if_present
from mcp_server.worker import runs_in_training
from mcp_server.workspace import atomic_write_json, atomic_write_text

FIELD = "refilter"
COMPLETIONS = "completions"  # TRL's folder under output_dir (GRPOTrainer.log with log_completions)
DATA_UPDATES = "data_updates"  # the verdict's list of re-filters (inspection.trained applies the last)


def logged_tables(run: Run, config: dict) -> list[tuple[str, list[dict]]]:
    """(file name, rows) of each completions table TRL logged for this run, in step order, a table equal to the
    one before left out (the same generation batch logged again)."""
    import pyarrow.parquet as pq

    folder = run.output_dir(config) / COMPLETIONS
    tables, before = [], None
    for path in sorted(folder.glob("completions_*.parquet")) if folder.is_dir() else []:
        rows = pq.read_table(path).to_pylist()
        content = [{k: v for k, v in row.items() if k != "step"} for row in rows]
        if rows and content != before:
            tables.append((path.name, rows))
        before = content
    return tables


def _canonical(value) -> str:
    """A prompt as text, keys sorted and None-valued keys left out (datasets fills a message's absent keys)."""
    def clean(v):
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items() if x is not None}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v
    return json.dumps(clean(value), sort_keys=True, default=str, ensure_ascii=False)


def pass_counts(run: Run, config: dict, rows: list[dict], source: Path) -> tuple[dict[int, list[int]], dict]:
    """{row index: [logged completions, successes]} and what was read (files, completions, unmatched)."""
    tables = logged_tables(run, config)
    logged = [row for _, table in tables for row in table]
    if not logged:
        raise UserInputError(FIELD, f"{run.name} logged no completions ({run.output_dir(config).name}/{COMPLETIONS}/ "
                             "holds no table: log_completions was off, or no step was logged): there is nothing to "
                             "recompute pass rates from; resume without refilter")
    specs = [RewardSpec.model_validate(s) for s in read_run_rewards(run)]
    from trl.trainer.utils import get_callable_name

    names = [get_callable_name(f) for f in build_reward_funcs(specs)]
    if len(set(names)) != len(names):
        raise UserInputError(FIELD, f"two rewards log under one name ({', '.join(names)}): the logged table cannot "
                             "say which score is which")
    missing = [n for n in names if n not in logged[0]]
    if missing:
        raise UserInputError(FIELD, f"the logged completions carry no score of {', '.join(missing)}: they were not "
                             "scored with this run's rewards (train/rewards.json)")
    threshold = (read_json_if_present(run.review) or {}).get("success_threshold")
    column = prompt_column(run)
    where: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        where.setdefault(_canonical(row.get(column)), []).append(i)
    scores = [[math.nan if row.get(n) is None else float(row[n]) for row in logged] for n in names]
    weights = [s.weight for s in specs]
    counts: dict[int, list[int]] = {}
    unmatched = 0
    for k, row in enumerate(logged):
        indices = where.get(_canonical(row.get("prompt")))
        if not indices:
            unmatched += 1
            continue
        parts = [w * column_[k] for w, column_ in zip(weights, scores) if not math.isnan(column_[k])]
        won = is_success(specs, scores, k, sum(parts) if parts else math.nan, threshold)
        for i in indices:  # a prompt the data holds twice: each of its rows has the same pass rate
            counts.setdefault(i, [0, 0])
            counts[i][0] += 1
            counts[i][1] += bool(won)
    if not counts:
        raise UserInputError(FIELD, f"none of the {len(logged)} logged prompts is a row of {source.name}: the "
                             "completions were logged from other data")
    return counts, {"logged_files": [name for name, _ in tables], "logged_completions": len(logged),
                    "unmatched_completions": unmatched}


@runs_in_training  # reads parquet and fingerprints the rows as the trainer loads them (pyarrow, datasets)
def refilter_run(run_dir: str, rule: dict) -> dict:
    """Re-filter the run's data from its logged completions (module doc). Returns {"result": the
    DifficultyFilterResult, "folder": the data/refilter-<n>/ it wrote (relative to the run; None when the rule
    drops nothing, and nothing is written), what it read}. Raises UserInputError(FIELD) with nothing written."""
    run = Run(Path(run_dir))
    chosen = DifficultyFilter.model_validate(rule)
    config = run.read_config()
    source, entry = difficulty.source_of(run, config)
    rows = read_file(source)
    counts, read = pass_counts(run, config, rows, source)
    slot = run.archive_slot("refilter", run.data)  # a new folder each time (Run's layout)
    data_path, record_path = slot / "kept.jsonl", slot / "record.json"
    seed = config.get("seed", trl_default("seed"))
    result, kept, rates = difficulty.judge(run, chosen, counts, rows, source, data_path, seed, FIELD)
    if not result.dropped:
        return {"result": result.model_dump(mode="json"), "folder": None, **read}
    gone = set(rates)
    kept_rows = [i for i in range(len(rows)) if i not in gone]
    saved = {path: path.read_bytes() for path in (run.config, run.verdict) if path.is_file()}
    try:
        written = difficulty.write(run, config, entry, result, kept, rates, data_path, record_path,
                                   "the re-filter's prompts", "that the run's own logged completions show always "
                                   "({always}) or never ({never}) solved (resume_training's refilter",
                                   {"kept_rows": kept_rows, "by": "resume_training", **read})
        new_config = {**config, "datasets": [{**entry, "path": "json", "data_files": result.data_file}]}
        _move_verdict(run, {"config": new_config, data_path: written}, record_path, kept_rows)
    except BaseException:
        for path, data in saved.items():
            atomic_write_text(path, data.decode("utf-8"))
        shutil.rmtree(slot, ignore_errors=True)
        raise
    return {"result": result.model_dump(mode="json"), "folder": str(slot.relative_to(run.dir)), **read}


def _move_verdict(run: Run, held: dict, record_path: Path, kept_rows: list[int]) -> None:
    """The verdict's data becomes the re-filtered file: its data pin, and a data_updates entry with the rows'
    fingerprint as the trainer's loader reads them (what inspection.trained expects). Both are of what the
    re-filter wrote as it holds it (`held`: the config's mapping and {kept.jsonl: its bytes}), never of the files
    read back (round 18, b03: a kept.jsonl replaced in between was pinned and trained): a file that no longer
    holds those bytes is refused by the gate and the trainer, naming it."""
    verdict = read_json_if_present(run.verdict)
    if not isinstance(verdict, dict) or not isinstance(verdict.get("pins"), dict):
        raise UserInputError(FIELD, f"{run.verdict} is not a verdict: the re-filtered data needs one to move")
    (data_path, data), = [(k, v) for k, v in held.items() if k != "config"]
    with tempfile.TemporaryDirectory(prefix="refilter-") as cache:
        printed = load_training_inputs(run, cache, held=held)["fingerprint"]
    verdict["pins"]["data"] = _as_written(config_pins(run, held["config"])["data"], run.inside(data_path).resolve()
                                          .relative_to(run.dir.resolve()).as_posix(), hashlib.sha256(data).hexdigest())
    updates = verdict.get(DATA_UPDATES) if isinstance(verdict.get(DATA_UPDATES), list) else []
    verdict[DATA_UPDATES] = updates + [{
        "by": "resume_training", "time": time.time(), "file": str(data_path.relative_to(run.dir)),
        "record": str(record_path.relative_to(run.dir)), "kept_rows": kept_rows,
        "rows": printed["rows"], "rows_sha256": printed["rows_sha256"]}]
    atomic_write_json(run.verdict, verdict)


def _as_written(pins, source: str, digest: str):
    """The data pins with `source`'s (its path in the run) pinned as `digest`, the bytes the re-filter wrote, not
    as the file was when hashed; refused when no pin names it."""
    found = []

    def fix(node):
        if isinstance(node, dict) and node.get("source") == source and "sha256" in node:
            found.append(node)
            return {**node, "sha256": digest}
        if isinstance(node, dict):
            return {k: fix(v) for k, v in node.items()}
        return [fix(v) for v in node] if isinstance(node, list) else node

    pinned = fix(pins)
    if not found:
        raise UserInputError(FIELD, f"train/config.yaml's data pins do not name {source}: nothing recorded")
    return pinned

"""inspect_rewards' difficulty filter (issue 47): before training, drop from the run's data the prompts the inspection
samples show the model always or never solves, since GRPO learns nothing from their groups.

The rule (`rule_text`): a prompt is judged from its sampled completions (inspection/samples.jsonl, drawn by
sample_completions with the run's own model, data and sampling settings; `whole_dataset` samples every prompt) when
it has at least `min_samples` of them. Its pass rate is the share that succeed by the review's success rule
(inspection.success, the rule review.md states). A judged prompt with pass rate 1 (always solved: too easy) or 0
(never solved: too hard) is dropped: every completion of its group succeeds alike, and where the success rule is
the reward that decides the total, its group has one reward value, advantage 0, and is the frac_reward_zero_std
share TRL trains on for nothing. `keep_share` keeps that share of each kind (chosen by the sampling seed):
down-weighting instead of dropping (the prompt stays at that share of its weight in the data). A prompt never
sampled, or sampled fewer than `min_samples` times, is kept: nothing says it cannot teach.

The filter judges the base model. A never-solved prompt may become solvable while training (DAPO's dynamic
sampling, recipe/dynamic_sampling_trainer.py, judges every batch on the current policy instead, at the cost of
extra generation); `keep_share` keeps some of them for that.

Where it goes: the kept rows, exactly as the source file holds them (every column, in order), to
data/filtered.jsonl; train/config.yaml's `datasets` entry then names that file (a comment above it says why), so
the verdict's data pin (its content, inspection.pins) and the trainer's point-of-use check (the rows it loads,
inspection.trained) cover it like any data file: editing it after the verdict closes the gate and makes the trainer
refuse. data/difficulty-filter.json records the rule and what went. The samples were drawn from the unfiltered data,
so record_inspection_verdict refuses them (train/config.yaml's data changed since they were drawn): sample again,
inspect again, then record the verdict; the later reviews show the filter (`standing`).

Refused, naming the field difficulty_filter, with nothing written: a launched run (its data is a record: emit a new
run), samples that differ from what training would sample, data that is not one local JSON Lines or JSON file (a hub
data set, a directory, a mixture), samples that are not rows of that file, and a filter that would keep no prompt.
"""

from __future__ import annotations

import json
import random
import re
import textwrap
from pathlib import Path

import yaml

from mcp_server.dataset import read_file
from mcp_server.emission.emit import config_body, stamp_config
from mcp_server.errors import UserInputError
from mcp_server.inspection.models import DifficultyFilter, DifficultyFilterResult, InspectResult
from mcp_server.runs import Run
from mcp_server.userfiles import parse_yaml, read_json
from mcp_server.workspace import (atomic_write_json, atomic_write_text, json_with, refuse_foreign, sha256_file,
                                  written_digest)

FIELD = "difficulty_filter"
SUFFIXES = (".jsonl", ".json")  # read as `datasets` reads them, written back as JSON Lines unchanged
# train/config.yaml's data block, with the comment an earlier filter (or re-filter) wrote above it
BLOCK = re.compile(r"^(?:# the (?:difficulty filter|re-filter)'s prompts.*\n(?:#   .*\n)*)?"
                   r"datasets:\n(?:(?:- |  ).*\n)*", re.MULTILINE)


def rule_text(rule: DifficultyFilter) -> str:
    share = (f"; {rule.keep_share:.0%} of each kind is kept instead (down-weighted)" if rule.keep_share else "")
    return (f"a prompt with at least {rule.min_samples} sampled completions whose pass rate (by the review's success "
            f"rule) is 1 (always solved) or 0 (never solved) is dropped: its group has no success spread and, where "
            f"that rule decides the reward, advantage 0{share}; prompts with fewer samples are kept")


def filter_or_standing(run: Run, rule: DifficultyFilter | None, samples: list[dict], success: list[bool],
                       meta: dict) -> DifficultyFilterResult | None:
    """The filter applied now (`rule` given), else the one the run's data went through before, else None."""
    return apply(run, rule, samples, success, meta) if rule is not None else standing(run)


def standing(run: Run) -> DifficultyFilterResult | None:
    """The filter train/config.yaml trains on the output of (its record matches data/filtered.jsonl), else None."""
    if not run.difficulty_filter.is_file() or not run.filtered_data.is_file():
        return None
    record = read_json(run.difficulty_filter, "run", dict)
    entry = _data_entry(run.read_config())
    if entry is None or entry.get("data_files") != _relative(run, run.filtered_data) or \
            record.get("data_sha256") != sha256_file(run.filtered_data):
        return None
    return DifficultyFilterResult.model_validate({**record["result"], "applied_now": False})


def with_next_step(result: InspectResult) -> InspectResult:
    """A review whose call just filtered the data: the next step is to sample again."""
    applied = result.difficulty_filter
    if applied is None or not applied.applied_now:
        return result
    if not applied.dropped:
        note = f"difficulty filter: no prompt dropped ({applied.judged} judged; the data is unchanged)"
        return result.model_copy(update={"warnings": [*result.warnings, note]})
    note = (f"difficulty filter: {applied.dropped} of {applied.rows_before} prompts dropped ({applied.always_solved} "
            f"always and {applied.never_solved} never solved, {applied.kept_by_share} of them kept by keep_share); "
            f"train/config.yaml now trains on {applied.data_file}. These samples were drawn from the unfiltered data "
            "and cannot back a verdict.")
    step = ("Run sample_completions on the run again (it draws from the filtered data), then inspect_rewards, read "
            "review.md and record the verdict: it pins the filtered data like any input.")
    return result.model_copy(update={"warnings": [*result.warnings, note], "next_step": step})


def apply(run: Run, rule: DifficultyFilter, samples: list[dict], success: list[bool],
          meta: dict) -> DifficultyFilterResult:
    """Judge every sampled prompt and write the filtered data and config (module doc); nothing is written when it
    drops no prompt."""
    launched = run.launched_evidence()
    if launched:
        raise UserInputError(FIELD, f"{run.dir} was launched ({', '.join(launched)}): its data is a record now; emit a "
                             "new run on the data and filter that one")
    if meta.get("differs_from_config") or not meta:
        raise UserInputError(FIELD, "these samples differ from what training would sample ("
                             + "; ".join(meta.get("differs_from_config") or ["samples.meta.json is missing"])
                             + "): pass rates must come from the run's own model, data and settings; sample again")
    config = run.read_config()
    source, entry = source_of(run, config)
    rows = read_file(source)
    _check_samples_are_rows(samples, rows, meta, source)
    counts: dict[int, list[int]] = {}
    for sample, won in zip(samples, success):
        counts.setdefault(sample["row_index"], [0, 0])
        counts[sample["row_index"]][0] += 1
        counts[sample["row_index"]][1] += bool(won)
    result, kept, rates = judge(run, rule, counts, rows, source, run.filtered_data,
                                (meta.get("generation") or {}).get("seed", 0), FIELD)
    if result.dropped:
        write(run, config, entry, result, kept, rates, run.filtered_data, run.difficulty_filter,
              "the difficulty filter's prompts", "that the base model always ({always}) or never ({never}) solved in "
              "its samples (inspect_rewards' difficulty_filter")
    return result


def judge(run: Run, rule: DifficultyFilter, counts: dict[int, list[int]], rows: list[dict], source: Path,
          target: Path, seed, field: str) -> tuple[DifficultyFilterResult, list[dict], dict[int, tuple[int, int]]]:
    """The rule (rule_text) applied to each row's (completions, successes): (the result, the kept rows, the dropped
    rows' counts). UserInputError(`field`) when it would keep no prompt. Shared by the filter before training and
    resume_training's re-filter from the run's logged completions (inspection.refilter)."""
    judged = {i: (n, s) for i, (n, s) in counts.items() if n >= rule.min_samples}
    always = sorted(i for i, (n, s) in judged.items() if s == n)
    never = sorted(i for i, (n, s) in judged.items() if s == 0)
    chooser = random.Random(f"difficulty-filter:{seed}")
    kept_by_share = {i for kind in (always, never) for i in chooser.sample(kind, round(rule.keep_share * len(kind)))}
    dropped = [i for i in always + never if i not in kept_by_share]
    gone = set(dropped)
    kept = [row for i, row in enumerate(rows) if i not in gone]
    if not kept:
        raise UserInputError(field, f"would drop every prompt of {source.name} ({len(always)} always and "
                             f"{len(never)} never solved): the task does not fit the model; raise keep_share, or "
                             "change the data or the model")
    result = DifficultyFilterResult(
        rule=rule_text(rule), applied_now=True, source=_relative(run, source),
        data_file=_relative(run, target if dropped else source), rows_before=len(rows), rows_after=len(kept),
        judged=len(judged), always_solved=len(always), never_solved=len(never), dropped=len(dropped),
        kept_by_share=len(kept_by_share), unjudged=len(rows) - len(judged))
    return result, kept, {i: judged[i] for i in sorted(gone)}


def _data_entry(config: dict) -> dict | None:
    """The config's one `datasets` entry naming one data file, else None."""
    entries = config.get("datasets")
    if config.get("dataset_name") or not isinstance(entries, list) or len(entries) != 1:
        return None
    entry = entries[0]
    return entry if isinstance(entry, dict) and isinstance(entry.get("data_files"), str) else None


def source_of(run: Run, config: dict) -> tuple[Path, dict]:
    entry = _data_entry(config)
    if entry is None:
        raise UserInputError(FIELD, "needs the run's data as one local file (train/config.yaml: datasets: [{path: "
                             "json, data_files: FILE}]); this run trains on "
                             f"{config.get('dataset_name') or config.get('datasets')!r}")
    path = Path(entry["data_files"]).expanduser()
    path = path if path.is_absolute() else run.dir / path
    if path.suffix.lower() not in SUFFIXES or not path.is_file():
        raise UserInputError(FIELD, f"{entry['data_files']}: the filter rewrites a local {' or '.join(SUFFIXES)} file "
                             "row for row; convert the data to JSON Lines and emit again")
    return path, entry


def _check_samples_are_rows(samples: list[dict], rows: list[dict], meta: dict, source: Path) -> None:
    """Each sample's row_index must be its row of `source` (the file sampling read through the trainer's loader)."""
    if meta.get("dataset_rows") != len(rows):
        raise UserInputError(FIELD, f"the samples were drawn from {meta.get('dataset_rows')} rows, {source} holds "
                             f"{len(rows)}: sample again")
    for sample in samples:
        index = sample.get("row_index")
        row = rows[index] if isinstance(index, int) and 0 <= index < len(rows) else None
        columns = sample.get("columns") or {}
        if row is None or any(_canonical(row.get(k)) != _canonical(v) for k, v in columns.items()):
            raise UserInputError(FIELD, f"sample {sample.get('id')} is not row {index} of {source}: sample again")


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)


def _relative(run: Run, path: Path) -> str:
    resolved = path.resolve()
    return str(resolved.relative_to(run.dir.resolve())) if resolved.is_relative_to(run.dir.resolve()) else str(path)


def write(run: Run, config: dict, entry: dict, result: DifficultyFilterResult, kept: list[dict],
          rates: dict[int, tuple[int, int]], data_path: Path, record_path: Path, what: str, why: str,
          more: dict | None = None) -> bytes:
    """`data_path` (the kept rows), `record_path` (what went and why, with `more`) and train/config.yaml naming the
    filtered file under a comment (`what`, `why` with {always} and {never}); the config's new text is checked to
    parse to the old config with only its data entry changed before anything is written. Returns the bytes written
    to `data_path`: the record holds their sha256 as written, never the file read back (round 18, b03)."""
    text = run.config.read_text(encoding="utf-8")
    new_entry = {**entry, "path": "json", "data_files": result.data_file}
    comment = (f"{what}: {result.rows_after} of the {result.rows_before} prompts of {result.source} kept, "
               f"{result.dropped} dropped " + why.format(always=result.always_solved, never=result.never_solved)
               + f"; {_relative(run, record_path)} says which)")
    block = "".join(f"#{'   ' if n else ' '}{line}\n" for n, line in enumerate(textwrap.wrap(comment, 112)))
    block += yaml.safe_dump({"datasets": [new_entry]}, default_flow_style=False, sort_keys=False)
    found = BLOCK.findall(text)
    if len(found) != 1:
        raise UserInputError(FIELD, f"{run.config} does not hold one `datasets:` block as emission writes it: emit "
                             "again, then filter")
    body = config_body(text)  # as emission wrote it: stamped again, so a later emission may still replace it
    new_text = BLOCK.sub(lambda _: block, text if body is None else body, count=1)
    new_text = new_text if body is None else stamp_config(new_text)
    if parse_yaml(new_text, run.config, FIELD) != {**config, "datasets": [new_entry]}:
        raise UserInputError(FIELD, f"{run.config}: rewriting its data block would change other values: emit again")
    record_ours = json_with("result", "data_sha256", "dropped")
    refuse_foreign(FIELD, {data_path: lambda path: record_ours(record_path) and read_json(
        record_path, FIELD, dict).get("data_sha256") == sha256_file(path), record_path: record_ours},
        "inspect_rewards' difficulty filter")
    source = Path(result.source)
    source_sha256 = sha256_file(source if source.is_absolute() else run.dir / source)  # before a re-filter rewrites it
    data = run.inside(data_path)
    written = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in kept).encode("utf-8")
    record = {"result": result.model_dump(mode="json"), "data_sha256": written_digest(data, written),
              "source_sha256": source_sha256,
              "dropped": [{"row": i, "samples": n, "solved": s} for i, (n, s) in rates.items()], **(more or {})}
    atomic_write_json(run.inside(record_path), record)
    atomic_write_text(run.config, new_text)
    return written

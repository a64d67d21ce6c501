"""Where sample_completions writes and what each line holds: the run's inspection/samples.jsonl, or on a launched run
a fresh inspection/explore-<n>/ (issue 49: sampling a launched run deleted the review behind its launch); each
finished generate call appended to samples.partial.jsonl, and what a stopped sampling kept, in one line.

A stopped sampling's batches are reused (issue 49: the same request after Ctrl-C started again from prompts 1-2
and took 653 s): samples.partial.meta.json, beside the partial file, records what decides the completions (the
model and its files, the prompts as rendered, every sampling setting, the seed, the batching, the threads) and,
after each batch, how many lines it holds and torch's generator state for the next batch. The same request
continues from the last whole batch, so the file it ends with is an uninterrupted pass's; any other starts over
and says which settings differ (never mixes two requests in one file). The record is signed as samples.meta.json is,
with each batch's lines' sha256: kept lines edited by hand, or a record not the sampler's, start over (otherwise the
edited completions would be signed with the rest when the pass finished).

The sampler signs what it wrote (issue 48, round 12 F2: every completion of samples.jsonl rewritten correct and the
file's sha256 put into samples.meta.json made the review show 100% base success and the gate open):
samples.meta.json carries samples.jsonl's sha256 and the evidence key's mac over the whole record (evidence.py;
write_samples_meta), and inspect_rewards, record_inspection_verdict and the gate refuse samples it does not vouch
for (not_sampled), naming the file. It is not signed under the run's path, as a verdict survives a moved run:
samples copied with their record from another run are completions a model wrote, and a verdict still needs them
drawn from this run's config (the record's config_pins).
"""

from __future__ import annotations

import errno
import hashlib
import json
import re
from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server.evidence import SAMPLES_SIGNED_AS, SAMPLES_SIGNED_BY, samples_not_vouched, sign, unrecorded, valid
from mcp_server.generation import rng_state
from mcp_server.inspection.sampling_plan import Progress
from mcp_server.runs import Run
from mcp_server.userfiles import NotRegularFile, open_regular, read_json_if_present
from mcp_server.workspace import atomic_write_json, open_append_nofollow, written_digest

PARTIAL_META = "samples.partial.meta.json"
# The sampler's record is signed for what it is, not under the run's path: a moved run keeps its samples
SIGNED_BY, SIGNED_AS = SAMPLES_SIGNED_BY, SAMPLES_SIGNED_AS


def kept_note(run: Run) -> str:
    """What a stopped sampling kept, in one line: the newest samples.partial.jsonl of the run and its count."""
    partials = sorted(run.inspection.glob("**/samples.partial.jsonl"), key=lambda p: p.stat().st_mtime)
    lines = len([x for x in partials[-1].read_text(encoding="utf-8").split("\n") if x.strip()]) if partials else 0
    if not lines:
        return "sampling stopped (Ctrl-C) before any completion was written; nothing was kept"
    return (f"sampling stopped (Ctrl-C): {lines} completions kept in {partials[-1]}; samples.jsonl was not "
            "written (the same command again continues from them)")


def outputs(run: Run, launched: list[str]) -> dict[str, Path]:
    """Where this sampling writes: the run's inspection/ files, or on a launched run a fresh explore-<n>/."""
    if not launched:
        return {"samples": run.samples, "partial": run.samples_partial, "meta": run.samples_meta}
    slot = run.exploration_slot()
    return {"samples": slot / "samples.jsonl", "partial": slot / "samples.partial.jsonl",
            "meta": slot / "samples.meta.json"}


def write_samples_meta(run: Run, meta_path: Path, samples_sha256: str, meta: dict) -> dict:
    """samples.meta.json as the sampler writes it (sample_completions, sample_trajectories; a test that builds
    samples by hand signs them through here, as the sampler would): `meta` with `samples_sha256`, the digest of the
    bytes the sampler wrote as it held them in memory (workspace.written_digest), never of the file read back
    (round 18, b08: a racer's samples.jsonl put there between the write and the hash was signed), signed for its
    place in the run (the key is made when there is none). Returns the record."""
    if not (isinstance(samples_sha256, str) and re.fullmatch(r"[0-9a-f]{64}", samples_sha256)):
        raise TypeError(f"samples_sha256 is a sha256 hex digest of the bytes written, not {samples_sha256!r}")
    record = sign(SIGNED_BY, SIGNED_AS, {**meta, "samples_sha256": samples_sha256}, create=True)
    atomic_write_json(run.inside(meta_path), record)
    return record


def not_sampled(run: Run, data: bytes | None = None) -> str | None:
    """Why the run's inspection/samples.jsonl is not what the sampler wrote (None when its signed samples.meta.json
    vouches for it): evidence.samples_not_vouched of `data`, the bytes the caller read and uses, else the file as
    it is."""
    if data is None:
        try:
            data = run.samples.read_bytes() if run.samples.is_file() else None
        except OSError:
            data = None
    return samples_not_vouched(run, data)


def refuse_unsampled(run: Run, data: bytes | None = None) -> None:
    """UserInputError('run') naming why, when the run's samples.jsonl (`data`: the bytes the caller read) is not
    what the sampler wrote (not_sampled)."""
    if forged := not_sampled(run, data):
        raise UserInputError("run", forged)


def explored_note(run: Run, path: Path, launched: list[str]) -> str:
    return (f"The run was launched ({', '.join(launched)}), so these exploratory samples are in "
            f"{path.relative_to(run.dir)}: inspection/samples.jsonl, review.md, review.json and the verdict, the "
            "evidence behind the launch, are untouched. Read them there; to review a new policy's samples for a "
            "verdict, emit a new run from the checkpoint.")


def partial_meta(partial: Path) -> Path:
    return partial.with_name(PARTIAL_META)


def sampled_request(used: dict, settings: dict, texts: list[str], row_indices: list[int], engine: str,
                    batch_size: int, threads: int) -> dict:
    """What decides the completions of a pass, as samples.partial.meta.json records it: the model and its files
    (`used`: the pins samples.meta.json records), the prompts as the model reads them, every sampling setting and
    the seed, the prompts per generate call and the threads (CPU numerics follow them)."""
    prompts = hashlib.sha256(json.dumps([row_indices, texts], ensure_ascii=False).encode()).hexdigest()
    keep = {k: v for k, v in settings.items() if k not in ("dataset", "dataset_config", "dataset_split")}
    return json.loads(json.dumps({**keep, **used, "prompts_sha256": prompts, "engine": engine,
                                  "prompts_per_call": max(1, batch_size // settings["n"]), "threads": threads},
                                 sort_keys=True, default=str))


def kept_batches(partial: Path, request: dict, n: int) -> tuple[tuple[list[list[dict]], dict] | None, str]:
    """(the groups of a stopped pass of `request` up to its last whole batch and the generator's state after it,
    what is reused in words), or (None, why it starts over); (None, "") when nothing was kept. A torn last line,
    and a batch appended but not recorded, are dropped."""
    if not partial.is_file():
        return None, ""
    meta = read_json_if_present(partial_meta(partial))
    if not isinstance(meta, dict) or not isinstance(meta.get("request"), dict):
        return None, (f"{partial.name} has no record of the request that sampled it ({PARTIAL_META}): starting "
                      "over")
    if not valid(SIGNED_BY, PARTIAL_META, meta):  # round 12's open item: kept lines edited were signed with the rest
        return None, f"{PARTIAL_META} is {unrecorded(PARTIAL_META)}: starting over, nothing of {partial.name} reused"
    if meta["request"] != request:
        differs = sorted(k for k in set(request) | set(meta["request"]) if request.get(k) != meta["request"].get(k))
        return None, (f"{partial.name} was kept from a stopped run of another request ({', '.join(differs)} "
                      "differ): starting over, nothing of it reused")
    records = []
    for raw in partial.read_bytes().split(b"\n")[:-1]:  # the last piece: empty, or a line torn by the stop
        try:
            records.append(json.loads(raw))
        except ValueError:
            break
    batch = next((b for b in reversed(meta.get("batches") or []) if b["lines"] <= len(records)), None)
    if batch is None:
        return None, f"{partial.name} holds no whole batch: starting over"
    if _lines_sha256(partial, batch["lines"]) != batch.get("sha256"):
        return None, (f"{partial.name}'s kept lines are not the ones the sampler wrote (their sha256 is not the one "
                      f"it signed in {PARTIAL_META}): starting over, nothing of it reused")
    groups: list[list[dict]] = [[] for _ in range(batch["prompts"])]
    for record in records[: batch["lines"]]:
        completion = record["completion"]
        groups[record["prompt_index"]].append({
            "text": completion if isinstance(completion, str) else completion[0]["content"],
            "ids": record["completion_ids"], "finish_reason": record["finish_reason"]})
    if any(len(g) != n for g in groups):
        return None, f"{partial.name}'s kept batches are not whole groups of {n}: starting over"
    return (groups, batch["rng"]), (f"reusing {batch['lines']} completions of prompts 1-{batch['prompts']} kept "
                                    "from a stopped run of the same request")


def continued(partial: Path, request: dict, n: int, engine: str, report, total: int):
    """kept_batches for the transformers engine (vLLM samples in one call: nothing to continue), what it decided
    reported: the same request continues a stopped pass, another one says why it starts over."""
    kept, note = kept_batches(partial, request, n) if engine != "vllm" else (None, "")
    if note:
        report(len(kept[0]) if kept else 0, total, note)
    return kept


def finished(partial: Path) -> None:
    """samples.jsonl is written: the partial file and its record go."""
    partial.unlink(missing_ok=True)
    partial_meta(partial).unlink(missing_ok=True)


def keeper(partial: Path, progress: Progress, rows: list[dict], row_indices: list[int], prompts: list,
           prompt_column: str, conversational: bool, request: dict | None = None, kept: tuple | None = None):
    """on_batch for generate_completions: each finished call's samples appended to samples.partial.jsonl (a
    stopped run keeps them) and recorded with `request` and the generator's state in samples.partial.meta.json,
    then its progress line. `kept`: kept_batches' groups and state (the file is cut to those groups)."""
    partial.parent.mkdir(parents=True, exist_ok=True)
    batches, written = [], hashlib.sha256()  # the lines' sha256 as written, never the file read back (round 18)
    if kept:
        kept = kept[0]
        batches = [b for b in (read_json_if_present(partial_meta(partial)) or {}).get("batches", [])
                   if b["prompts"] <= len(kept)]
        lines = sample_records(rows, row_indices[: len(kept)], prompts[: len(kept)], kept, prompt_column,
                               conversational)
        written_digest(partial, "\n".join(lines) + "\n")
        batches = [{**b, "sha256": _digest_of(lines[: b["lines"]])} for b in batches]
        written.update(("\n".join(lines) + "\n").encode("utf-8"))  # the appends continue the file
    else:
        partial.unlink(missing_ok=True)
        partial_meta(partial).unlink(missing_ok=True)

    def keep(start: int, new_groups: list[list[dict]]) -> None:
        end = start + len(new_groups)
        lines = sample_records(rows, row_indices[start:end], prompts[start:end], new_groups, prompt_column,
                                conversational, first=start)
        data = ("\n".join(lines) + "\n").encode("utf-8")
        try:  # never through a link put there, nor into a pipe or a second name of a file (issue 48 round 9)
            with open_append_nofollow(partial) as f:
                f.write(data)
        except OSError as exc:
            why = ("it is a symbolic link" if exc.errno == errno.ELOOP else
                   exc.strerror if isinstance(exc, NotRegularFile) else str(exc))
            raise UserInputError("run", f"{partial.name} in {partial.parent} is not this sampling's own file: "
                                 f"{why}; nothing was written "
                                 "through it and sampling stopped. Remove it and sample again") from None
        if request is not None:
            count = (batches[-1]["lines"] if batches else 0) + len(lines)
            written.update(data)
            batches.append({"prompts": end, "lines": count, "rng": rng_state(), "sha256": written.hexdigest()})
            atomic_write_json(partial_meta(partial), sign(SIGNED_BY, PARTIAL_META, {"request": request,
                                                                                    "batches": batches}, create=True))
        progress.batch(end)

    return keep


def _digest_of(lines: list[str]) -> str:
    """sha256 of `lines` as written (each with its newline): what _lines_sha256 reads back from a file holding them."""
    return hashlib.sha256("".join(f"{line}\n" for line in lines).encode("utf-8")).hexdigest()


def _lines_sha256(path: Path, lines: int) -> str:
    """sha256 of the first `lines` lines of `path` (their newlines included): what a kept batch's record vouches
    for, the lines a later pass would reuse."""
    digest, count = hashlib.sha256(), 0
    with open_regular(path) as handle:
        for line in handle:
            if count == lines or not line.endswith(b"\n"):
                break
            digest.update(line)
            count += 1
    return digest.hexdigest() if count == lines else ""


def sample_records(rows: list[dict], row_indices: list[int], prompts: list, groups: list[list[dict]],
                    prompt_column: str, conversational: bool, first: int = 0) -> list[str]:
    """samples.jsonl's lines (without their newlines): each completion with its prompt and the row's other
    columns, as TRL hands them to reward functions. `first`: the index of the first prompt (a partial write)."""
    lines, sample_id = [], first * (len(groups[0]) if groups else 0)  # every prompt has n completions
    for p, (row_index, prompt, group) in enumerate(zip(row_indices, prompts, groups), start=first):
        columns = {key: value for key, value in rows[row_index].items() if key != prompt_column}
        for s, gen in enumerate(group):
            # The completion is stored exactly as TRL hands it to reward functions.
            completion = [{"role": "assistant", "content": gen["text"]}] if conversational else gen["text"]
            record = {
                "id": sample_id,
                "prompt_index": p,
                "sample_index": s,
                "row_index": row_index,
                "prompt": prompt,
                "completion": completion,
                "completion_ids": gen["ids"],
                "columns": columns,
                "truncated": gen["finish_reason"] == "length",
                "finish_reason": gen["finish_reason"],
            }
            lines.append(json.dumps(record, ensure_ascii=False, default=str))
            sample_id += 1
    return lines

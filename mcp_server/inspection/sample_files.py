"""Where sample_completions writes and what each line holds: the run's inspection/samples.jsonl, or on a launched run
a fresh inspection/explore-<n>/ (issue 49: sampling a launched run deleted the review behind its launch); each
finished generate call appended to samples.partial.jsonl, and what a stopped sampling kept, in one line."""

from __future__ import annotations

import errno
import json
from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server.inspection.sampling_plan import Progress
from mcp_server.runs import Run
from mcp_server.userfiles import NotRegularFile
from mcp_server.workspace import open_append_nofollow


def kept_note(run: Run) -> str:
    """What a stopped sampling kept, in one line: the newest samples.partial.jsonl of the run and its count."""
    partials = sorted(run.inspection.glob("**/samples.partial.jsonl"), key=lambda p: p.stat().st_mtime)
    lines = len([x for x in partials[-1].read_text(encoding="utf-8").split("\n") if x.strip()]) if partials else 0
    if not lines:
        return "sampling stopped (Ctrl-C) before any completion was written; nothing was kept"
    return (f"sampling stopped (Ctrl-C): {lines} completions kept in {partials[-1]}; samples.jsonl was not "
            "written (sample again for a review)")


def outputs(run: Run, launched: list[str]) -> dict[str, Path]:
    """Where this sampling writes: the run's inspection/ files, or on a launched run a fresh explore-<n>/."""
    if not launched:
        return {"samples": run.samples, "partial": run.samples_partial, "meta": run.samples_meta}
    slot = run.exploration_slot()
    return {"samples": slot / "samples.jsonl", "partial": slot / "samples.partial.jsonl",
            "meta": slot / "samples.meta.json"}


def explored_note(run: Run, path: Path, launched: list[str]) -> str:
    return (f"The run was launched ({', '.join(launched)}), so these exploratory samples are in "
            f"{path.relative_to(run.dir)}: inspection/samples.jsonl, review.md, review.json and the verdict, the "
            "evidence behind the launch, are untouched. Read them there; to review a new policy's samples for a "
            "verdict, emit a new run from the checkpoint.")


def keeper(partial: Path, progress: Progress, rows: list[dict], row_indices: list[int], prompts: list,
            prompt_column: str, conversational: bool):
    """on_batch for generate_completions: each finished call's samples appended to samples.partial.jsonl (a
    stopped run keeps them), then its progress line."""
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.unlink(missing_ok=True)

    def keep(start: int, new_groups: list[list[dict]]) -> None:
        end = start + len(new_groups)
        lines = sample_records(rows, row_indices[start:end], prompts[start:end], new_groups, prompt_column,
                                conversational, first=start)
        try:  # never through a link put there, nor into a pipe or a second name of a file (issue 48 round 9)
            with open_append_nofollow(partial) as f:
                f.write(("\n".join(lines) + "\n").encode("utf-8"))
        except OSError as exc:
            why = ("it is a symbolic link" if exc.errno == errno.ELOOP else
                   exc.strerror if isinstance(exc, NotRegularFile) else str(exc))
            raise UserInputError("run", f"{partial.name} in {partial.parent} is not this sampling's own file: "
                                 f"{why}; nothing was written "
                                 "through it and sampling stopped. Remove it and sample again") from None
        progress.batch(end)

    return keep


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

"""A JSON-lines metrics log read in bounded memory and time (train/logs/progress.jsonl, or any metrics .jsonl), and
a run's own progress log as its trainer signed it.

read_progress_records is the one reader of whole progress logs; run_progress is the one reader of a RUN's own
train/logs/progress.jsonl (training_status, diagnose_run, the stop wait, list_runs' step, the demo's plot): only the
lines the trainer signed with the key outside the workspace (evidence.py) are read, the others dropped and counted
(issue 48, round 9: a signed line's values edited and an unsigned line appended made training_status show reward 99
and kl 777, and diagnose_run raise kl_explosion with patches). A log a person passes by path that is no run's own
(a trainer_state.json, an export, a progress.jsonl copied out of its run) is unsigned by nature and read whole.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server.evidence import key, key_problem, run_lines_verifier, emitted_since_launch
from mcp_server.runs import Run
from mcp_server.userfiles import BLANK, data_after, last_lines, open_regular

PROGRESS_EXACT_BYTES = 8 << 20  # a log up to this size is read whole, every line parsed
PROGRESS_SAMPLE = 2000  # a longer log: lines parsed at evenly spaced offsets over the whole file
PROGRESS_TAIL = 500  # ... plus the latest lines, every one: status, speed and ETA read the end
PROGRESS_NONFINITE = 500  # ... plus the lines holding NaN/Infinity: a divergence is a finding wherever it is
PROGRESS_LINE_LIMIT = 1 << 20  # a longer line is no progress line: skipped (and counted)
PROGRESS_SAMPLE_READ = 64 << 10  # a sampled line longer than this is left to the NaN pass and the tail
PROGRESS_TAIL_BYTES = 16 << 20  # the most the tail read takes from before the log's last content
_CHUNK = 8 << 20
_last_read: tuple[tuple, "ProgressRecords"] | None = None  # the last log read, by path, size and mtime


@dataclass
class ProgressRecords:
    """What read_progress_records kept of a JSON-lines log, in file order."""

    records: list[dict]  # JSON objects, in file order
    lines: int  # lines in the file
    sampled: bool  # True when lines were left out (a long log): `records` is a sample
    bad: list[str] = field(default_factory=list)  # where a line read is not a JSON object ("line 3"; first 20)
    last_line_bad: bool = False  # the last line is not JSON: half-written by a live run
    skipped: int = 0  # lines over PROGRESS_LINE_LIMIT and NUL runs (a sparse hole) read past: no progress lines
    unsigned: int = 0  # run_progress: the run's own lines without the trainer's valid signature, dropped


def read_progress_records(path: str | Path, *, exact_bytes: int | None = None, sample: int = PROGRESS_SAMPLE,
                          tail: int = PROGRESS_TAIL) -> ProgressRecords:
    """The JSON-lines log at `path` (train/logs/progress.jsonl, or any metrics .jsonl) in bounded memory and time:
    the one reader of whole progress logs (training_status, diagnose_run).

    A log up to `exact_bytes` (default PROGRESS_EXACT_BYTES) is read whole. A longer one (200 MB: hours of steps)
    is never loaded: one pass at C speed counts its lines and picks out those holding a NaN or an infinity (up to
    PROGRESS_NONFINITE), then `sample` lines are read at evenly spaced offsets and the last `tail` lines from the
    end. Only those are parsed, so memory stays in the tens of MB and time near the disk's read time."""
    global _last_read
    path = Path(path)
    handle = open_regular(path, limit=None)  # in bounded passes; a device or a pipe: refused (an OSError)
    stat = os.fstat(handle.fileno())
    exact = PROGRESS_EXACT_BYTES if exact_bytes is None else exact_bytes
    # training_status reads the log, then its health check (diagnose_run) reads it again: the second is free.
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, exact, sample, tail)
    if _last_read is not None and _last_read[0] == key:
        handle.close()
        return replace(_last_read[1], records=list(_last_read[1].records))
    with handle:
        read = _read_whole(handle) if stat.st_size <= exact else _read_sampled(handle, stat.st_size, sample, tail)
    _last_read = (key, read)
    return replace(read, records=list(read.records))


class _Parsed:
    """Rows by their byte offset, and where lines were not JSON objects."""

    def __init__(self):
        self.rows: dict[int, dict] = {}
        self.bad: list[str] = []
        self.skipped = 0

    def add(self, offset: int, raw: bytes, where: str) -> bool:
        if offset in self.rows:
            return True
        if not (raw := raw.strip(BLANK)):  # a NUL run before a line (appended after a hole) is no part of it
            return True
        try:
            value = json.loads(raw)  # Python's json reads the NaN/Infinity TRL writes
        except ValueError:
            value = None
        except RecursionError:
            value, where = None, f"{where} (nested too deeply)"
        if isinstance(value, dict):
            self.rows[offset] = value
            return True
        if len(self.bad) < 20 and where not in self.bad:
            self.bad.append(where)
        return False

    def records(self) -> list[dict]:
        return [self.rows[offset] for offset in sorted(self.rows)]


def _read_whole(handle) -> ProgressRecords:
    parsed, number, offset, last_ok = _Parsed(), 0, 0, True
    for raw in handle:  # the whole file is at most PROGRESS_EXACT_BYTES
        number += 1
        if raw.strip(BLANK):
            last_ok = parsed.add(offset, raw, f"line {number}")
        offset += len(raw)
    return ProgressRecords(records=parsed.records(), lines=number, sampled=False, bad=parsed.bad,
                           last_line_bad=not last_ok, skipped=parsed.skipped)


def _read_sampled(handle, size: int, sample: int, tail: int) -> ProgressRecords:
    parsed, lines, base, carry, notable = _Parsed(), 0, 0, b"", 0
    while True:  # count the lines; parse those holding NaN/Infinity
        if (at := data_after(handle, base + len(carry))) > base + len(carry):  # a sparse hole: no line in it
            carry, base, parsed.skipped = b"", handle.seek(at), parsed.skipped + 1
        if not (chunk := handle.read(_CHUNK)):
            break
        lines += chunk.count(b"\n")
        data = carry + chunk
        cut = data.rfind(b"\n") + 1
        for marker in (b"NaN", b"Infinity"):
            at = data.find(marker, 0, cut)
            while 0 <= at and notable < PROGRESS_NONFINITE:
                start, end = data.rfind(b"\n", 0, at) + 1, data.find(b"\n", at, cut)
                notable += parsed.add(base + start, data[start:end], f"the line at byte {base + start}")
                at = data.find(marker, end, cut)
        carry, base = data[cut:], base + cut
        if len(carry) > PROGRESS_LINE_LIMIT:  # an overlong line (or a NUL run): no progress line, skipped
            carry, base = b"", base + len(carry)
            parsed.skipped += 1
    lines += bool(carry.strip())
    for i in range(sample):  # the first whole line after each of `sample` evenly spaced offsets
        handle.seek(data_after(handle, i * size // sample))  # one in a sparse hole: the data after it
        if i and not handle.readline(PROGRESS_SAMPLE_READ).endswith(b"\n"):
            continue  # no line end near: a NUL run or an overlong line, read no further
        offset, raw = handle.tell(), handle.readline(PROGRESS_SAMPLE_READ)
        if raw.strip(BLANK) and raw.endswith(b"\n"):  # the unfinished last line is the tail's to judge
            parsed.add(offset, raw, f"the line at byte {offset}")
    guess = (size // max(lines, 1) + 1) * (tail + 1) * 2 + 65536  # the last `tail` lines, and more
    found, skipped = last_lines(handle, size, min(guess, PROGRESS_TAIL_BYTES), PROGRESS_LINE_LIMIT)
    parsed.skipped, last_ok = parsed.skipped + skipped, True
    for offset, raw in found[-tail:]:
        last_ok = parsed.add(offset, raw, f"the line at byte {offset}")
    return ProgressRecords(records=parsed.records(), lines=lines, sampled=True, bad=parsed.bad,
                           last_line_bad=not last_ok, skipped=parsed.skipped)


def run_progress(run: Run) -> ProgressRecords:
    """The run's own train/logs/progress.jsonl (read_progress_records), its lines without the trainer's valid
    signature (written by hand, or a signed line's values changed) dropped and counted in `unsigned`. OSError as
    read_progress_records: none yet, or not a regular file."""
    read = read_progress_records(run.progress)
    try:
        signed = run_lines_verifier(run, run.progress, key())
    except UserInputError:  # no key here: no line is known to be the trainer's
        kept = []
    else:
        kept = [line for line in read.records if signed(line)]
    unsigned = len(read.records) - len(kept)
    if emitted_since_launch(run.dir) is not None:  # emitted since its last launch: a launch's lines are an earlier
        kept = [line for line in kept if not line.get("launch_id")]  # run's (issue 48 round 12 F1; status says so)
    return replace(read, records=kept, unsigned=unsigned)


def unsigned_note(read: ProgressRecords) -> str | None:
    """The words for the lines run_progress dropped, None when none was."""
    if not read.unsigned:
        return None
    why = key_problem()
    many = "s" if read.unsigned != 1 else ""
    return (f"{read.unsigned} progress line{many} unsigned or altered: not used (train/logs/progress.jsonl: not "
            f"recorded by llm-finetuning on this machine" + (f"; {why}" if why else "") + ")")

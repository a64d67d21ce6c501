"""Load logged training metrics from any source diagnose_run accepts, into one shape.

Sources: a run directory, a progress.jsonl (docs/architecture.md, "The run directory"), a TRL/transformers
trainer_state.json (its log_history), or a CSV/JSONL export of logged metrics: W&B (run.history() or a panel's "Export
CSV", whose columns read "<run> - train/<metric>" with "__MIN"/"__MAX" companions) and Trackio (transformers'
TrackioCallback logs the same "train/..." names with train/global_step). Every row becomes {"step": int, <TRL metric
name>: float | None, ...}, sorted by step, one row per step (the last one logged wins, so a resumed run that re-logs
steps reads correctly; in progress.jsonl, written in order, a step lower than the one before is a resume starting over
from its checkpoint: what the earlier attempt logged from that step on is dropped).

Light on purpose (stdlib + yaml): the MCP server imports it at start-up.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from mcp_server.diagnosis.values import is_metric, to_number, wrong_type
from mcp_server.errors import UserInputError
from mcp_server.evidence import emitted_since_launch, launch_record
from mcp_server.recipe.recorded import RecordedRequest, read_recorded
from mcp_server.runs import Run, read_json_if_present, sidecars
from mcp_server.diagnosis.progress_log import (  # noqa: F401 - read_progress_records: its importers' name here
    PROGRESS_EXACT_BYTES, PROGRESS_SAMPLE, PROGRESS_TAIL, ProgressRecords, read_progress_records, run_progress,
    unsigned_note)
from mcp_server.userfiles import load_config_file
from mcp_server.workspace import dated_run, runs_root, workspace_root

LOG_SUFFIXES = (".log", ".txt", ".out", ".err")  # a bare stdout log (SLURM's slurm-<job>.out, a .err), any case
ACCEPTED = (
    "a run directory (runs/<date>-<slug>/ or a TRL output_dir with checkpoint-*/), a progress.jsonl, "
    "a TRL trainer_state.json, a .csv/.jsonl export of logged metrics with TRL's metric names, "
    f"or a training stdout log ({'/'.join(LOG_SUFFIXES)})"
)

# Names other sources use for TRL's metrics -> TRL's own name.
ALIASES: dict[str, str] = {
    "lr": "learning_rate",  # progress.jsonl contract keys
    "completion_mean_length": "completions/mean_length",
    "clipped_ratio": "completions/clipped_ratio",
    "completion_length": "completions/mean_length",  # TRL < 0.16
    "train_loss_step": "loss",
}
STEP_KEYS = ("step", "global_step", "train/global_step", "Step", "_step", "trainer/global_step")
# Rows that summarise or evaluate rather than log a training step.
SUMMARY_KEYS = ("train_runtime", "train_samples_per_second", "total_flos")
LOG_READ_LIMIT = 8 * 1024 * 1024  # larger logs: the first 1 MiB and the last 4 MiB (imports fail early, OOMs late)


@dataclass
class LoadedRun:
    """Everything diagnosis reads about one run."""

    kind: str  # run_dir | progress_jsonl | trainer_state | csv | jsonl | log
    metrics_path: Path | None
    rows: list[dict]
    home: Run | None = None  # the run directory the files belong to; None for a file on its own
    config_path: Path | None = None
    config: dict | None = None
    log_path: Path | None = None
    log_text: str | None = None
    request: RecordedRequest = field(default_factory=RecordedRequest)  # train/request.json beside the config
    reward_specs: list | None = None  # train/rewards.json
    lines_logged: int | None = None  # lines of a long JSON-lines log, of which `rows` is a sample (else None)
    unread: str | None = None  # a run's own progress lines not read: unsigned or altered (progress_log)
    # the step of the run's first logged line (it precedes the run's first update); None: the first of `rows`.
    # The live guard on a resumed launch sets it: its rows start after the run's, or hold the run's earlier lines.
    first_step: int | None = None

    def series(self, name: str) -> list[tuple[int, float]]:
        """(step, value) for every row that logged `name` (NaN/inf kept: they are findings)."""
        return [(r["step"], r[name]) for r in self.rows if r.get(name) is not None]

    def metric_names(self) -> set[str]:
        return {k for r in self.rows for k, v in r.items() if v is not None and k != "step"}


# ---------------------------------------------------------------- locating files
def resolve_path(value: str | Path, field_name: str) -> Path:
    """An existing path as given, else relative to the workspace root or runs/ (so a run name works), else a run
    named without its date (`letters` for runs/<date>-letters, walk 9)."""
    text = str(value).strip()
    if not text:
        raise UserInputError(field_name, f"empty path; give {ACCEPTED}")
    raw = Path(text).expanduser()
    for candidate in (raw, workspace_root() / raw, runs_root() / raw):
        if candidate.is_file() or candidate.is_dir():
            return candidate.resolve()
        if candidate.exists():  # a device or a pipe: reading it may never end
            raise UserInputError(field_name, f"{text} is not a regular file or a directory. Give {ACCEPTED}.")
    try:  # a run's name without its date, as every run command reads it (runs.resolve_run): `letters`
        named = dated_run(text)
    except UserInputError as exc:  # several runs share the name
        raise UserInputError(field_name, str(exc).removeprefix(f"{exc.field}: ")) from None
    if named is not None:
        return named
    raise UserInputError(field_name, f"no such file or directory: {text}. Give {ACCEPTED}.")


def _latest_checkpoint_state(folder: Path) -> Path | None:
    states = [p for p in folder.glob("checkpoint-*/trainer_state.json") if p.parent.name.split("-")[-1].isdigit()]
    return max(states, key=lambda p: int(p.parent.name.split("-")[-1])) if states else None


def emitted_here(run: Run) -> bool:
    """A run directory of this project (train/config.yaml): its trainer signs its progress log, and nothing else
    in it is its metrics (issue 48, round 10 F1: with the progress log moved away, a checkpoint's hand-edited
    trainer_state.json made status raise kl_explosion at 777 and diagnosis propose patches). Also one whose
    config was moved away but that was launched (round 11, M1): run.json, or its signed launch record kept
    outside the workspace, which the workspace's holder cannot remove."""
    return (run.config.is_file() or run.run_json.exists() or launch_record(run.dir) is not None
            or emitted_since_launch(run.dir) is not None)


UNSIGNED_ONLY = ("train/logs/progress.jsonl is missing: no metrics the trainer signed to read (a checkpoint's "
                 "trainer_state.json or a printed log line in this run is not the trainer's signed record, so it is "
                 "not read as one; pass such a file by its path to read it as an unsigned copy)")


def metrics_file_in(run: Run) -> Path | None:
    """The metrics file of a directory: a run of this project's signed progress log alone; in any other folder (a
    TRL output_dir) a progress log first, then TRL's trainer_state.json."""
    if emitted_here(run):
        return run.progress if run.progress.is_file() else None
    candidates = [run.progress, run.dir / "progress.jsonl", run.dir / "trainer_state.json"]
    for path in candidates:
        if path.is_file():
            return path
    for base in (run.dir, run.checkpoints):
        if base.is_dir():
            state = _latest_checkpoint_state(base)
            if state:
                return state
    return None


# ---------------------------------------------------------------- parsing values and rows
def export_name(key: str) -> str | None:
    """A column of an export under TRL's name: W&B panel exports prefix the run ("my-run - train/reward") and add
    "__MIN"/"__MAX" companions (dropped: None); W&B and Trackio prefix "train/"."""
    if key.endswith(("__MIN", "__MAX")):
        return None
    if " - " in key:
        key = key.rsplit(" - ", 1)[1]
    return key[len("train/"):] if key.startswith("train/") else key


def normalize_row(raw: dict, index: int, strict: bool = False) -> dict | None:
    """One logged row under TRL's names, or None for summary/eval rows and rows without metrics. `strict`: a metric
    whose value is not a number (a list, an object, a word) is a UserInputError naming it (the live guard is not
    strict: it must never stop training over a log line)."""
    raw = {(export_name(k) if isinstance(k, str) and " - " in k else k): v for k, v in raw.items()}
    if any(k in raw for k in SUMMARY_KEYS):
        return None
    step = next((to_number(raw[k]) for k in STEP_KEYS if to_number(raw.get(k)) is not None), None)
    logs_rewards = any(isinstance(k, str) and export_name(k) and export_name(k).startswith("rewards/") for k in raw)
    row: dict = {}
    for key, value in raw.items():
        if key is None or key in STEP_KEYS or not isinstance(key, str):
            continue
        name = export_name(key)
        if name is None:
            continue
        if name.startswith(("eval_", "eval/", "test/")):
            continue
        name = ALIASES.get(name, name)
        # TRL < 0.17 logged rewards/<func> without the /mean suffix.
        if name.startswith("rewards/") and name.count("/") == 1:
            name += "/mean"
        if strict and is_metric(name) and (problem := wrong_type(value)):
            raise UserInputError("source", f"row {index + 1}: metric '{name}' is a {problem}; a logged metric is a "
                                           "number (NaN and Infinity allowed) or null")
        number = to_number(value)
        if number is None and value is not None:
            continue  # no number and no null (the line's mac, an export's empty cell): no metric logged here
        if value is None and (name.startswith("rewards/") and name.endswith("/mean")
                              or name in ("reward", "reward_std") and logs_rewards):
            # TRL (GRPOTrainer.log) logs a metric whose every value in the window was NaN as null: a reward that
            # returned None for every sample, and the total reward when they all did. Logged, not a number.
            number = math.nan
        if number is not None or name not in row:
            row[name] = number if number is not None else row.get(name)
    # epoch alone is no logged step: an evaluation logged at a step of its own (eval_* only) carries it too
    if not any(v is not None for k, v in row.items() if k != "epoch"):
        return None
    row["step"] = int(step) if step is not None and math.isfinite(step) else index + 1
    return row


def rows_from_records(records: list, path: Path, restarts: bool = False) -> list[dict]:
    """One row per step, sorted by step; a step logged twice keeps the later values. `restarts`: the records are
    an append-only log in the order it was written (progress.jsonl): a step lower than the one before is a
    resumed training process logging again from its checkpoint, so what the earlier attempt logged from that step
    on was discarded with it (its NaN steps, or steps the resume has not reached yet, are not the run's)."""
    rows: dict = {}
    last = None
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise UserInputError("source", f"{path}: expected objects of logged metrics, found {type(record).__name__}")
        try:
            row = normalize_row(record, i, strict=True)
        except UserInputError as exc:
            raise UserInputError("source", f"{path}: {str(exc).removeprefix('source: ')}") from None
        if row is not None:
            if restarts and last is not None and row["step"] < last:
                rows = {s: r for s, r in rows.items() if s < row["step"]}
            last = row["step"]
            # a later value wins; a metric logged null is kept as logged (the live guard's rows keep it: a reward
            # null at every step is a lost signal) unless the step gave it a value
            earlier = rows.get(row["step"], {})
            rows[row["step"]] = {**row, **earlier, **{k: v for k, v in row.items() if v is not None}}
    return [rows[s] for s in sorted(rows)]


def _read_jsonl(path: Path) -> tuple[list, int | None, str | None]:
    """(records, lines in the file when the records are a sample of a long log, else None, what was not read) of
    a .jsonl metrics file (a run's own progress log: its signed lines); a broken line other than the last is an
    error."""
    _refuse_binary(path)
    run = own_progress(path)
    read = run_progress(run) if run is not None else read_progress_records(path)
    # A half-written last line of a live run is skipped, unless it is all there is.
    broken = read.bad[:-1] if read.last_line_bad and (read.records or read.unsigned) else read.bad
    if broken:
        raise UserInputError("source", f"{path}: {broken[0]} is not a JSON object of logged metrics; give "
                             "one JSON object per line (a half-written last line of a live run is skipped)")
    return read.records, read.lines - read.unsigned if read.sampled else None, unsigned_note(read)


def _refuse_binary(path: Path) -> None:
    """A binary file (a NUL byte in its first 8 KiB) is not a text export: say so instead of reading garbage."""
    with open(path, "rb") as handle:  # NULs after the content (a sparse hole at the end of a log) are no sign
        if b"\0" in handle.read(8192).rstrip(b"\0"):
            raise UserInputError("source", f"{path} is a binary file, not a text export of logged metrics. Give "
                                           f"{ACCEPTED}.")


def _loads(text: str, path: Path, where: str):
    """json.loads with its failures as input errors. Python's json reads the NaN/Infinity TRL writes; a deeply
    nested document exceeds the parser's recursion limit (RecursionError), which is bad input too."""
    try:
        return json.loads(text)
    except RecursionError:
        raise UserInputError("source", f"{path}: {where} is nested too deeply to be logged metrics") from None


def _read_json(path: Path) -> tuple[str, list]:
    _refuse_binary(path)
    try:
        data = _loads(path.read_text(encoding="utf-8", errors="replace"), path, "the document")
    except json.JSONDecodeError as exc:
        raise UserInputError("source", f"{path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if isinstance(data, dict) and isinstance(data.get("log_history"), list):
        return "trainer_state", data["log_history"]
    if isinstance(data, list):
        return "jsonl", data
    raise UserInputError(
        "source", f"{path}: a JSON source must be a trainer_state.json (with log_history) or a list of metric rows"
    )


def _read_csv(path: Path) -> list:
    _refuse_binary(path)
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        reader = csv.DictReader(handle)
        try:
            if not reader.fieldnames:
                raise UserInputError("source", f"{path}: empty CSV (expected a header row of metric names)")
            return list(reader)
        except csv.Error as exc:
            raise UserInputError("source", f"{path}: not a readable CSV ({exc})") from None


def own_progress(path: Path) -> Run | None:
    """The run whose own progress log `path` is (<run>/train/logs/progress.jsonl, the run-directory contract): its
    lines are read as the trainer signed them (progress_log.run_progress); None for any other file."""
    path = Path(os.path.abspath(path))
    if path.name != "progress.jsonl" or len(path.parents) < 3:
        return None
    run = Run(path.parents[2])
    return run if Path(os.path.abspath(run.progress)) == path else None


def load_metrics(path: Path, allow_empty: bool = False) -> tuple[str, list[dict], int | None, str | None]:
    """(kind, rows, lines logged, what was not read) of one metrics file; lines logged is known for a JSON-lines
    log, whose rows are a sample when it is long (read_progress_records); a run's own progress log is read as its
    trainer signed it, the lines dropped named (progress_log.unsigned_note). A file without a single logged
    training step is an error (diagnosing nothing must not read as a healthy run), unless `allow_empty` (a run
    directory that has a log to read)."""
    suffix = path.suffix.lower()
    lines, unread = None, None
    try:
        if suffix == ".csv":
            kind, records = "csv", _read_csv(path)
        elif suffix == ".json":
            kind, records = _read_json(path)
        elif suffix in (".jsonl", ".ndjson", ""):
            kind = "progress_jsonl" if path.name == "progress.jsonl" else "jsonl"
            records, lines, unread = _read_jsonl(path)
        else:
            raise UserInputError("source", f"{path}: unsupported file type '{suffix}'. Give {ACCEPTED}.")
    except OSError as exc:  # a file that refuses to be read (/proc/self/mem: EIO) is named, not a crash
        raise UserInputError("source", f"cannot read {path}: {exc.strerror or exc}") from None
    rows = rows_from_records(records, path, restarts=kind == "progress_jsonl")
    if not rows and not allow_empty:
        raise UserInputError(
            "source", f"{path} holds no logged training step (no row with a numeric metric such as loss, reward or "
            f"grad_norm under TRL's names)" + (f"; {unread}" if unread else "") + f". Give {ACCEPTED}.")
    return kind, rows, lines, unread


# How a printed dict shows a non-finite float: str(dict) writes it bare (nan, inf, -inf: transformers 4's
# ProgressCallback and PrinterCallback print the logs as they are); transformers 5 formats each float first
# (f"{v:.4g}": 'nan', 'inf', '-inf', quoted), which reads as a string and to_number reads alike.
PRINTED_NONFINITE = {"nan": math.nan, "inf": math.inf}


def _printed_dict(text: str):
    """The dict `text` prints (a Python literal), its bare nan/inf names read as the floats they print."""
    import ast

    class Nonfinite(ast.NodeTransformer):
        def visit_Name(self, node):
            value = PRINTED_NONFINITE.get(node.id)
            return node if value is None else ast.copy_location(ast.Constant(value), node)

    return ast.literal_eval(Nonfinite().visit(ast.parse(text, mode="eval")))


def rows_from_log(text: str) -> list[dict]:
    """The metric dicts a transformers Trainer prints on every log ("{'loss': '0.01', 'reward': ...}", or with
    bare floats and a NaN as `nan`: PRINTED_NONFINITE), for a run known only by its stdout. Steps are the order
    of the printed entries (the log does not say the step)."""
    records = []
    for line in text.splitlines():
        start = line.find("{'")
        if start < 0 or not line.rstrip().endswith("}"):
            continue
        try:
            record = _printed_dict(line[start:].strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(record, dict) and any(k in record for k in ("loss", "reward", "grad_norm", "learning_rate")):
            records.append(record)
    return rows_from_records(records, Path("log"))


# ---------------------------------------------------------------- config and log
def load_config(value: str | Path | dict | None) -> tuple[Path | None, dict | None]:
    if value is None:
        return None, None
    if isinstance(value, dict):
        return None, dict(value)
    path = resolve_path(value, "config")
    return path, load_config_file(path, field="config")


def read_log(path: Path) -> str:
    size = path.stat().st_size
    with open(path, "rb") as handle:
        if size <= LOG_READ_LIMIT:
            data = handle.read()
        else:
            head = handle.read(1 << 20)
            handle.seek(size - (4 << 20))
            data = head + b"\n[... log cut ...]\n" + handle.read()
    return data.decode("utf-8", errors="replace")


def load_run(source: Run | str | Path, config: str | Path | dict | None = None,
             log: str | Path | None = None) -> LoadedRun:
    """Find and read the metrics, config and log of `source`: a run, or a path as a person gives it (see ACCEPTED)."""
    path = source.dir.resolve() if isinstance(source, Run) else resolve_path(source, "source")
    home = None
    if path.is_dir():
        home = Run(path)
        metrics_path = metrics_file_in(home)
    elif path.suffix.lower() in LOG_SUFFIXES:  # a bare stdout log: only the environment rules apply
        metrics_path, log = None, log or path
    else:
        metrics_path = path
        # A file inside a run directory (train/logs/progress.jsonl): the run's config and log are its siblings.
        home = next((run for run in map(Run, path.parents) if run.config.is_file()), None)
    # A run whose progress log is still empty (it crashed before its first step) is read from its log, whether
    # the run's folder or its progress log was given.
    has_log = log is not None or (home is not None and home.stdout.is_file())
    kind, rows, lines_logged, unread = (
        load_metrics(metrics_path, allow_empty=(path.is_dir() or home is not None) and has_log) if metrics_path
        else ("log", [], None, None))
    if path.is_dir():
        kind = "run_dir"

    config_path, config_values = load_config(config)
    if config is None and home is not None and home.config.is_file():
        config_path, config_values = load_config(home.config)

    log_path = resolve_path(log, "log") if log is not None else None
    if log_path is not None and not log_path.is_file():
        raise UserInputError("log", f"{log_path} is not a file; give the run's stdout log (train/logs/stdout.log)")
    if log_path is None and home is not None and home.stdout.is_file():
        log_path = home.stdout

    if metrics_path is None and log_path is None:
        raise UserInputError(
            "source", f"{path} holds no metrics and no log: looked for train/logs/progress.jsonl, progress.jsonl, "
            "trainer_state.json and checkpoint-*/trainer_state.json (also under checkpoints/), and "
            "train/logs/stdout.log. Give " + ACCEPTED + "."
        )
    try:
        log_text = read_log(log_path) if log_path else None
    except OSError as exc:
        raise UserInputError("log", f"cannot read {log_path}: {exc.strerror or exc}") from None
    if metrics_path is None and home is not None and emitted_here(home) and path.is_dir():
        unread = UNSIGNED_ONLY  # its stdout's printed metrics are as unsigned as a trainer_state.json
    elif metrics_path is None and log_text:
        rows = rows_from_log(log_text)
    # The recipe's sidecars: beside the config given, else the run's.
    config_file = config_path or (home.config if home else None)
    request_path, rewards_path = sidecars(config_file) if config_file else (None, None)
    request = read_recorded(request_path) if request_path else RecordedRequest()
    reward_specs = read_json_if_present(rewards_path, list) if rewards_path else None
    return LoadedRun(
        kind=kind,
        metrics_path=metrics_path,
        rows=rows,
        lines_logged=lines_logged,
        unread=unread,
        home=home,
        config_path=config_path,
        config=config_values,
        log_path=log_path,
        log_text=log_text,
        request=request,
        reward_specs=reward_specs if isinstance(reward_specs, list) else None,
    )

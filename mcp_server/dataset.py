"""Reading a data set and checking its prompts, for every feature that reads one (emission checks the columns,
inspection samples prompts, evaluation reads goldens): the embedded tiny task, local files, or (online only) a
hub data set. docs/architecture.md, "Floors"."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

from mcp_server.config import FIELD
from mcp_server.errors import UserInputError, closest_names
from mcp_server.tiny import make_task
from mcp_server.worker import in_training
from mcp_server.worker_targets import READ_FILE

LOCAL_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")


def load_rows(dataset: str, split: str = "train", config: str | None = None) -> list[dict]:
    """All rows of `dataset` as dicts. 'tiny' is the whole embedded arithmetic pool (it is small)."""
    if dataset == "tiny":
        return make_task(n=10**9)
    path = Path(dataset).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in LOCAL_SUFFIXES and not p.name.startswith("."))
        # A split-named file wins (train.jsonl, data/train-00000.parquet), else every file.
        split_files = [p for p in files if p.stem.split("-")[0] == split]
        files = split_files or files
        if not files:
            raise UserInputError("dataset", f"directory {path} holds no {', '.join(LOCAL_SUFFIXES)} files")
        return [row for f in files for row in read_file(f)]
    if path.suffix in LOCAL_SUFFIXES or path.exists():
        if not path.is_file():
            raise UserInputError("dataset", f"no such file: {path}")
        return read_file(path)
    return _load_hub(dataset, split, config)


def read_file(path: Path) -> list[dict]:
    """Every row of a local .jsonl/.json/.csv/.parquet file; a malformed row is an error naming its line."""
    path = Path(path)
    if path.suffix not in LOCAL_SUFFIXES:
        raise UserInputError("dataset", f"{path}: unsupported file type; accepted: {', '.join(LOCAL_SUFFIXES)}")
    if path.suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:  # the light server: the training interpreter has pyarrow (with datasets)
            return in_training(READ_FILE, str(path))
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserInputError("dataset", f"cannot read {path}: {exc}") from None
    return rows_of_bytes(data, path)


def rows_of_bytes(data: bytes, path: Path) -> list[dict]:
    """The rows of `data`, the bytes of one read of the file `path` (its suffix says the format), parsed from those
    bytes: a reader that hashes what it read (a baseline's goldens) parses the same bytes (round 19, b08)."""
    path = Path(path)
    try:
        if path.suffix == ".jsonl":
            rows = []
            for line_no, line in enumerate(io.StringIO(data.decode("utf-8"), newline=None), 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise UserInputError("dataset", f"{path}:{line_no} is not JSON: {exc}") from None
            return rows
        if path.suffix == ".json":
            parsed = json.loads(data.decode("utf-8"))
            if isinstance(parsed, dict):  # {"train": [...]} or {"data": [...]}
                parsed = next((v for v in parsed.values() if isinstance(v, list)), None)
            if not isinstance(parsed, list):
                raise UserInputError("dataset", f"{path}: expected a JSON list of objects")
            return parsed
        if path.suffix == ".csv":
            return list(csv.DictReader(io.StringIO(data.decode("utf-8"), newline="")))
        if path.suffix == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            return pq.read_table(pa.BufferReader(data)).to_pylist()
    except (OSError, ValueError) as exc:
        if isinstance(exc, UserInputError):
            raise
        raise UserInputError("dataset", f"cannot read {path}: {exc}") from None
    raise UserInputError("dataset", f"{path}: unsupported file type; accepted: {', '.join(LOCAL_SUFFIXES)}")


def _load_hub(name: str, split: str, config: str | None) -> list[dict]:
    if any(os.environ.get(v) == "1" for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        raise UserInputError(
            "dataset",
            f"'{name}' is not a local file or directory and the hub is offline here; give a local "
            ".jsonl/.json/.csv/.parquet file, a directory of them, or 'tiny'",
        )
    try:
        import datasets

        return datasets.load_dataset(name, config, split=split).to_list()
    except Exception as exc:  # network, unknown name, bad split: all are the caller's input
        raise UserInputError("dataset", f"cannot load '{name}' (split '{split}') from the hub: {exc}") from None


def is_conversational(prompt) -> bool:
    """Chat messages: a list of {role, content} dicts (TRL's conversational format)."""
    return isinstance(prompt, list) and bool(prompt) and all(isinstance(m, dict) and "role" in m for m in prompt)


# Column names data sets give their prompts, most telling first (a misspelling of the column asked for wins over them)
PROMPT_NAMES = ("prompt", "prompts", "question", "problem", "query", "instruction", "input", "messages",
                "conversation", "text")
# ... and the names of what a prompt is answered with: never suggested as the prompts
ANSWER_NAMES = ("answer", "answers", "solution", "label", "target", "output", "completion", "response", "gold")
# How a door names the prompt column: emission's field and flag, and sampling's
PROMPT_COLUMN_HOW = "`emit-config --prompt-column {column}` (emit_grpo_config's prompt_column)"
SAMPLE_PROMPT_COLUMN = "`sample-completions RUN --prompt-column {column}` (sample_completions' prompt_column)"


def check_prompt_column(rows: list[dict], column: str, how: str = PROMPT_COLUMN_HOW) -> bool:
    """Validate the prompt column and return whether the prompts are conversational. A missing column is refused
    naming the columns there, the one most like a prompt column and how to name it (`how`, with {column})."""
    if not rows:
        raise UserInputError("dataset", "the data set has no rows")
    odd = next((i for i, row in enumerate(rows) if not isinstance(row, dict)), None)
    if odd is not None:
        raise UserInputError("dataset", f"row {odd} is a {type(rows[odd]).__name__}, not an object of columns")
    if column not in rows[0]:
        raise UserInputError("prompt_column", missing_prompt_column(rows[0], column, how))
    first = is_conversational(rows[0][column])
    for i, row in enumerate(rows):
        prompt = row.get(column)
        if first and not is_conversational(prompt):
            raise UserInputError("dataset", f"row {i}: prompt is not a list of chat messages like row 0")
        if not first and not isinstance(prompt, str):
            raise UserInputError(
                "dataset", f"row {i}: prompt must be text or a list of {{role, content}} messages, got "
                           f"{type(prompt).__name__}"
            )
    return first


def missing_prompt_column(row: dict, column: str, how: str = PROMPT_COLUMN_HOW) -> str:
    """What a data set without the prompt column `column` is told (walk 10: "no column 'prompt'; columns are:
    question, answer" suggested no fix): the columns there, the likeliest prompt column and how to name it."""
    found = ", ".join(f"'{name}'" for name in row) or "none"
    best = likeliest_prompt_column(row, column)
    if best is None:
        return (f"no column '{column}' in the data (its columns: {found}), and none of them holds text or chat "
                f"messages to prompt with. Add a '{column}' column of prompts, or name the column that holds them "
                f"with {how.format(column='NAME')}")
    return (f"no column '{column}' in the data (its columns: {found}). The closest match is '{best}': name it as "
            f"the prompt column with {how.format(column=best)}, or rename it to '{column}' in the file")


def likeliest_prompt_column(row: dict, column: str) -> str | None:
    """The column of `row` most likely meant as the prompt column: a misspelling of `column`, else a name data
    sets give prompts (PROMPT_NAMES), else the first that holds chat messages, else the longest text; only a column
    whose value is text or chat messages and whose name is not an answer's (ANSWER_NAMES). None when there is none."""
    usable = [name for name, value in row.items() if (isinstance(value, str) or is_conversational(value))
              and name.lower() not in ANSWER_NAMES]
    if not usable:
        return None
    near = closest_names(column.lower(), {name.lower(): name for name in usable}, n=1)
    if near:
        return near[0]
    named = sorted((PROMPT_NAMES.index(name.lower()), name) for name in usable if name.lower() in PROMPT_NAMES)
    if named:
        return named[0][1]
    chats = [name for name in usable if is_conversational(row[name])]
    return chats[0] if chats else max(usable, key=lambda name: len(row[name]))


def reset_rows(values: dict, base_dir: Path | None, prompt_column: str | None) -> list[dict]:
    """The config's local data set's first row as TRL hands it to an environment's reset (its prompt column named
    'prompt'), for measuring a tool-calling turn; [] for a hub data set or a file not readable here. Relative
    data_files resolve against `base_dir` (the run directory), as train.py reads them."""
    datasets = values.get(FIELD.datasets)
    files = datasets[0].get("data_files") if isinstance(datasets, list) and datasets and isinstance(
        datasets[0], dict) else None
    if not isinstance(files, str):
        return []
    path = Path(files).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    try:
        rows = read_file(path)[:1] if path.is_file() else []
    except (UserInputError, OSError, ValueError):
        return []
    column = prompt_column or "prompt"
    return [{("prompt" if k == column else k): v for k, v in row.items()} for row in rows]

"""Goldens are distinct items (round 17, b09): a goldens file repeating one item 21 times made promote_checkpoint's
exact McNemar test count 21 independent gains (PROMOTE at p = 9.5e-7). Each golden is counted as an independent
item in the pass rate, its interval and the paired test, so evaluate_model, the baseline and promote_checkpoint
(every reader of a goldens file: evaluate.load_goldens) refuse a file in which one prompt comes twice, compared as
the model is asked it: text as one user message, whatever the other columns, ignoring case, whitespace,
zero-width characters and Unicode compatibility forms."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from pathlib import Path

from mcp_server.dataset import LOCAL_SUFFIXES, load_rows, rows_of_bytes
from mcp_server.errors import UserInputError
from mcp_server.userfiles import read_bytes
from mcp_server.workspace import sha256_file


def _norm(value):
    if isinstance(value, str):
        text = unicodedata.normalize("NFKC", value).casefold()
        return "".join(c for c in text if not c.isspace() and unicodedata.category(c) != "Cf")
    if isinstance(value, dict):
        return {_norm(str(k)): _norm(v) for k, v in value.items()}
    return [_norm(v) for v in value] if isinstance(value, (list, tuple)) else value


def repeated_prompts(rows: list[dict]) -> list[tuple[int, int]]:
    """(row, the earlier row whose prompt it repeats) for each row whose normalised prompt an earlier row holds."""
    seen: dict[str, int] = {}
    repeated = []
    for i, row in enumerate(rows):
        prompt = row["prompt"]
        key = json.dumps(_norm([{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt),
                         sort_keys=True, default=str)
        if key in seen:
            repeated.append((i, seen[key]))
        else:
            seen[key] = i
    return repeated


def refuse_repeated(rows: list[dict], path: Path, field: str = "goldens") -> None:
    """UserInputError(field) naming the repeated rows when a prompt comes twice; nothing when each is distinct."""
    repeated = repeated_prompts(rows)
    if not repeated:
        return
    said = ", ".join(f"row {j} repeats row {i}" for j, i in repeated[:5]) + (
        f" and {len(repeated) - 5} more" if len(repeated) > 5 else "")
    raise UserInputError(field, (
        f"{path} holds {len(rows) - len(repeated)} distinct goldens in {len(rows)} rows: {said} (prompts compared as "
        "the model is asked them, whatever the other columns, ignoring case, whitespace, zero-width characters and "
        "Unicode compatibility forms). Each golden counts as an independent item in the pass rate and in "
        "promote_checkpoint's paired test, so a repeated one counts its gain or loss again (21 copies of one item "
        "made a PROMOTE at p = 1e-6): keep one row of each"))


def load_goldens(path: Path, field: str = "goldens") -> list[dict]:
    return read_goldens(path, field)[0]


def read_goldens(path: Path, field: str = "goldens") -> tuple[list[dict], str]:
    """(the rows, the sha256) of ONE read of the goldens file: what is hashed (a baseline's goldens_sha256, the
    pin promote checks) is the bytes parsed, never the file hashed again after its rows were read (round 19, b08:
    other prompts decoded, the person's file put back before the hash)."""
    try:
        data = read_bytes(path, field) if Path(path).suffix in LOCAL_SUFFIXES else None
        rows = load_rows(str(path)) if data is None else rows_of_bytes(data, Path(path))
    except ImportError:  # a parquet file in the light server (no pyarrow): read there, by path (no baseline here)
        data, rows = None, load_rows(str(path))
    except UserInputError as exc:
        raise UserInputError(field, str(exc).removeprefix("dataset: ").removeprefix(f"{field}: ")) from None
    if not rows:
        raise UserInputError(field, f"{path} holds no rows")
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or "prompt" not in row:
            raise UserInputError(field, f"{path} row {i} has no `prompt` column (text or chat messages)")
    if field == "goldens":  # the evidence of a promotion (goldens.py); the drift suite only guards against a drop
        refuse_repeated(rows, path, field)
    return rows, hashlib.sha256(data).hexdigest() if data is not None else sha256_file(path)

"""Goldens are distinct items (round 17, b09): a goldens file repeating one item 21 times made promote_checkpoint's
exact McNemar test count 21 independent gains (PROMOTE at p = 9.5e-7). Each golden is counted as an independent
item in the pass rate, its interval and the paired test, so evaluate_model, the baseline and promote_checkpoint
(every reader of a goldens file: evaluate.load_goldens) refuse a file in which one prompt comes twice, compared as
the model is asked it: text as one user message, whatever the other columns, ignoring case, whitespace,
zero-width characters and Unicode compatibility forms."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

from mcp_server.errors import UserInputError


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

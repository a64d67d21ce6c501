"""The embedded default's goldens and frozen drift suite (the tiny arithmetic task family).

Goldens: the held-out split of the task the demo trains on (disjoint from the training prompts).
Drift suite: `drift_tiny.jsonl`, committed and never regenerated: problems the training never shows
(subtraction, larger operands) on which the model must keep its <reasoning>/<answer> format.
"""

from __future__ import annotations

import random
from pathlib import Path

from mcp_server.tiny import make_example, split_task, write_jsonl
from mcp_server.workspace import eval_root

# The task the demo trains and evaluates on: sums of two operands 0..TINY_MAX_OPERAND.
TINY_MAX_OPERAND = 19
TINY_OPS = "+"
DRIFT_SUITE = Path(__file__).with_name("drift_tiny.jsonl")


def tiny_split(max_operand: int = TINY_MAX_OPERAND) -> tuple[list[dict], list[dict]]:
    return split_task(max_operand=max_operand, ops=TINY_OPS)


def tiny_goldens_rows() -> list[dict]:
    """Held-out problems as goldens rows (`prompt`, `answer`, `question`)."""
    return [{k: r[k] for k in ("prompt", "question", "answer")} for r in tiny_split()[1]]


def make_drift_rows() -> list[dict]:
    """How drift_tiny.jsonl was made (kept for the record; the file itself is frozen)."""
    rng = random.Random(20261129)
    rows = []
    for i in range(40):
        if i % 2 == 0:  # another operation
            a = rng.randint(0, 19)
            example = make_example(a, rng.randint(0, a), "-")
        else:  # larger operands than training uses
            example = make_example(rng.randint(20, 40), rng.randint(20, 40), "+")
        rows.append({"prompt": example["prompt"], "question": example["question"], "answer": example["answer"],
                     "grader": "format"})
    return rows


def drift_suite_path() -> Path:
    """The frozen suite; when a packaging step left the data file out, the same bytes are rebuilt (the rows
    come from a fixed seed) into eval/drift_tiny.jsonl."""
    if DRIFT_SUITE.is_file():
        return DRIFT_SUITE
    path = eval_root() / DRIFT_SUITE.name
    if not path.is_file():
        write_jsonl(make_drift_rows(), path)
    return path

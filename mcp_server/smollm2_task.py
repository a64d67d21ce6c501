"""The real model's task: sums of two small numbers, asked plainly, with the answer read as the completion's last
number (mcp_server/smollm2.py is the model; mcp_server/demo_smollm2.py walks the lifecycle on it).

Why this task: SmolLM2-135M-Instruct already solves it part of the time, so GRPO has a signal without an SFT
warm start. Asked "What is 6 + 3?" under its chat template's default system prompt, the model answers
"6 + 3 = 9", "The answer is 14." or starts a preamble ("To add 6 and 3, we need to combine") that a short
completion budget cuts before any answer; what GRPO can teach it in a few CPU steps is to answer first.

The grader is the demo's own dotted-path reward, the way a person adds one for their task (`rewards` takes
"module.function"): the built-in correctness_reward reads an <answer> tag, which this model never writes.
"""

from __future__ import annotations

import random
import re

_NUMBER = re.compile(r"-?\d+")


def make_example(a: int, b: int) -> dict:
    """One problem: a prompt-only chat row (no system turn: the template adds the model's default) and its gold."""
    question = f"What is {a} + {b}?"
    return {"prompt": [{"role": "user", "content": question}], "question": question, "answer": str(a + b)}


def split_task(max_operand: int = 9, held_out: float = 0.5, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """(training rows, held-out goldens) over every pair 0..max_operand, disjoint by problem."""
    pool = [(a, b) for a in range(max_operand + 1) for b in range(max_operand + 1)]
    random.Random(seed).shuffle(pool)
    rows = [make_example(a, b) for a, b in pool]
    cut = int(len(rows) * (1 - held_out))
    return rows[:cut], rows[cut:]


def final_number(text: str) -> str | None:
    """The last integer in the text (thousands separators dropped), or None: "6 + 3 = 9" -> "9"."""
    found = _NUMBER.findall(text.replace(",", ""))
    return found[-1] if found else None


def final_number_reward(completions: list, answer: list, **columns) -> list[float]:
    """1.0 when the completion's last number equals the gold `answer` column, else 0.0."""
    return [1.0 if final_number(text) == str(gold).strip() else 0.0
            for text, gold in zip(map(_text, completions), answer, strict=True)]


def _text(completion) -> str:
    """A completion as TRL hands it: a string, or a conversational turn list (the assistant's last content)."""
    return completion[-1]["content"] if isinstance(completion, list) else str(completion)

"""Format and exact-match correctness rewards (the tiny task's pair, and the usual RLVR pair).

Correctness pays 2.0 while format pays 1.0, so the total keeps three outcomes apart:
malformed (0), well-formed but wrong (1), well-formed and right (3).
"""

from __future__ import annotations

import re

from mcp_server.errors import UserInputError
from mcp_server.rewards.answers import final_answer, same_answer
from mcp_server.rewards.declared import Column
from mcp_server.rewards.named import NamedReward
from mcp_server.rewards.text import column, completion_texts, single_tag

DEFAULT_TAGS = ("reasoning", "answer")


def _check_tags(tags, field: str) -> tuple[str, ...]:
    if isinstance(tags, str) or not isinstance(tags, (list, tuple)) or not tags:
        raise UserInputError(
            field, f"expected a non-empty list of tag names like ['reasoning', 'answer'], got {tags!r}"
        )
    for tag in tags:
        if not isinstance(tag, str) or not re.fullmatch(r"[A-Za-z_][\w.-]*", tag):
            raise UserInputError(field, f"tag names are plain words like 'answer', got {tag!r}")
    return tuple(tags)


def _format_pattern(tags: tuple[str, ...], strict: bool) -> re.Pattern:
    body = r"\s*".join(rf"<{re.escape(t)}>(?:(?!<{re.escape(t)}>).)*?</{re.escape(t)}>" for t in tags)
    return re.compile(rf"^\s*{body}\s*$" if strict else body, flags=re.DOTALL)


def score_format(completions: list, columns: dict, tags=DEFAULT_TAGS, strict: bool = True) -> list[float]:
    pattern = _format_pattern(tuple(tags), strict)
    scores = []
    for text in completion_texts(completions):
        # Each tag exactly once: a repeated block is not the format (and would let answers hedge).
        once = all(text.count(f"<{t}>") == 1 and text.count(f"</{t}>") == 1 for t in tags)
        scores.append(1.0 if once and pattern.search(text) else 0.0)
    return scores


def make_format_reward(tags: list[str] = list(DEFAULT_TAGS), strict: bool = True) -> NamedReward:
    """1.0 when the completion is the tag blocks in order (default <reasoning>...</reasoning><answer>...</answer>),
    each exactly once, else 0.0.

    Role: format, scores 0 to 1

    Args:
        tags: Tag names in the order they must appear.
        strict: True: nothing but whitespace outside the blocks; False: the blocks may sit inside other text.
    """
    tags = _check_tags(tags, "params.tags")
    if not isinstance(strict, bool):
        raise UserInputError("params.strict", f"expected true or false, got {strict!r}")
    return NamedReward("format_reward", score_format, tags=tags, strict=strict)


def _normalise(text: str, ignore_case: bool) -> str:
    text = " ".join(str(text).split())
    return text.lower() if ignore_case else text


def score_correctness(
    completions: list, columns: dict, answer_column: str = "answer", tag: str | None = "answer",
    value: float = 2.0, ignore_case: bool = False,
) -> list[float]:
    texts = completion_texts(completions)
    golds = column(columns, answer_column, len(texts), "params.answer_column")
    scores = []
    for text, gold in zip(texts, golds, strict=True):
        if tag is None:  # a plain-text reply: its final stated answer, the same number or text as the gold
            right = same_answer(final_answer(text), gold, ignore_case)
        else:
            answer = single_tag(text, tag)
            right = (answer is not None and gold is not None
                     and _normalise(answer, ignore_case) == _normalise(gold, ignore_case))
        scores.append(value if right else 0.0)
    return scores


def make_correctness_reward(
    answer_column: Column = "answer", tag: str | None = "answer", value: float = 2.0, ignore_case: bool = False
) -> NamedReward:
    """`value` (2.0) when the single <answer> block equals the gold answer column exactly (whitespace collapsed), else
    0.0. Several <answer> blocks score 0 (no hedging). 2.0 against format's 1.0 keeps malformed (0),
    well-formed-but-wrong (1) and right (3) apart in the total. With tag null, a plain-text reply is scored by its
    final stated answer ('1 + 5 = 6 as we start' -> 6, '7 + 7 = **8**' -> 8, 'The answer is 17.' -> 17; several
    numbers and no statement -> no answer), as a number or as text.

    Role: task, scores 0 to value

    Args:
        answer_column: Data set column holding the gold answer.
        tag: Tag whose body is the model's answer; null reads the final stated answer of the whole completion.
        value: Reward for a right answer.
        ignore_case: Compare case-insensitively.
    """
    if not isinstance(answer_column, str) or not answer_column:
        raise UserInputError("params.answer_column", f"expected a column name, got {answer_column!r}")
    if tag is not None:
        _check_tags([tag], "params.tag")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise UserInputError("params.value", f"expected a positive number, got {value!r}")
    return NamedReward(
        "correctness_reward", score_correctness,
        answer_column=answer_column, tag=tag, value=float(value), ignore_case=bool(ignore_case),
    )


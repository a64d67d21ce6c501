"""Math-equivalence reward through math-verify, by way of TRL's own `trl.rewards.accuracy_reward`.

TRL's reward reads LaTeX (`\\boxed{...}` or `$...$`) from the whole completion. With a tag set (default
`answer`), the single tag block is the answer and is handed to TRL as `\\boxed{<answer>}`, so
`<answer>0.5</answer>` matches a gold `\\frac{1}{2}`.
"""

from __future__ import annotations

from mcp_server.errors import UserInputError
from mcp_server.rewards.declared import Column
from mcp_server.rewards.named import NamedReward
from mcp_server.rewards.text import column, completion_texts, single_tag


def score_math(completions: list, columns: dict, answer_column: str = "answer", tag: str | None = "answer",
               value: float = 2.0) -> list[float]:
    from trl.rewards import accuracy_reward  # imports math-verify; heavy, so only when scoring

    texts = completion_texts(completions)
    golds = column(columns, answer_column, len(texts), "params.answer_column")
    answers = []
    for text in texts:
        if tag is None:
            answers.append(text)
            continue
        answer = single_tag(text, tag)
        if answer is None:
            answers.append("")  # no single answer block: nothing to verify, scores 0
        elif "\\boxed" in answer or "$" in answer:
            answers.append(answer)
        else:
            answers.append("\\boxed{" + answer + "}")
    results = accuracy_reward(
        [[{"role": "assistant", "content": a}] for a in answers],
        solution=[str(g) for g in golds],
        log_extra=columns.get("log_extra"),  # TRL's completions table then shows gold and parsed answers
    )
    # TRL returns None for a gold answer math-verify cannot parse (skip); our contract is list[float]: 0.
    return [value * float(r) if r is not None else 0.0 for r in results]


def make_math_reward(answer_column: Column = "answer", tag: str | None = "answer", value: float = 2.0) -> NamedReward:
    r"""`value` (2.0) when math-verify finds the answer mathematically equivalent to the gold column (0.5 =
    \frac{1}{2}, 1e3 = 1000), else 0.0; through TRL's trl.rewards.accuracy_reward. With `tag` the single tag block is
    the answer; with tag null, LaTeX (\boxed{} or $...$) anywhere in the completion.

    Role: task, scores 0 to value

    Args:
        answer_column: Data set column holding the gold answer (LaTeX or plain).
        tag: Tag whose body is the answer; null reads \boxed{}/$...$ from the whole completion.
        value: Reward for an equivalent answer.
    """
    if not isinstance(answer_column, str) or not answer_column:
        raise UserInputError("params.answer_column", f"expected a column name, got {answer_column!r}")
    if tag is not None and (not isinstance(tag, str) or not tag.isidentifier()):
        raise UserInputError("params.tag", f"expected a tag name like 'answer' or null (whole completion), got {tag!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise UserInputError("params.value", f"expected a positive number, got {value!r}")
    return NamedReward("math_reward", score_math, answer_column=answer_column, tag=tag, value=float(value))


"""Reading completions: plain strings or conversational messages, tags, dataset columns.

Every reward in this package goes through these helpers, so all of them accept both completion
formats TRL produces: a string (standard data sets) or a list of messages (conversational data sets,
where the completion is `[{"role": "assistant", "content": ...}]`, possibly with tool turns).
"""

from __future__ import annotations

import re
from typing import Any

from mcp_server.errors import UserInputError


def _content_text(content: Any) -> str:
    # Multimodal messages carry a list of parts: keep the text parts.
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type", "text") == "text")
    return "" if content is None else str(content)


def completion_text(completion: Any) -> str:
    """The text of one completion: the string itself, or the last assistant message's content."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content_text(completion.get("content"))
    if isinstance(completion, (list, tuple)):
        messages = [m for m in completion if isinstance(m, dict)]
        assistant = [m for m in messages if m.get("role", "assistant") == "assistant"]
        chosen = assistant or messages
        return _content_text(chosen[-1].get("content")) if chosen else ""
    return "" if completion is None else str(completion)


def completion_texts(completions: list) -> list[str]:
    return [completion_text(c) for c in completions]


def tag_contents(text: str, tag: str) -> list[str]:
    """Every `<tag>...</tag>` body in `text`, in order (non-greedy, spanning lines)."""
    return re.findall(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", text, flags=re.DOTALL)


def single_tag(text: str, tag: str) -> str | None:
    """The body of the one `<tag>` block, or None when there is none or more than one.

    More than one answer block counts as no answer: otherwise a policy learns to hedge by listing
    several answers and one of them matches.
    """
    found = tag_contents(text, tag)
    return found[0].strip() if len(found) == 1 else None


# Every fenced block, its tag and body, paired opening to closing: a closing fence is never read as an opening one
# (the prose after a ```js block is no code, and no JSON either).
_FENCE = re.compile(r"```[ \t]*([^\s`]*)[ \t]*\n(.*?)```", flags=re.DOTALL)


def fenced_blocks(text: str, tags: tuple[str, ...]) -> list[str]:
    """The bodies of the complete fenced blocks in `text` whose tag (any case; "" for none) is one of `tags`, in
    order: the one reading of fences the rewards share (code_execution_reward's code, json_schema_reward's JSON)."""
    return [body for tag, body in _FENCE.findall(text) if tag.lower() in tags]


def column(columns: dict, name: str, n: int, param: str) -> list:
    """The dataset column `name` (one value per completion), or a clear error naming the parameter."""
    if name not in columns:
        available = sorted(
            k
            for k in columns
            if k not in ("prompts", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments")
        )
        raise UserInputError(
            param,
            f"the data set has no column '{name}' (columns passed to the reward: {', '.join(available) or 'none'}); "
            f"set {param} to the column holding it",
        )
    values = columns[name]
    if not isinstance(values, (list, tuple)) or len(values) != n:
        got = len(values) if isinstance(values, (list, tuple)) else type(values).__name__
        raise UserInputError(param, f"column '{name}' must hold one value per completion ({n}), got {got}")
    return list(values)

"""Hybrid thinking models (Qwen3-style): the chat-template switch and a completion budget that fits the mode.

A hybrid model's chat template reads `enable_thinking` and thinks by default. GRPO renders prompts with that
template (`chat_template_kwargs` in GRPOConfig), so an unset switch means thinking on, and thinking traces run
to thousands of tokens: at TRL's default `max_completion_length` of 512 nearly every completion is truncated
and scores as a failure. The emitted config therefore sets the switch on purpose and a length for the mode.
Known offline: the chat template of a local or cached model, else the model's name.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from mcp_server.config import FIELD
from mcp_server.config.recipe import Recipe
from mcp_server.model_ref import cached_config_path
from mcp_server.recipe.scoped import scoped

# Hybrid families whose template takes enable_thinking. Qwen3's 2507 releases are single-mode (Instruct never
# thinks, Thinking always does), so they take no switch.
_HYBRID_NAME = re.compile(r"(qwen3-(\d+(\.\d+)?b|\d+b-a\d+b)(-base|-fp8|-awq)?$|smollm3|glm-4\.5)", re.I)

COMPLETION_LENGTH = {
    False: (1024, "thinking off: direct answers take a few hundred tokens; 1024 leaves room without paying for traces"),
    True: (8192, "thinking on: traces run to thousands of tokens; at TRL's 512 nearly every completion is truncated "
                 "and scores as a failure"),
}


def _template_text(model: str) -> str | None:
    """The chat template of a local or cached model (tokenizer_config.json or chat_template.jinja)."""
    texts = []
    for name in ("tokenizer_config.json", "chat_template.jinja"):
        path = Path(model) / name
        if not path.is_file():
            config = cached_config_path(model)
            path = Path(config).with_name(name) if config else path
        if path.is_file():
            text = path.read_text(errors="replace")
            if name.endswith(".json"):
                try:
                    text = json.dumps(json.loads(text).get("chat_template") or "")
                except (ValueError, AttributeError):
                    continue
            texts.append(text)
    return "\n".join(texts) if texts else None


def has_chat_template(model: str) -> bool | None:
    """Whether a local or cached model's tokenizer has a chat template; None where its files are not here."""
    template = _template_text(model)
    return None if template is None else template.strip() not in ("", '""')


@scoped  # the lever search asks once per validation of one model
def is_hybrid_thinking(model: str) -> bool:
    """Whether the model's chat template switches thinking with `enable_thinking`."""
    template = _template_text(model)
    if template is not None:
        return "enable_thinking" in template
    return bool(_HYBRID_NAME.search(model.rstrip("/").split("/")[-1]))


def thinking_fields(model: str, thinking: bool | None) -> Recipe:
    """For a hybrid thinking model: the switch and max_completion_length for the mode. A model without the switch
    gets nothing (asking for thinking there is an error the caller raises)."""
    if not is_hybrid_thinking(model):
        return Recipe()
    on = bool(thinking)
    length, length_why = COMPLETION_LENGTH[on]
    switch_why = ("hybrid thinking model: its template thinks unless told not to; "
                  + ("thinking on, as requested" if on else "thinking off on purpose (request thinking=true for "
                     "reasoning traces, with a longer budget)"))
    switch, limit = FIELD.chat_template_kwargs, FIELD.max_completion_length
    return Recipe.of({switch: {"enable_thinking": on}, limit: length}, {switch: switch_why, limit: length_why}, "model")

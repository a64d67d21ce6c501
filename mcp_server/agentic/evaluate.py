"""Held-out tool-use success of a model on the embedded vault task: greedy, the model's own call parsed from its
chat template's `<tool_call>` JSON, the tool run, its result appended by the template, the answer read.
(TRL's loop samples; a paired comparison needs the same greedy decision on both sides.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

from mcp_server.agentic.tiny import VaultEnv
from mcp_server.model_ref import small_model_threads

CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


def _generate(model, tokenizer, messages: list[dict], tools: list, limit: int) -> str:
    batch = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, return_tensors="pt",
                                          return_dict=True)
    out = model.generate(**batch, max_new_tokens=limit, do_sample=False)
    return tokenizer.decode(out[0, batch["input_ids"].shape[1]:], skip_special_tokens=True)


def _solves(model, tokenizer, row: dict) -> bool:
    env = VaultEnv()
    env.reset(**row)
    tools = [env.open_vault]
    first = _generate(model, tokenizer, row["prompt"], tools, 24)
    match = CALL.search(first)
    try:
        call = json.loads(match.group(1)) if match else None
        result = env.open_vault(**call["arguments"]) if call and call.get("name") == "open_vault" else None
    except (ValueError, TypeError, KeyError):
        result = None
    if result is None:
        return False
    messages = [*row["prompt"], {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "open_vault", "arguments": call["arguments"]}}]},
        {"role": "tool", "name": "open_vault", "content": result}]
    return f"<answer>{row['answer']}</answer>" in _generate(model, tokenizer, messages, tools, 12)


def tool_use_success(model_dir: str | Path | None, rows: list[dict], loaded=None) -> list[bool]:
    """Whether the model solves each row with the tool (greedy), in order; `loaded`: (model, tokenizer) in memory
    instead of `model_dir`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if loaded is not None:
        model, tokenizer = loaded
    else:
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    with torch.no_grad(), small_model_threads(model):
        return [_solves(model, tokenizer, row) for row in rows]

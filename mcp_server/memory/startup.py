"""The start-up rehearsal, part two: what the model's architecture decides before the first step, read from its
config (a local directory, the HF cache, or the catalog: planner.resolve_architecture), never its weights.

- GRPOTrainer.__init__ (TRL 1.16): `if coef and not hasattr(text_config, "output_router_logits"): raise` -- a
  router_aux_loss_coef on a dense model (the planner's dense families: llama, mistral, qwen2/3, gemma2/3, phi3;
  their config classes in transformers 5 have no output_router_logits).
- vLLM's engine (vllm/config, ModelConfig, as TRL's colocated LLM(...) builds it): the attention heads must divide by
  the tensor-parallel size, and a max_model_len above the model's max_position_embeddings is refused.
The config-only part of the rehearsal is recipe.startup_rules.
"""

from __future__ import annotations

from mcp_server.errors import UserInputError
from mcp_server.memory.planner import architecture_of
from mcp_server.recipe.context import finding
from mcp_server.config.grpo_fields import GRPOView
from mcp_server.recipe.models import Finding


def startup_findings(values: dict) -> list[Finding]:
    given = GRPOView(values)
    if not GRPOView.given(values).model_name_or_path:
        return []
    try:
        model, arch = architecture_of(None, values)
    except (UserInputError, ValueError):
        return []  # unknown offline: the memory verdict says what was assumed
    out = []
    coef = given.router_aux_loss_coef
    if isinstance(coef, (int, float)) and not isinstance(coef, bool) and coef and not arch.is_moe:
        out.append(finding(
            "router_aux_loss_on_dense", "router_aux_loss_coef", "error",
            f"router_aux_loss_coef={coef:g} but {model} is a dense model: GRPOTrainer raises ValueError when it starts "
            "(no router logits, so no load-balancing loss to weight).", "remove router_aux_loss_coef"))
    if not given.use_vllm:
        return out
    tp = given.vllm_tensor_parallel_size
    heads = arch.num_attention_heads
    if given.vllm_mode == "colocate" and isinstance(tp, int) and tp > 1 and heads % tp:
        out.append(finding(
            "vllm_tensor_parallel_heads", "vllm_tensor_parallel_size", "error",
            f"vllm_tensor_parallel_size={tp} does not divide {model}'s {heads} attention heads: vLLM refuses the "
            "model when the engine starts ('Total number of attention heads must be divisible by tensor parallel "
            "size').", f"use a tensor-parallel size dividing {heads}"))
    length, context = given.vllm_max_model_length, arch.max_position_embeddings
    if isinstance(length, int) and not isinstance(length, bool) and context and length > context:
        out.append(finding(
            "vllm_context_beyond_model", "vllm_max_model_length", "error",
            f"vllm_max_model_length={length} is above {model}'s {context}-token context (max_position_embeddings): "
            "vLLM refuses a max_model_len beyond the derived one when the engine starts (unless "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN is set, and then positions past the context are ones the model never saw).",
            f"set vllm_max_model_length to at most {context}, or leave it unset (the model's context)"))
    return out

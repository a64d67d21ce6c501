"""Topic "architecture": what the model's architecture decides before the first step, read from its config (a
local directory, the HF cache, or the catalog: memory.planner.architecture_of, which memory.verdict.validate
supplies as ctx.architecture), never its weights. Every rule here needs "architecture"; a check of one config
change (the lever search, a patch) supplies none, and these rules do not run.

- The completion budget against the model's context (max_position_embeddings).
- The start-up rehearsal, part two (part one, from the config alone, is recipe.startup_rules):
  - GRPOTrainer.__init__ (TRL 1.16): `if coef and not hasattr(text_config, "output_router_logits"): raise` -- a
    router_aux_loss_coef on a dense model (the planner's dense families: llama, mistral, qwen2/3, gemma2/3, phi3;
    their config classes in transformers 5 have no output_router_logits).
  - vLLM's engine (vllm/config, ModelConfig, as TRL's colocated LLM(...) builds it): the attention heads must divide
    by the tensor-parallel size, and a max_model_len above the model's max_position_embeddings is refused.
- vLLM's CPU attention's head sizes, on a CPU target.
"""

from __future__ import annotations

from mcp_server.config import FIELD
from mcp_server.config.grpo_fields import GRPOView
from mcp_server.recipe.context import Context, Rule, finding
from mcp_server.recipe.models import Finding


def rule_completion_beyond_context(ctx: Context) -> list[Finding]:
    """max_completion_length against the model's context (max_position_embeddings)."""
    length = ctx.given.max_completion_length
    if not isinstance(length, int) or isinstance(length, bool):
        return []
    model, arch = ctx.architecture
    context = arch.max_position_embeddings
    if not context or length < context:
        return []
    return [finding(
        "completion_beyond_context", FIELD.max_completion_length, "error",
        f"max_completion_length={length} is not below {model}'s {context}-token context (max_position_embeddings), "
        "which holds the prompt too: completions are cut at the context, and positions past it are ones the model "
        "never saw.", f"set max_completion_length below {context} minus the longest prompt, or use a long-context "
        "model")]


def rule_startup_architecture(ctx: Context) -> list[Finding]:
    """What GRPOTrainer.__init__ and vLLM's engine refuse for this model's architecture."""
    given = GRPOView(ctx.values)  # unset fields read as TRL's defaults from the field table
    model, arch = ctx.architecture
    out = []
    coef = given.router_aux_loss_coef
    if isinstance(coef, (int, float)) and not isinstance(coef, bool) and coef and not arch.is_moe:
        out.append(finding(
            "router_aux_loss_on_dense", FIELD.router_aux_loss_coef, "error",
            f"router_aux_loss_coef={coef:g} but {model} is a dense model: GRPOTrainer raises ValueError when it starts "
            "(no router logits, so no load-balancing loss to weight).", "remove router_aux_loss_coef"))
    if not given.use_vllm:
        return out
    tp = given.vllm_tensor_parallel_size
    heads = arch.num_attention_heads
    if given.vllm_mode == "colocate" and isinstance(tp, int) and tp > 1 and heads % tp:
        out.append(finding(
            "vllm_tensor_parallel_heads", FIELD.vllm_tensor_parallel_size, "error",
            f"vllm_tensor_parallel_size={tp} does not divide {model}'s {heads} attention heads: vLLM refuses the "
            "model when the engine starts ('Total number of attention heads must be divisible by tensor parallel "
            "size').", f"use a tensor-parallel size dividing {heads}"))
    length, context = given.vllm_max_model_length, arch.max_position_embeddings
    if isinstance(length, int) and not isinstance(length, bool) and context and length > context:
        out.append(finding(
            "vllm_context_beyond_model", FIELD.vllm_max_model_length, "error",
            f"vllm_max_model_length={length} is above {model}'s {context}-token context (max_position_embeddings): "
            "vLLM refuses a max_model_len beyond the derived one when the engine starts (unless "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN is set, and then positions past the context are ones the model never saw).",
            f"set vllm_max_model_length to at most {context}, or leave it unset (the model's context)"))
    return out


# The head sizes vLLM's CPU attention backend runs (vLLM 0.31.0, vllm/v1/attention/backends/cpu_attn.py
# get_supported_head_sizes); any other fails at the first generation: "Unsupported CPU attention configuration:
# head_dim=16".
VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def rule_vllm_cpu_head_size(ctx: Context) -> list[Finding]:
    """use_vllm on a CPU target: the model's head size must be one vLLM's CPU attention runs."""
    if ctx.gpu is not None or not ctx.given.use_vllm:
        return []
    model, arch = ctx.architecture  # supplied by memory.verdict.validate: RULES declares the need
    if arch.hd in VLLM_CPU_HEAD_SIZES:
        return []
    return [finding(
        "vllm_cpu_head_size", FIELD.use_vllm, "error",
        f"{model} has attention heads of {arch.hd} dimensions; vLLM's CPU attention runs only "
        f"{', '.join(map(str, VLLM_CPU_HEAD_SIZES))} (its first generation fails: \"Unsupported CPU attention "
        f"configuration: head_dim={arch.hd}\").", "set use_vllm: false on this CPU target, or use a model whose "
        "hidden_size / num_attention_heads is one of those")]


RULES = (Rule(rule_completion_beyond_context, needs=("architecture",)),
         Rule(rule_startup_architecture, needs=("architecture",)),
         Rule(rule_vllm_cpu_head_size, needs=("architecture",)))

"""Model architectures and exact parameter counts, computed from the architecture numbers alone.

Counts follow the module layout of the transformers implementation of each family (embeddings, attention with
GQA and its biases, q/k norms, dense or mixture-of-experts MLP, norms, tied or separate LM head); the tests build
a small instance of every family with transformers and check the count equals `sum(p.numel())`.
No torch import here: the planner runs where the MCP server runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from mcp_server.inputs import Request

from mcp_server.errors import UserInputError
from mcp_server.model_ref import moe_expert_count
from mcp_server.userfiles import read_json

Family = Literal["llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "gemma2", "gemma3_text", "phi3", "gpt_oss"]
FAMILIES: tuple[str, ...] = Family.__args__  # type: ignore[attr-defined]

class Architecture(Request):
    """The numbers of a decoder-only transformer that decide its size and memory."""

    family: Family = Field(description="Architecture family (config.json model_type): llama, mistral, qwen2, qwen3, "
                           "qwen3_moe, gemma2, gemma3_text, phi3, gpt_oss.")
    hidden_size: int = Field(gt=0, description="Model width (hidden_size).")
    intermediate_size: int = Field(gt=0, description="Dense MLP width (intermediate_size).")
    num_hidden_layers: int = Field(gt=0, description="Number of decoder layers.")
    num_attention_heads: int = Field(gt=0, description="Query heads.")
    num_key_value_heads: int = Field(gt=0, description="Key/value heads (GQA); equal to query heads for MHA.")
    head_dim: int | None = Field(default=None, gt=0, description="Per-head width; default hidden_size / heads.")
    vocab_size: int = Field(gt=0, description="Vocabulary size (rows of the embedding and LM head).")
    tie_word_embeddings: bool = Field(default=False, description="LM head shares the embedding matrix.")
    attention_bias: bool | None = Field(
        default=None, description="Bias on attention projections; default per family (qwen2: q/k/v only; gpt_oss: all)."
    )
    mlp_bias: bool = Field(default=False, description="Bias on dense MLP projections (llama mlp_bias).")
    num_experts: int = Field(default=0, ge=0, description="Routed experts per MoE layer (0 for a dense model).")
    num_experts_per_tok: int = Field(default=0, ge=0, description="Experts each token is routed to (top-k).")
    moe_intermediate_size: int | None = Field(default=None, gt=0, description="Width of one expert's MLP.")
    mlp_only_layers: list[int] = Field(default_factory=list, description="Qwen3-MoE layers that use a dense MLP.")
    decoder_sparse_step: int = Field(default=1, ge=1, description="Qwen3-MoE: every n-th layer is sparse.")
    max_position_embeddings: int | None = Field(default=None, description="Longest context the model was trained for.")
    extra_params: int = Field(
        default=0, ge=0, description="Parameters outside the text decoder (e.g. a vision tower) that are still loaded."
    )

    # ------------------------------------------------------------------ derived
    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.hd

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.hd

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def expert_width(self) -> int:
        return self.moe_intermediate_size or self.intermediate_size

    def is_sparse_layer(self, i: int) -> bool:
        if not self.is_moe:
            return False
        if self.family == "qwen3_moe":
            return i not in self.mlp_only_layers and (i + 1) % self.decoder_sparse_step == 0
        return True

    @property
    def num_sparse_layers(self) -> int:
        if not self.is_moe:  # asked for every breakdown a plan tries: no walk over the layers of a dense model
            return 0
        return sum(self.is_sparse_layer(i) for i in range(self.num_hidden_layers))


class ParamCount(BaseModel):
    total: int = Field(description="All parameters (as sum(p.numel()) of the loaded model, plus extra_params).")
    embedding: int = Field(description="Input embedding parameters.")
    lm_head: int = Field(description="Separate LM head parameters (0 when tied to the embedding).")
    attention: int = Field(description="Attention parameters over all layers (projections, biases, norms, sinks).")
    mlp: int = Field(description="Dense MLP and MoE parameters over all layers (experts and routers included).")
    norms: int = Field(description="Layer norm parameters (per-layer and final).")
    experts: int = Field(description="Routed expert parameters (0 for a dense model).")
    active: int = Field(description="Parameters used per token (all but the unrouted experts).")
    linear: int = Field(description="Parameters in nn.Linear layers other than the LM head (what 4-bit QLoRA "
                                    "quantizes).")


def _attention_bias(arch: Architecture) -> tuple[bool, bool]:
    """(q/k/v bias, o bias) as the transformers implementation of the family builds them."""
    if arch.family == "qwen2":
        return True, False if arch.attention_bias is None else bool(arch.attention_bias)
    if arch.family == "gpt_oss":
        b = True if arch.attention_bias is None else arch.attention_bias
        return b, b
    b = bool(arch.attention_bias)
    return b, b


def attention_params_per_layer(arch: Architecture) -> int:
    h, q, kv = arch.hidden_size, arch.q_dim, arch.kv_dim
    n = h * q + 2 * h * kv + q * h
    qkv_bias, o_bias = _attention_bias(arch)
    if qkv_bias:
        n += q + 2 * kv
    if o_bias:
        n += h
    if arch.family in ("qwen3", "qwen3_moe", "gemma3_text"):
        n += 2 * arch.hd  # q_norm and k_norm over head_dim
    if arch.family == "gpt_oss":
        n += arch.num_attention_heads  # attention sinks
    return n


def norms_per_layer(arch: Architecture) -> int:
    per = 4 if arch.family in ("gemma2", "gemma3_text") else 2  # gemma adds pre/post feed-forward norms
    return per * arch.hidden_size


def dense_mlp_params(arch: Architecture, width: int | None = None) -> int:
    h, i = arch.hidden_size, width or arch.intermediate_size
    n = 3 * h * i
    if arch.mlp_bias:
        n += 2 * i + h
    return n


def expert_params(arch: Architecture) -> int:
    """One expert's parameters."""
    h, i = arch.hidden_size, arch.expert_width
    n = 3 * h * i
    if arch.family == "gpt_oss":
        n += 2 * i + h  # gate_up and down biases
    return n


def router_params(arch: Architecture) -> int:
    n = arch.num_experts * arch.hidden_size
    if arch.family == "gpt_oss":
        n += arch.num_experts
    return n


def count_params(arch: Architecture) -> ParamCount:
    h, v, layers = arch.hidden_size, arch.vocab_size, arch.num_hidden_layers
    embedding = v * h
    lm_head = 0 if arch.tie_word_embeddings else v * h
    attention = attention_params_per_layer(arch) * layers
    norms = norms_per_layer(arch) * layers + h
    sparse = arch.num_sparse_layers
    dense = layers - sparse
    experts = sparse * arch.num_experts * expert_params(arch)
    mlp = dense * dense_mlp_params(arch) + sparse * router_params(arch) + experts
    total = embedding + lm_head + attention + norms + mlp + arch.extra_params
    unrouted = sparse * max(arch.num_experts - arch.num_experts_per_tok, 0) * expert_params(arch)
    return ParamCount(
        total=total,
        embedding=embedding,
        lm_head=lm_head,
        attention=attention,
        mlp=mlp,
        norms=norms,
        experts=experts,
        active=total - unrouted,
        linear=sum(fan_in * fan_out * n for fan_in, fan_out, n in linear_modules(arch).values()),
    )


def linear_modules(arch: Architecture) -> dict[str, tuple[int, int, int]]:
    """nn.Linear modules of the decoder (LM head excluded), by module name: (in_features, out_features, count).

    These are what PEFT's 'all-linear' targets and what bitsandbytes quantizes. MoE experts and routers
    are plain parameters in transformers 5, not nn.Linear, so they are not listed.
    """
    h, q, kv, layers = arch.hidden_size, arch.q_dim, arch.kv_dim, arch.num_hidden_layers
    dense = layers - arch.num_sparse_layers
    out: dict[str, tuple[int, int, int]] = {}
    if arch.family == "phi3":
        out["qkv_proj"] = (h, q + 2 * kv, layers)
        out["o_proj"] = (q, h, layers)
        out["gate_up_proj"] = (h, 2 * arch.intermediate_size, layers)
        out["down_proj"] = (arch.intermediate_size, h, layers)
        return out
    out["q_proj"] = (h, q, layers)
    out["k_proj"] = (h, kv, layers)
    out["v_proj"] = (h, kv, layers)
    out["o_proj"] = (q, h, layers)
    if dense:
        out["gate_proj"] = (h, arch.intermediate_size, dense)
        out["up_proj"] = (h, arch.intermediate_size, dense)
        out["down_proj"] = (arch.intermediate_size, h, dense)
    return out


def lora_trainable_params(arch: Architecture, rank: int, target_modules: str | list[str]) -> int:
    """Trainable LoRA parameters: r * (in + out) per targeted linear module (PEFT's A and B matrices)."""
    modules = linear_modules(arch)
    if isinstance(target_modules, str):
        if target_modules == "all-linear":
            names = list(modules)
            if arch.family == "qwen3_moe":  # PEFT maps it to the attention projections + the expert tensors
                names = ["q_proj", "k_proj", "v_proj", "o_proj"]
        else:
            names = [target_modules]
    else:
        names = list(target_modules)
    unknown = [n for n in names if n not in modules and n not in _MOE_EXPERT_NAMES]
    if unknown:
        raise UserInputError(
            "lora_target_modules",
            f"{', '.join(unknown)} not a linear module of this {arch.family} model; known: "
            f"{', '.join(modules)} or 'all-linear'",
        )
    total = sum(rank * (modules[n][0] + modules[n][1]) * modules[n][2] for n in names if n in modules)
    if target_modules == "all-linear" and arch.family == "qwen3_moe" and arch.num_sparse_layers:
        # PEFT (>= 0.18) also wraps the fused expert tensors and the router of Qwen3-MoE under 'all-linear':
        # experts [E, out, in] get A (r*E x in) and B (out x r*E); gate_up_proj gets twice the rank.
        h, e, w = arch.hidden_size, arch.num_experts, arch.expert_width
        per_layer = rank * (h + e) + 2 * rank * e * (h + 2 * w) + rank * e * (w + h)
        total += per_layer * arch.num_sparse_layers
    return total


# Names people pass for MoE expert projections; in transformers 5 they are fused 3-D params, LoRA skips them.
_MOE_EXPERT_NAMES = {"gate_proj", "up_proj", "down_proj", "gate_up_proj", "w1", "w2", "w3"}


# ---------------------------------------------------------------------------- config.json
_FAMILY_OF_TYPE = {
    "llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3", "qwen3_moe": "qwen3_moe",
    "gemma2": "gemma2", "gemma3_text": "gemma3_text", "gemma3": "gemma3_text", "phi3": "phi3", "gpt_oss": "gpt_oss",
}


def generic_family(cfg: dict) -> str:
    """The layout a config of another model_type (Mixtral, GLM-4.5, Llama 4, ...) is counted with: Qwen3-MoE's
    (experts of moe_intermediate_size, q/k norms) when it has routed experts, else Llama's. Its attention, MLP and
    experts come from its own numbers; shared experts, biases and dense layers between expert layers are not counted
    exactly (the plan says so: generic_layout_note; tests/test_run_keeping.py checks the count within 10%)."""
    return "qwen3_moe" if moe_expert_count(cfg) else "llama"


def generic_layout_note(cfg: dict) -> str | None:
    """The plan's note for a config counted with a generic layout, None for a family counted exactly."""
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    model_type = text.get("model_type") or (f"{cfg.get('model_type')}_text" if text is not cfg else None)
    if model_type in _FAMILY_OF_TYPE or cfg.get("model_type") in _FAMILY_OF_TYPE:
        return None
    return (f"model_type '{cfg.get('model_type')}' is not a family the planner counts exactly: planned from its "
            f"config's numbers with the {generic_family(text)} layout: shared experts, biases and dense layers "
            "between expert layers are not counted exactly (within 10% on Mixtral- and GLM-4.5-shaped configs)")


def architecture_from_config(cfg: dict, source: str = "config.json") -> Architecture:
    """An Architecture from a transformers config.json dict (multimodal configs: the text_config)."""
    model_type = cfg.get("model_type")
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else None
    if text is not None:
        text = {**text}
        text.setdefault("model_type", f"{model_type}_text" if model_type else None)
        text.setdefault("tie_word_embeddings", cfg.get("tie_word_embeddings", text.get("tie_word_embeddings")))
        cfg = text
        model_type = text.get("model_type")
    family = _FAMILY_OF_TYPE.get(model_type or "") or generic_family(cfg)
    tie_default = family in ("gemma2", "gemma3_text")
    try:
        return Architecture(
            family=family,
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg.get("intermediate_size") or cfg.get("moe_intermediate_size"),
            num_hidden_layers=cfg["num_hidden_layers"],
            num_attention_heads=cfg["num_attention_heads"],
            num_key_value_heads=cfg.get("num_key_value_heads") or cfg["num_attention_heads"],
            head_dim=cfg.get("head_dim"),
            vocab_size=cfg["vocab_size"],
            tie_word_embeddings=cfg.get("tie_word_embeddings", tie_default)
            if cfg.get("tie_word_embeddings") is not None else tie_default,
            attention_bias=cfg.get("attention_bias"),
            mlp_bias=bool(cfg.get("mlp_bias", False)),
            num_experts=cfg.get("num_experts") or cfg.get("num_local_experts") or moe_expert_count(cfg),
            num_experts_per_tok=cfg.get("num_experts_per_tok") or 0,
            moe_intermediate_size=cfg.get("moe_intermediate_size")
            or (cfg.get("intermediate_size") if family == "gpt_oss" else None),
            mlp_only_layers=cfg.get("mlp_only_layers") or [],
            decoder_sparse_step=cfg.get("decoder_sparse_step") or 1,
            max_position_embeddings=cfg.get("max_position_embeddings"),
        )
    except KeyError as exc:
        raise UserInputError(source, f"missing architecture field {exc}") from None


def load_local_architecture(path: str) -> Architecture | None:
    """Architecture of a local model directory or config.json file; None when the path does not exist."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "config.json"
        if not p.exists():
            raise UserInputError("model", f"{p.parent} is a directory without config.json")
    elif not (p.is_file() and p.suffix == ".json"):
        return None

    return architecture_from_config(read_json(p, "model", dict), source=str(p))

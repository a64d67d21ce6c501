"""The memory vLLM asks for on a CPU (its CPU build), checked before a launch: what vLLM itself refuses at start-up.

vLLM's CPU worker (vllm/v1/worker/cpu_worker.py, vLLM 0.31.0) reads gpu_memory_utilization as a share of the host's
RAM ("despite its name"): it refuses to start when that share is more than the memory available now, and its KV
cache is the share minus what the process already holds (runtime, weights; in colocate mode the trainer's own
policy too). With less than one sequence of max_model_len tokens of KV cache it refuses as on a GPU
(vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory). The estimate of what the process holds is a floor, so
a refusal here is one vLLM would make too.
"""

from __future__ import annotations

from mcp_server.config import FIELD
from mcp_server.memory.params import count_params
from mcp_server.memory.planner import architecture_of

GIB = 2**30
# The smallest resident memory seen in a vLLM CPU process before weights: 0.68 GiB "consumed by non-kv usages" for
# the tiny model in `trl vllm-serve` (vLLM 0.31.0 on 2 cores); the floor rounds it down.
RUNTIME_FLOOR_GIB = 0.5
VLLM_WEIGHT_BYTES = 2  # at least bf16 per parameter in vLLM's copy (float32 checkpoints load as float32)
POLICY_WEIGHT_BYTES = 4  # the trainer's float32 policy on a CPU, in the same process as a colocated vLLM


def one_sequence_kv_bytes(arch, max_model_len: int) -> int:
    """Keys and values of one sequence of max_model_len tokens, at 2 bytes (vLLM's smallest unquantized KV dtype)."""
    return 2 * arch.num_hidden_layers * arch.kv_dim * 2 * max_model_len


def cpu_vllm_problem(config: dict, share: float, total_bytes: int, available_bytes: int,
                     colocated: bool) -> str | None:
    """Why vLLM would refuse to start on this host with `share` of its `total_bytes` of RAM (None: it can start).
    `colocated`: vLLM runs inside the trainer's process (colocate mode), whose float32 policy counts against it."""
    requested = share * total_bytes
    field = "vllm_gpu_memory_utilization" if colocated else "the server's --gpu_memory_utilization"
    if requested > available_bytes:
        return (f"{field}={share:g} asks for {requested / GIB:.2f} GiB of this host's {total_bytes / GIB:.1f} GiB of "
                f"RAM, more than the {available_bytes / GIB:.2f} GiB available now: vLLM's CPU worker refuses to "
                "start")
    try:
        model, arch = architecture_of(None, config)
    except Exception:  # noqa: BLE001 - a model this host cannot read: vLLM's own check still runs
        return None
    params = count_params(arch).total
    held = RUNTIME_FLOOR_GIB * GIB + params * (VLLM_WEIGHT_BYTES + (POLICY_WEIGHT_BYTES if colocated else 0))
    max_len = config.get(FIELD.vllm_max_model_length) or arch.max_position_embeddings or 0
    need = one_sequence_kv_bytes(arch, int(max_len))
    kv_cache = requested - held
    if kv_cache >= need:
        return None
    unset = "" if config.get(FIELD.vllm_max_model_length) else " (vllm_max_model_length unset: the model's context)"
    return (f"{field}={share:g} reserves {requested / GIB:.2f} GiB of this host's RAM; the process holds at least "
            f"{held / GIB:.2f} GiB (runtime, {model}'s weights{', the trainer policy' if colocated else ''}), which "
            f"leaves {max(kv_cache, 0) / GIB:.2f} GiB of KV cache, less than the {need / GIB:.4f} GiB one sequence of "
            f"max_model_len {max_len} tokens needs{unset}: vLLM refuses to start")

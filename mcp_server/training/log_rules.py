"""Diagnosis rules that read the run's stdout log: environment failures (out of memory, NCCL timeouts, missing
packages) and the config patches that address them."""

from __future__ import annotations

import re

from mcp_server.training.diagnosis_context import Ctx, finding
from mcp_server.training.models import DiagnosisFinding, Evidence

LOG_PATTERNS: dict[str, re.Pattern] = {
    "cuda_out_of_memory": re.compile(
        r"torch\.(cuda\.)?OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED"),
    "vllm_out_of_memory": re.compile(
        r"No available memory for the cache blocks|less than desired GPU memory utilization|"
        r"larger than the maximum number of tokens that can be stored in KV cache|"
        r"(insufficient|not enough).{0,40}KV cache|KV cache.{0,40}(insufficient|not enough)", re.I),
    "nccl_timeout": re.compile(
        r"Watchdog caught collective operation timeout|ProcessGroupNCCL.{0,200}Timeout\(ms\)|"
        r"NCCL.{0,80}(timed out|timeout)|collective operation timeout", re.I),
    "import_error": re.compile(r"^\s*(?:\w+\.)*(ModuleNotFoundError|ImportError): .+$", re.M),
}


def log_hits(text: str, pattern: re.Pattern) -> list[tuple[int, str]]:
    lines = text.splitlines()
    return [(i + 1, line.strip()) for i, line in enumerate(lines) if pattern.search(line)]


def _in_vllm_traceback(text: str, line_number: int) -> bool:
    """A torch OOM raised inside vLLM's own frames is vLLM's allocation failing, not training's."""
    lines = text.splitlines()[max(0, line_number - 80):line_number]
    return any("/vllm/" in line or "vllm." in line and "File" in line for line in lines)


def log_line(number: int, line: str) -> Evidence:
    return Evidence(metric="log", value=f"line {number}: {line[:300]}")


def rule_environment(ctx: Ctx) -> list[DiagnosisFinding]:
    text = ctx.run.log_text
    if not text:
        return []
    out = []
    hits = {code: log_hits(text, pattern) for code, pattern in LOG_PATTERNS.items()}
    cuda = [h for h in hits["cuda_out_of_memory"] if not _in_vllm_traceback(text, h[0])]
    vllm_via_torch = [h for h in hits["cuda_out_of_memory"] if h not in cuda]
    if cuda:
        out.append(finding(
            "cuda_out_of_memory", "error", [log_line(*cuda[0])],
            "Training ran out of GPU memory. The patch is plan_memory's smallest set of levers that fits when the "
            "config and the GPU are known, else the first levers that are not on yet. Halving "
            "per_device_train_batch_size while doubling gradient_accumulation_steps keeps the groups "
            "(num_generations) and the generation batch unchanged.",
            memory_patch(ctx, cuda[0][1])))
    vllm_hits = hits["vllm_out_of_memory"] + vllm_via_torch
    if vllm_hits:
        out.append(finding(
            "vllm_out_of_memory", "error", [log_line(*vllm_hits[0])],
            "vLLM could not allocate its weights or KV cache. In colocate mode it shares the GPU with training: "
            "its share (vllm_gpu_memory_utilization) must fit beside training, and a short vllm_max_model_length "
            "(prompt + completion) shrinks the KV cache it needs. In server mode pass --gpu_memory_utilization "
            "to `trl vllm-serve` instead.",
            vllm_patch(ctx, vllm_hits[0][1])))
    if hits["nccl_timeout"]:
        timeout = ctx.get("ddp_timeout", 1800)
        out.append(finding(
            "nccl_timeout", "error", [log_line(*hits["nccl_timeout"][0])],
            "A distributed collective timed out: one rank was stuck (often in generation or waiting for a vLLM "
            "server) or had crashed. Look for the first error on any rank before anything else; raise ddp_timeout "
            "only when generation is legitimately long (the patch doubles it).",
            {"ddp_timeout": int(max(2 * float(timeout), 3600))}))
    if hits["import_error"]:
        number, line = hits["import_error"][0]
        module = re.search(r"No module named '([^']+)'|cannot import name '([^']+)'", line)
        name = next((g for g in module.groups() if g), None) if module else None
        out.append(finding(
            "import_error", "error", [log_line(number, line)],
            f"The training interpreter cannot import {name or 'a package'}: install it there "
            "(LLM_FINETUNING_PYTHON; check_environment lists the versions) or turn off the option that needs it. "
            "No config change installs a package; the patch only removes an optional dependency.",
            import_patch(ctx, name or line)))
    return out


def planned_memory_patch(ctx: Ctx, line: str) -> dict | None:
    """plan_memory's smallest set of levers that fits, for the run's config on its GPU (from request.json, else
    the capacity torch printed in the OOM message). None when the planner cannot say."""
    capacity = re.search(r"total capacity of ([\d.]+) GiB", line)
    gpu = ctx.run.request.get("gpu")
    if not ctx.config.get("model_name_or_path") or not (gpu or capacity):
        return None
    # Here, not at the top: the guard imports these rules in the trainer process, which never plans memory.
    from mcp_server.memory.models import MemoryPlanRequest
    from mcp_server.memory.planner import plan_memory

    try:
        plan = plan_memory(MemoryPlanRequest(
            config=ctx.config, gpu=None if capacity else gpu, num_gpus=ctx.run.request.get("num_gpus"),
            gpu_memory_gib=float(capacity.group(1)) if capacity else None))
    except Exception:  # an architecture or GPU the planner does not know: fall back to the fixed levers
        return None
    return dict(plan.recommended.patch) if plan.recommended and plan.recommended.patch else None


def memory_patch(ctx: Ctx, line: str = "") -> dict:
    """plan_memory's levers when it can plan the run; else the first two memory levers not yet on, cheapest
    first, the batch never."""
    planned = planned_memory_patch(ctx, line)
    if planned:
        return planned
    levers: list[dict] = []
    if ctx.get("use_vllm") and ctx.get("vllm_mode") == "colocate" and not ctx.get("vllm_enable_sleep_mode"):
        levers.append({"vllm_enable_sleep_mode": True})
    if not ctx.get("gradient_checkpointing", True):
        levers.append({"gradient_checkpointing": True})
    if (ctx.get("beta", 0.0) or 0) > 0:
        levers.append({"beta": 0.0})  # no reference model in memory
    length = ctx.get("max_completion_length", 512)
    if isinstance(length, int) and length > 256:
        levers.append({"max_completion_length": length // 2})
    patch: dict = {}
    for lever in levers[:2]:
        patch.update(lever)
    return patch


def vllm_patch(ctx: Ctx, line: str) -> dict:
    if not ctx.get("use_vllm") or ctx.get("vllm_mode") != "colocate":
        return {}
    share = float(ctx.get("vllm_gpu_memory_utilization", 0.3))
    patch: dict = {}
    if "less than desired" in line:  # training already holds the memory vLLM asked for
        patch["vllm_gpu_memory_utilization"] = round(max(0.1, share - 0.1), 2)
    else:  # the cache does not fit: ask for less context, and a little more memory
        patch["vllm_gpu_memory_utilization"] = round(min(0.9, share + 0.1), 2)
        length = ctx.get("max_completion_length", 512)
        if isinstance(length, int) and not ctx.get("vllm_max_model_length"):
            patch["vllm_max_model_length"] = length + 1024  # completion + a generous prompt budget
    if not ctx.get("vllm_enable_sleep_mode"):
        patch["vllm_enable_sleep_mode"] = True
    return patch


def import_patch(ctx: Ctx, missing: str) -> dict:
    """Only optional dependencies have a config way out: vLLM (generate with transformers) and flash-attn."""
    missing = missing.lower()
    if "vllm" in missing and ctx.get("use_vllm"):
        return {"use_vllm": False}
    if ("flash_attn" in missing or "flash-attn" in missing) and "flash" in str(
        ctx.config.get("attn_implementation", "")
    ):
        return {"attn_implementation": "sdpa"}
    return {}


# TRL calls every reward function from GRPOTrainer._calculate_rewards; an exception there ends the run.
REWARD_FRAME = re.compile(r'File "[^"]+", line \d+, in _calculate_rewards')
FRAME = re.compile(r'File "([^"]+)", line \d+, in (\w+)')
EXCEPTION_LINE = re.compile(r"^\s*(?:\w+\.)*\w*(Error|Exception|Interrupt|Exit)\b.*$")
TRL_ALL_NONE = "All reward functions returned None"


def rule_reward_errors(ctx: Ctx) -> list[DiagnosisFinding]:
    """A reward function that raised: the traceback runs through _calculate_rewards into the user's function."""
    text = ctx.run.log_text
    if not text or "_calculate_rewards" not in text:
        return []
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if REWARD_FRAME.search(line)), None)
    if start is None:
        return []
    func, end = None, None
    for i in range(start + 1, min(len(lines), start + 400)):
        frame = FRAME.search(lines[i])
        if frame and "/trl/" not in frame.group(1) and "/torch/" not in frame.group(1) and func is None:
            func = frame.group(2)
        if not lines[i].startswith((" ", "\t")) and EXCEPTION_LINE.match(lines[i]):
            end = i
            break
    if end is None:
        return []
    evidence = [log_line(start + 1, lines[start]), log_line(end + 1, lines[end])]
    return [finding("reward_function_error", "error", evidence,
                    f"The reward function {func or '(see the traceback)'} raised {lines[end].strip()[:200]!r} while "
                    "scoring completions, which ends the run. A reward must return a float (or None for a sample it "
                    "does not apply to) for any text, including empty, truncated or malformed completions: catch "
                    "what it cannot parse. Check it with inspect_rewards on samples; no config change fixes it.")]

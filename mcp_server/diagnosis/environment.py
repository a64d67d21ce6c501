"""Family 'environment': the run never really trained. Rules that read the stdout log (out of memory, NCCL
timeouts, missing packages) and the config patches that address them."""

from __future__ import annotations

import re

from mcp_server.config import FIELD, key_for
from mcp_server.diagnosis.context import (
    Ctx,
    finding,
    log_hits,
    log_line,
)
from mcp_server.diagnosis.models import DiagnosisFinding, Evidence
from mcp_server.runs import read_json_if_present


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
    # A write the disk refused (ENOSPC, EDQUOT, EFBIG): Python's words and errno, Rust's (safetensors: "(os error
    # 28)"), torch.save's legacy writer ("write(): fd 3 failed with File too large"), its zip writer's position
    # check after a short write (torch 2.x: "unexpected pos 704 vs 598") and its miniz error ("PytorchStreamWriter
    # failed writing file data/0: file write failed", "... writing central directory for archive ...").
    "disk_full": re.compile(r"No space left on device|Disk quota exceeded|\[Errno (28|122|27)\]|StorageFull|"
                            r"\(os error (28|122|27)\)|failed with File too large|unexpected pos \d+ vs \d+|"
                            r"PytorchStreamWriter failed writing"),
}


def _in_vllm_traceback(text: str, line_number: int) -> bool:
    """A torch OOM raised inside vLLM's own frames is vLLM's allocation failing, not training's."""
    lines = text.splitlines()[max(0, line_number - 80):line_number]
    return any("/vllm/" in line or "vllm." in line and "File" in line for line in lines)


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
        timeout = ctx.get(FIELD.ddp_timeout)
        out.append(finding(
            "nccl_timeout", "error", [log_line(*hits["nccl_timeout"][0])],
            "A distributed collective timed out: one rank was stuck (often in generation or waiting for a vLLM "
            "server) or had crashed. Look for the first error on any rank before anything else; raise ddp_timeout "
            "only when generation is legitimately long (the patch doubles it).",
            {FIELD.ddp_timeout: int(max(2 * float(timeout), 3600))}))
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
    if hits["disk_full"]:
        out.append(finding(
            "disk_full", "error", [log_line(*hits["disk_full"][0])],
            "A write was refused for lack of disk space (or quota): usually a checkpoint save, which ends the run "
            "and may leave that checkpoint incomplete. Free space where output_dir is (check_environment shows the "
            "free disk); the patch keeps only the latest checkpoint. Resume from the last complete checkpoint.",
            {} if ctx.config.get(FIELD.save_total_limit) == 1 else {FIELD.save_total_limit: 1}))
    return out


def planned_memory_patch(ctx: Ctx, line: str) -> dict | None:
    """plan_memory's smallest set of levers that fits, for the run's config on its GPU (from request.json, else
    the capacity torch printed in the OOM message). None when the planner cannot say."""
    capacity = re.search(r"total capacity of ([\d.]+) GiB", line)
    gpu = ctx.run.request.gpu
    if not ctx.config.get(FIELD.model_name_or_path) or not (gpu or capacity):
        return None
    # Here, not at the top: the guard imports these rules in the trainer process, which never plans memory.
    from mcp_server.config.target import Target
    from mcp_server.memory.planner import plan
    from mcp_server.recipe.runspec import RunSpec

    run = RunSpec(values=dict(ctx.config), target=Target(None if capacity else gpu, ctx.run.request.num_gpus))
    try:
        memory = plan(run, gpu_memory_gib=float(capacity.group(1)) if capacity else None, validate_levers=True)
    except Exception:  # an architecture or GPU the planner does not know: fall back to the fixed levers
        return None
    return dict(memory.recommended.patch) if memory.recommended and memory.recommended.patch else None


def memory_patch(ctx: Ctx, line: str = "") -> dict:
    """plan_memory's levers when it can plan the run; else the first two memory levers not yet on, cheapest
    first, the batch never."""
    planned = planned_memory_patch(ctx, line)
    if planned:
        return planned
    levers: list[dict] = []
    if ctx.get(FIELD.use_vllm) and ctx.get(FIELD.vllm_mode) == "colocate" and not ctx.get(FIELD.vllm_enable_sleep_mode):
        levers.append({FIELD.vllm_enable_sleep_mode: True})
    if ctx.view.gradient_checkpointing is False:  # either name of the pair (config.GRPOView's ALIASES)
        levers.append({key_for(ctx.config, FIELD.gradient_checkpointing): True})
    if (ctx.get(FIELD.beta, 0.0) or 0) > 0:
        levers.append({FIELD.beta: 0.0})  # no reference model in memory
    length = ctx.view.max_completion_length
    if isinstance(length, int) and length > 256:
        levers.append({FIELD.max_completion_length: length // 2})
    patch: dict = {}
    for lever in levers[:2]:
        patch.update(lever)
    return patch


def vllm_patch(ctx: Ctx, line: str) -> dict:
    if not ctx.get(FIELD.use_vllm) or ctx.get(FIELD.vllm_mode) != "colocate":
        return {}
    share = float(ctx.get(FIELD.vllm_gpu_memory_utilization))
    patch: dict = {}
    if "less than desired" in line:  # training already holds the memory vLLM asked for
        patch[FIELD.vllm_gpu_memory_utilization] = round(max(0.1, share - 0.1), 2)
    else:  # the cache does not fit: ask for less context, and a little more memory
        patch[FIELD.vllm_gpu_memory_utilization] = round(min(0.9, share + 0.1), 2)
        length = ctx.view.max_completion_length
        if isinstance(length, int) and not ctx.get(FIELD.vllm_max_model_length):
            patch[FIELD.vllm_max_model_length] = length + 1024  # completion + a generous prompt budget
    if not ctx.get(FIELD.vllm_enable_sleep_mode):
        patch[FIELD.vllm_enable_sleep_mode] = True
    return patch


def import_patch(ctx: Ctx, missing: str) -> dict:
    """Only optional dependencies have a config way out: vLLM (generate with transformers) and flash-attn."""
    missing = missing.lower()
    if "vllm" in missing and ctx.get(FIELD.use_vllm):
        return {FIELD.use_vllm: False}
    if ("flash_attn" in missing or "flash-attn" in missing) and "flash" in str(
        ctx.config.get(FIELD.attn_implementation, "")
    ):
        return {FIELD.attn_implementation: "sdpa"}
    return {}


def training_ended(run) -> tuple[int, int] | None:
    """(the step the last launch began at, the step it ended at) once it has ended (its train-summary.json is
    written after its train-begin.json), None while it trains or when unreadable (the guard asks at every log:
    one stat)."""
    if run is None or not run.train_summary.is_file():
        return None
    try:
        begin, summary = read_json_if_present(run.train_begin), read_json_if_present(run.train_summary)
        if run.train_summary.stat().st_mtime < run.train_begin.stat().st_mtime:
            return None  # the summary of an earlier launch: this one (a resume) has not ended yet
    except Exception:
        return None
    if not isinstance(begin, dict) or not isinstance(summary, dict):
        return None
    start, end = begin.get("global_step"), summary.get("step")
    return (start, end) if isinstance(start, int) and isinstance(end, int) else None


def rule_no_steps(ctx: Ctx) -> list[DiagnosisFinding]:
    """The trainer finished without a single optimizer step (train-summary.json at the step it began from): most
    often a data set smaller than one generation batch (TRL's sampler yields no batch)."""
    run = ctx.run.home
    if run is None:
        return []
    ended = training_ended(run)
    if ended is None:
        return []
    start, end = ended
    if end > start:
        return []
    batch = ctx.get(FIELD.generation_batch_size) or (
        int(ctx.get(FIELD.per_device_train_batch_size) or 8) * int(ctx.get(FIELD.steps_per_generation) or
                                                                    ctx.get(FIELD.gradient_accumulation_steps, 1) or 1))
    evidence = [Evidence(metric="train-summary step", value=end), Evidence(metric="train-begin step", value=start),
                Evidence(metric="generation batch (completions)", value=batch)]
    return [finding("no_steps_trained", "error", evidence,
                    f"Training ended at step {end}, where it began: not one optimizer step was taken, so nothing was "
                    f"learned. The usual cause is a data set with fewer prompts than one generation batch needs "
                    f"({batch} completions / num_generations prompts; TRL's sampler then yields no batch), or "
                    "max_steps no higher than the checkpoint resumed from. Use more prompts or a smaller "
                    "steps_per_generation / per_device_train_batch_size; no run has succeeded.")]


def rule_config_not_the_runs(ctx: Ctx) -> list[DiagnosisFinding]:
    """The metrics log `kl` while the config read says beta 0. TRL 1.16 computes and logs kl only when beta != 0
    (trl/trainer/grpo_trainer.py: `if self.beta != 0.0: self._metrics[mode]["kl"].append(...)`), so the run
    trained with another config than the one read: every finding that reads the config may be wrong."""
    if not ctx.config:
        return []
    beta = ctx.get(FIELD.beta)
    kl = ctx.finite_series("kl")
    if not kl or not isinstance(beta, (int, float)) or beta != 0:
        return []
    how = "beta: 0" if FIELD.beta in ctx.config else "no beta (TRL's default, 0)"
    where = str(ctx.run.config_path) if ctx.run.config_path else "the config given"
    return [finding("config_not_the_runs", "warning", [
        Evidence(metric="beta (config)" if FIELD.beta in ctx.config else "beta (TRL default)", value=beta),
        Evidence(metric="kl", step=kl[0][0], value=kl[0][1]), Evidence(metric="kl", step=kl[-1][0], value=kl[-1][1])],
        f"The metrics log kl ({len(kl)} logs), but the config read ({where}) has {how}. TRL 1.16 computes and logs "
        "kl only when beta is not 0 (grpo_trainer.py), so this run trained with another config: a later edit, "
        "another run's file, or a launcher that overrode it. Every finding that reads the config (learning rate, "
        "beta, clip bounds, generation structure) and every patch's check may be wrong: pass the config the run "
        "was launched with (config_path, or the checkpoint's saved training arguments) and diagnose again.")]

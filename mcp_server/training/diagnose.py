"""diagnose_run: what is wrong with a training run, from its logged metrics, config and stdout log.

Each rule reads the run and returns findings {code, severity, evidence, explanation, patch}. A patch is a dict
of config changes; it is merged into the run's config (or the recipe's default when the config is unknown) and
checked with the recipe validator, so an agent can apply it as it stands. Codes are stable; their meanings
and fixes are in references/failure-triage.md.

Light at import (stdlib + pydantic): the MCP server imports this module's models at start-up. The validator
(which imports TRL) is imported only when patches are checked.
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, Field

from mcp_server.inputs import PathText, Request

from mcp_server.training.metrics import LoadedRun, load_run

Severity = Literal["error", "warning", "info"]
SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}

# Stable codes, in triage order (references/failure-triage.md): environment, divergence (itself in the
# skill's order), GRPO signal, variant symptoms, reward hacking, information.
CODES: dict[str, str] = {
    "cuda_out_of_memory": "the training process ran out of GPU memory (torch OutOfMemoryError in the log)",
    "vllm_out_of_memory": "vLLM could not allocate its weights or KV cache",
    "nccl_timeout": "a distributed collective timed out (NCCL watchdog)",
    "import_error": "a package the run needs is missing or broken (ImportError / ModuleNotFoundError)",
    "fp16_divergence": "fp16 on a GPU with bf16 (diverged, or at risk of diverging)",
    "lr_out_of_range": "learning rate outside GRPO's settled range for the fine-tuning mode",
    "nan_loss": "loss or gradient norm became NaN/inf",
    "grad_norm_spike": "grad_norm jumped an order of magnitude over its running level",
    "kl_explosion": "KL to the reference model grew large",
    "no_reward_signal": "groups get identical rewards (frac_reward_zero_std near 1 / reward_std 0): no advantage",
    "completions_truncated": "completions hit max_completion_length (clipped_ratio high)",
    "reward_flat": "the mean reward does not move over many steps although rewards vary within groups",
    "entropy_collapse": "policy entropy fell fast (-> DAPO)",
    "length_reward_correlation": "completion length rises with the reward (-> Dr.GRPO)",
    "moe_without_gspo": "mixture-of-experts model with token-level importance ratios (-> GSPO)",
    "possible_reward_hacking": "one reward component climbs while correctness (or KL) says otherwise",
    "loss_near_zero_expected": "GRPO loss near zero at the start: normal, not a bug (info)",
}
CODE_RANK = {code: i for i, code in enumerate(CODES)}

# Thresholds (why each value: see the rule using it).
SPIKE_FACTOR = 10.0
SPIKE_FLOOR = 1.0
KL_WARN, KL_ERROR = 1.0, 5.0
ZERO_STD_ERROR, ZERO_STD_WARN = 0.9, 0.75
CLIPPED_WARN, CLIPPED_ERROR = 0.5, 0.9
FLAT_MIN_POINTS = 20
ENTROPY_DROP = 0.4
LENGTH_CORR, LENGTH_RISE = 0.8, 1.15
LOSS_ZERO = 0.01
CORRECTNESS_NAME = re.compile(r"correct|accura|math|answer|exact|verif|equiv|pass|solution|test", re.I)


# ---------------------------------------------------------------- the result
class Evidence(BaseModel):
    metric: str = Field(description="TRL metric name (e.g. 'kl', 'completions/clipped_ratio'), a config field, or 'log'.")
    step: int | None = Field(default=None, description="Optimizer step of the value; null for config values and log lines.")
    value: float | int | str | bool | None = Field(
        description="The value seen: a number ('nan'/'inf' as text), a config value, or the log line."
    )


class DiagnosisFinding(BaseModel):
    code: str = Field(description="Stable snake_case code (see references/failure-triage.md).")
    severity: Severity = Field(description="error (the run is broken or wasting compute), warning, or info.")
    evidence: list[Evidence] = Field(default_factory=list, description="The metric values, config fields or log lines behind it.")
    explanation: str = Field(description="What the evidence means and what to do, in a few sentences.")
    patch: dict[str, Any] = Field(
        default_factory=dict,
        description="Config changes that address it, to merge into the run's config; empty when no config change "
        "fixes it (the explanation says what does).",
    )
    patch_valid: bool | None = Field(
        default=None,
        description="Whether the run's config with this patch merged validates (validate_grpo_config); null when "
        "the patch is empty or validation was not run.",
    )
    patch_problems: list[str] = Field(
        default_factory=list, description="Validation errors of the patched config, when patch_valid is false."
    )


class Diagnosis(BaseModel):
    source: str = Field(description="The source diagnosed, as resolved.")
    source_kind: str = Field(description="run_dir, progress_jsonl, trainer_state, csv, jsonl or log.")
    metrics_path: str | None = Field(default=None, description="The metrics file read.")
    config_path: str | None = Field(default=None, description="The run config read, when one was found or given.")
    log_path: str | None = Field(default=None, description="The stdout log read, when one was found or given.")
    steps_logged: int = Field(description="Number of logged training steps read.")
    last_step: int | None = Field(default=None, description="The latest logged optimizer step.")
    healthy: bool = Field(description="True when no finding is an error or a warning.")
    findings: list[DiagnosisFinding] = Field(
        default_factory=list, description="Most important first: errors before warnings before info, then triage order."
    )
    patches_checked_against: str | None = Field(
        default=None, description="The config the patches were merged into and validated against."
    )
    summary: str = Field(description="One line for people.")


class DiagnoseRequest(Request):
    source: PathText = Field(
        description="What to diagnose: a run directory (or its name under runs/), a progress.jsonl, a TRL "
        "trainer_state.json, a CSV/JSONL export of logged metrics with TRL's names, or a stdout log."
    )
    config_path: PathText | None = Field(
        default=None, description="The run's YAML config, when it is not the run directory's train/config.yaml."
    )
    log_path: PathText | None = Field(
        default=None, description="The run's stdout/stderr log, when it is not the run directory's train/logs/stdout.log."
    )
    validate_patches: bool = Field(
        default=True, description="Check every patch with the config validator (imports TRL; a few seconds)."
    )


# ---------------------------------------------------------------- small numeric helpers
def finite(values) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def shown(value: float) -> float | str:
    """A number for evidence: non-finite values as text (JSON has no NaN)."""
    return value if math.isfinite(value) else str(value)


def ends(values: list[float], fraction: float = 1 / 3) -> tuple[float, float]:
    """Mean of the first and of the last `fraction` of the values (at least one each)."""
    k = max(1, int(len(values) * fraction))
    return statistics.fmean(values[:k]), statistics.fmean(values[-k:])


def correlation(xs: list[float], ys: list[float]) -> float | None:
    try:
        return statistics.correlation(xs, ys)
    except (statistics.StatisticsError, ValueError):  # constant input or too few points
        return None


def slope(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares slope of value over step, and its standard error."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if not var or len(points) < 3:
        return 0.0, 0.0
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var
    residual = sum((y - my - b * (x - mx)) ** 2 for x, y in zip(xs, ys)) / (len(points) - 2)
    return b, math.sqrt(residual / var)


# ---------------------------------------------------------------- what the rules read
class Ctx:
    """The run plus derived facts several rules share."""

    def __init__(self, run: LoadedRun):
        self.run = run
        self.config = run.config or {}
        self._defaults: dict | None = None

    def get(self, key: str, fallback=None):
        """The config's value, else the installed TRL's default, else `fallback`."""
        if key in self.config:
            return self.config[key]
        if self._defaults is None:
            try:
                from mcp_server.recipe.trl_fields import trl_defaults

                self._defaults = trl_defaults()
            except Exception:  # no TRL here: the rules still run on the metrics alone
                self._defaults = {}
        value = self._defaults.get(key)
        return fallback if value is None else value

    def series(self, name: str) -> list[tuple[int, float]]:
        return self.run.series(name)

    def finite_series(self, name: str) -> list[tuple[int, float]]:
        return [(s, v) for s, v in self.series(name) if math.isfinite(v)]

    @property
    def fine_tune_mode(self) -> str | None:
        if not self.config:
            return None
        return "lora" if self.config.get("use_peft") or self.config.get("load_in_4bit") or self.config.get("load_in_8bit") else "full"

    @property
    def learning_rate(self) -> tuple[float | None, Evidence | None]:
        """The configured rate, else the peak logged one (after warm-up)."""
        lr = self.config.get("learning_rate")
        if isinstance(lr, (int, float)) and not isinstance(lr, bool):
            return float(lr), Evidence(metric="learning_rate (config)", value=float(lr))
        logged = self.finite_series("learning_rate")
        if logged:
            step, peak = max(logged, key=lambda p: p[1])
            return peak, Evidence(metric="learning_rate", step=step, value=peak)
        return None, None

    @property
    def gpu_has_bf16(self) -> bool | None:
        name = self.run.request.get("gpu")
        if not name or str(name).lower() == "cpu":
            return None
        try:
            from mcp_server.gpus import lookup_gpu

            return bool(lookup_gpu(str(name)).bf16)
        except Exception:
            return None

    def first_nonfinite(self, name: str) -> tuple[int, float] | None:
        return next(((s, v) for s, v in self.series(name) if not math.isfinite(v)), None)

    def grad_spikes(self) -> list[tuple[int, float, float]]:
        """(step, value, running level) where grad_norm exceeds SPIKE_FACTOR x the median of the previous
        (up to 10) non-zero values; a zero grad_norm (a batch with no advantage) is not a level."""
        out, history = [], []
        for step, value in self.finite_series("grad_norm"):
            level = statistics.median(history[-10:]) if len(history) >= 2 else None
            if level and value >= SPIKE_FLOOR and value > SPIKE_FACTOR * level:
                out.append((step, value, level))
            if value > 0:
                history.append(value)
        return out

    @property
    def diverged(self) -> bool:
        kl = finite(v for _, v in self.series("kl"))
        return bool(self.first_nonfinite("loss") or self.first_nonfinite("grad_norm") or self.grad_spikes()
                    or (kl and max(kl) >= KL_WARN))

    def lr_range(self) -> tuple[float, float]:
        from mcp_server.recipe.rules import LR_RANGE

        mode = self.fine_tune_mode
        if mode is None:  # unknown: the union, so neither a full nor a LoRA run is flagged wrongly
            return LR_RANGE["full"][0], LR_RANGE["lora"][1]
        return LR_RANGE[mode]

    def recipe_lr(self) -> float:
        from mcp_server.recipe.variants import BASE_RECIPE

        if self.fine_tune_mode == "lora":
            from mcp_server.emission.emit import LORA_LEARNING_RATE

            return LORA_LEARNING_RATE
        return BASE_RECIPE["learning_rate"]

    def divergence_patch(self) -> dict:
        """The triage order's fix for a diverging run: precision first, then the learning rate, then clipping."""
        patch: dict = {}
        if self.config.get("fp16") and self.gpu_has_bf16 is not False:
            patch.update(fp16=False, bf16=True)
        lr, _ = self.learning_rate
        if lr is not None:
            low, high = self.lr_range()
            patch["learning_rate"] = self.recipe_lr() if lr > high else max(lr / 4, low)
        grad_clip = self.config.get("max_grad_norm")
        if isinstance(grad_clip, (int, float)) and (grad_clip <= 0 or grad_clip > 1.0):
            patch["max_grad_norm"] = 1.0
        return patch

    def variant_patch(self, variant: str) -> dict:
        """The variant as emit_grpo_config writes it (the base recipe's loss_type unless the variant sets its
        own), less what the run already has."""
        from mcp_server.recipe.variants import BASE_RECIPE, VARIANTS

        wanted = {"loss_type": BASE_RECIPE["loss_type"], **VARIANTS[variant]}
        return {k: v for k, v in wanted.items() if self.config.get(k) != v}


def finding(code: str, severity: Severity, evidence: list[Evidence], explanation: str, patch: dict | None = None):
    return DiagnosisFinding(code=code, severity=severity, evidence=evidence, explanation=explanation, patch=patch or {})


# ---------------------------------------------------------------- environment (from the log)
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


def _log_hits(text: str, pattern: re.Pattern) -> list[tuple[int, str]]:
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
    hits = {code: _log_hits(text, pattern) for code, pattern in LOG_PATTERNS.items()}
    cuda = [h for h in hits["cuda_out_of_memory"] if not _in_vllm_traceback(text, h[0])]
    vllm_via_torch = [h for h in hits["cuda_out_of_memory"] if h not in cuda]
    if cuda:
        out.append(finding(
            "cuda_out_of_memory", "error", [log_line(*cuda[0])],
            "Training ran out of GPU memory. Apply the memory levers before touching the batch (shrinking "
            "per_device_train_batch_size changes how many completions form each group). The patch is plan_memory's "
            "smallest set of levers that fits when the config and the GPU are known, else the first levers that "
            "are not on yet.",
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
    try:
        from mcp_server.memory.models import MemoryPlanRequest
        from mcp_server.memory.planner import plan_memory

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
    if ("flash_attn" in missing or "flash-attn" in missing) and "flash" in str(ctx.config.get("attn_implementation", "")):
        return {"attn_implementation": "sdpa"}
    return {}


# ---------------------------------------------------------------- divergence, in the skill's order
def rule_fp16(ctx: Ctx) -> list[DiagnosisFinding]:
    if not ctx.config.get("fp16") or ctx.gpu_has_bf16 is False:
        return []
    evidence = [Evidence(metric="fp16 (config)", value=True)]
    gpu = ctx.run.request.get("gpu")
    where = f"the {gpu} supports bf16" if gpu and ctx.gpu_has_bf16 else "bf16 is available on every Ampere-or-newer GPU"
    if ctx.diverged:
        bad = ctx.first_nonfinite("loss") or ctx.first_nonfinite("grad_norm")
        if bad:
            evidence.append(Evidence(metric="loss" if ctx.first_nonfinite("loss") else "grad_norm", step=bad[0], value=shown(bad[1])))
        return [finding("fp16_divergence", "error", evidence,
                        f"The run trained in fp16 and diverged; {where}. fp16's narrow range overflows/underflows "
                        "GRPO's ratio and KL terms. Fix precision first, then re-check the learning rate.",
                        {"fp16": False, "bf16": True})]
    return [finding("fp16_divergence", "warning", evidence,
                    f"The run trains in fp16 where {where}; GRPO in fp16 diverges silently. Switch to bf16.",
                    {"fp16": False, "bf16": True})]


def rule_learning_rate(ctx: Ctx) -> list[DiagnosisFinding]:
    lr, evidence = ctx.learning_rate
    if lr is None:
        return []
    low, high = ctx.lr_range()
    if low <= lr <= high:
        return []
    mode = ctx.fine_tune_mode or "full or LoRA (the config is unknown)"
    recipe = ctx.recipe_lr()
    if lr > high:
        severe = ctx.diverged or lr > 10 * high
        what = "and the run diverged" if ctx.diverged else "far above it" if lr > 10 * high else "above it"
        return [finding("lr_out_of_range", "error" if severe else "warning", [evidence],
                        f"learning_rate={lr:g} is outside GRPO's settled range for {mode} fine-tuning ({low:g}-{high:g}), "
                        f"{what}. RL updates at supervised rates destroy the policy; the patch sets the recipe's rate.",
                        {"learning_rate": recipe})]
    return [finding("lr_out_of_range", "warning", [evidence],
                    f"learning_rate={lr:g} is below GRPO's settled range for {mode} fine-tuning ({low:g}-{high:g}): "
                    "the reward will barely move. The patch sets the recipe's rate.",
                    {"learning_rate": recipe})]


# A crash that only non-finite weights cause: sampling from NaN/inf probabilities.
NONFINITE_LOG = re.compile(r"probability tensor contains either `?inf`?, `?nan`? or element < 0|loss is nan|Loss is NaN", re.I)


def rule_nan(ctx: Ctx) -> list[DiagnosisFinding]:
    evidence = []
    for metric in ("loss", "grad_norm"):
        bad = ctx.first_nonfinite(metric)
        if bad:
            before = [(s, v) for s, v in ctx.finite_series(metric) if s < bad[0]]
            if before:
                evidence.append(Evidence(metric=metric, step=before[-1][0], value=before[-1][1]))
            evidence.append(Evidence(metric=metric, step=bad[0], value=shown(bad[1])))
    crash = _log_hits(ctx.run.log_text, NONFINITE_LOG)[:1] if ctx.run.log_text else []
    evidence += [log_line(*hit) for hit in crash]
    if not evidence:
        return []
    return [finding("nan_loss", "error", evidence,
                    "The loss or gradient norm became non-finite: every later update is garbage. It is nearly always "
                    "a consequence of precision or the learning rate (fix those first, in that order); resume from "
                    "the last checkpoint saved before the first non-finite step, not from a later one.",
                    ctx.divergence_patch())]


def rule_grad_spike(ctx: Ctx) -> list[DiagnosisFinding]:
    spikes = ctx.grad_spikes()
    if not spikes:
        return []
    step, value, level = max(spikes, key=lambda s: s[1] / s[2])
    evidence = [Evidence(metric="grad_norm (running median before)", step=step, value=round(level, 6)),
                Evidence(metric="grad_norm", step=step, value=value)]
    evidence += [Evidence(metric="grad_norm", step=s, value=v) for s, v, _ in spikes if s != step][:3]
    severe = len(spikes) >= 3 or value > 100 * level
    return [finding("grad_norm_spike", "error" if severe else "warning", evidence,
                    f"grad_norm reached {value:.3g} at step {step}, {value / level:.0f}x its running level "
                    f"({len(spikes)} spike(s)). Lower the learning rate and keep max_grad_norm at 1.0 or below; a few "
                    "prompts with extreme rewards can also cause it (scale the reward).",
                    ctx.divergence_patch())]


def rule_kl(ctx: Ctx) -> list[DiagnosisFinding]:
    kl = ctx.series("kl")
    if not kl:
        return []
    bad = next(((s, v) for s, v in kl if not math.isfinite(v)), None)
    top = max(((s, v) for s, v in kl if math.isfinite(v)), key=lambda p: p[1], default=None)
    if not bad and (top is None or top[1] < KL_WARN):
        return []
    first = kl[0]
    evidence = [Evidence(metric="kl", step=first[0], value=shown(first[1]))]
    peak = bad or top
    evidence.append(Evidence(metric="kl", step=peak[0], value=shown(peak[1])))
    severe = bad is not None or peak[1] >= KL_ERROR
    patch = ctx.divergence_patch()
    beta = float(ctx.get("beta", 0.0) or 0.0)
    if 0 < beta < 0.1:  # a stronger pull to the reference, up to a still-trainable 0.1
        patch["beta"] = round(min(2 * beta, 0.1), 6)
    return [finding("kl_explosion", "error" if severe else "warning", evidence,
                    f"KL to the reference model rose to {shown(peak[1])} by step {peak[0]} (healthy runs stay well "
                    "below 1): the policy is running away from the reference, often just before reward hacking. "
                    "Lower the learning rate, raise beta, and look at recent completions (sample_completions).",
                    patch)]


# ---------------------------------------------------------------- GRPO signal
def rule_no_signal(ctx: Ctx) -> list[DiagnosisFinding]:
    frac = ctx.finite_series("frac_reward_zero_std")
    std = ctx.finite_series("reward_std")
    if frac:
        share = statistics.fmean(v for _, v in frac)
        late = ends([v for _, v in frac], 0.5)[1]
        evidence = [Evidence(metric="frac_reward_zero_std", step=frac[0][0], value=frac[0][1]),
                    Evidence(metric="frac_reward_zero_std", step=frac[-1][0], value=frac[-1][1])]
    elif std:
        share = sum(v <= 1e-6 for _, v in std) / len(std)
        late = share
        evidence = []
    else:
        return []
    if std:
        evidence.append(Evidence(metric="reward_std", step=std[-1][0], value=std[-1][1]))
    if share < ZERO_STD_ERROR and late < ZERO_STD_WARN:
        return []
    rewards = finite(v for _, v in ctx.series("reward"))
    constant = bool(rewards) and max(rewards) - min(rewards) < 1e-9 and all(v <= 1e-6 for _, v in std)
    if constant:
        evidence.append(Evidence(metric="reward", step=ctx.series("reward")[-1][0], value=rewards[-1]))
        if rewards[0] == 0:
            why = ("Every completion scores 0: the task is too hard for the model, or the reward never matches "
                   "(a format the model does not produce). Check the base success rate from the inspection; SFT "
                   "first when it is zero. The patch samples more completions per prompt to find rare successes.")
        else:
            why = (f"The reward is constant ({rewards[0]:g}) for every completion: the reward function ignores the "
                   "completion (broken, or the task is already solved). No config change helps: fix the reward and "
                   "re-run the inspection gate.")
    else:
        why = ("Most groups give all their completions the same reward, so their advantage is zero and they "
               "teach nothing. Raise num_generations (the patch doubles it, keeping the prompts per batch), raise "
               "temperature, or make the reward graded (partial credit).")
    patch = {} if constant and rewards[0] != 0 else more_generations_patch(ctx)
    return [finding("no_reward_signal", "error" if share >= ZERO_STD_ERROR else "warning", evidence,
                    f"{share:.0%} of the groups had zero reward spread. " + why, patch)]


def more_generations_patch(ctx: Ctx) -> dict:
    """Twice the completions per prompt, the same prompts per batch: the generation batch doubles with it."""
    g = int(ctx.get("num_generations", 8))
    patch: dict = {"num_generations": 2 * g}
    if ctx.config.get("generation_batch_size"):
        patch["generation_batch_size"] = 2 * int(ctx.config["generation_batch_size"])
    else:
        steps = ctx.config.get("steps_per_generation") or ctx.get("gradient_accumulation_steps", 1)
        patch["steps_per_generation"] = 2 * int(steps)
    return patch


def rule_truncated(ctx: Ctx) -> list[DiagnosisFinding]:
    clipped = ctx.finite_series("completions/clipped_ratio")
    if not clipped:
        return []
    late = ends([v for _, v in clipped], 0.5)[1]
    if late < CLIPPED_WARN:
        return []
    evidence = [Evidence(metric="completions/clipped_ratio", step=clipped[-1][0], value=clipped[-1][1])]
    terminated = ctx.finite_series("completions/mean_terminated_length")
    if terminated:
        evidence.append(Evidence(metric="completions/mean_terminated_length", step=terminated[-1][0], value=terminated[-1][1]))
    length = ctx.config.get("max_completion_length")
    if length is None:
        observed = finite(v for _, v in ctx.series("completions/max_length"))
        length = int(max(observed)) if observed else ctx.get("max_completion_length", 512)
    else:
        evidence.append(Evidence(metric="max_completion_length (config)", value=length))
    severe = late >= CLIPPED_ERROR
    return [finding("completions_truncated", "error" if severe else "warning", evidence,
                    f"{late:.0%} of recent completions hit max_completion_length ({length}) before ending: answers are "
                    "cut off and scored as wrong, and the loss learns from broken text. Raise max_completion_length "
                    "(check memory with plan_memory) and mask truncated completions out of the loss (the DAPO fix), "
                    "or ask for shorter reasoning in the prompt.",
                    {"max_completion_length": int(length) * 2, "mask_truncated_completions": True})]


def rule_flat(ctx: Ctx) -> list[DiagnosisFinding]:
    reward = ctx.finite_series("reward")
    std = finite(v for _, v in ctx.series("reward_std"))
    if len(reward) < FLAT_MIN_POINTS or not std or statistics.fmean(std) <= 1e-6:
        return []  # too early to call it flat, or no signal at all (no_reward_signal says so)
    span = reward[-1][0] - reward[0][0]
    b, se = slope(reward)
    change, noise = b * span, se * span
    spread = statistics.fmean(std)
    # Flat: no significant upward trend (under two standard errors of the fitted change) and no sizeable one
    # either (a within-group std over the whole run).
    if change >= 2 * noise or change >= spread:
        return []
    early, late = ends([v for _, v in reward])
    evidence = [Evidence(metric="reward", step=reward[0][0], value=reward[0][1]),
                Evidence(metric="reward", step=reward[-1][0], value=reward[-1][1]),
                Evidence(metric="reward_std (mean)", value=round(spread, 6))]
    lr, _ = ctx.learning_rate
    low, high = ctx.lr_range()
    patch = {"learning_rate": min(2 * lr, high)} if lr and 2 * lr <= high else {}
    return [finding("reward_flat", "warning", evidence,
                    f"Over {span} steps the mean reward moved {change:+.3g} (first third {early:.3g}, last third "
                    f"{late:.3g}) although rewards vary within groups (mean reward_std {spread:.3g}). Check the "
                    "learning rate (too low?), whether a format reward drowns the task reward, and whether the model "
                    "can improve at all (base success rate). Train longer only if the trend is positive.",
                    patch)]


# ---------------------------------------------------------------- variant symptoms and reward hacking
def rule_entropy(ctx: Ctx) -> list[DiagnosisFinding]:
    entropy = ctx.finite_series("entropy")
    if len(entropy) < 4:
        return []
    early, late = ends([v for _, v in entropy], 0.25)
    if early <= 0 or late > ENTROPY_DROP * early:
        return []
    patch = ctx.variant_patch("dapo")
    return [finding("entropy_collapse", "warning",
                    [Evidence(metric="entropy", step=entropy[0][0], value=entropy[0][1]),
                     Evidence(metric="entropy", step=entropy[-1][0], value=entropy[-1][1])],
                    f"Policy entropy fell from {early:.3g} to {late:.3g}: samples become near-identical and exploration "
                    "stops. The DAPO variant's clip-higher (epsilon_high 0.28) keeps low-probability tokens explorable "
                    "(emit_grpo_config with symptom=entropy_collapse)."
                    + ("" if patch else " The run already uses DAPO's settings: lower the learning rate or raise temperature."),
                    patch)]


def rule_length(ctx: Ctx) -> list[DiagnosisFinding]:
    reward = dict(ctx.finite_series("reward"))
    length = dict(ctx.finite_series("completions/mean_length"))
    steps = sorted(set(reward) & set(length))
    if len(steps) < 5:
        return []
    rs, ls = [reward[s] for s in steps], [length[s] for s in steps]
    corr = correlation(rs, ls)
    l_early, l_late = ends(ls)
    r_early, r_late = ends(rs)
    if corr is None or corr < LENGTH_CORR or l_late < LENGTH_RISE * l_early or r_late <= r_early:
        return []
    evidence = [Evidence(metric="completions/mean_length", step=steps[0], value=ls[0]),
                Evidence(metric="completions/mean_length", step=steps[-1], value=ls[-1]),
                Evidence(metric="reward", step=steps[0], value=rs[0]),
                Evidence(metric="reward", step=steps[-1], value=rs[-1]),
                Evidence(metric="correlation(reward, completions/mean_length)", value=round(corr, 3))]
    patch = ctx.variant_patch("dr_grpo")
    tail = ("" if patch else " The run already uses Dr.GRPO: the reward itself pays for length; add a length_penalty "
            "to the reward and re-inspect.")
    return [finding("length_reward_correlation", "warning", evidence,
                    f"Completion length rose {l_early:.3g} -> {l_late:.3g} tokens together with the reward (correlation "
                    f"{corr:.2f}): the policy gains reward by growing longer. Dr.GRPO removes the loss's length "
                    "normalisation bias (emit_grpo_config with symptom=length_bias); check that no reward pays for "
                    "length itself." + tail,
                    patch)]


def rule_moe(ctx: Ctx) -> list[DiagnosisFinding]:
    model = ctx.config.get("model_name_or_path")
    if not model:
        return []
    from mcp_server.model_ref import is_moe

    if not is_moe(str(model)) or ctx.get("importance_sampling_level", "token") == "sequence":
        return []
    reason = ctx.run.request.get("override_reason")
    evidence = [Evidence(metric="model_name_or_path (config)", value=str(model)),
                Evidence(metric="importance_sampling_level (config)", value=str(ctx.get("importance_sampling_level", "token")))]
    if reason:
        return [finding("moe_without_gspo", "info", evidence, f"Mixture-of-experts model without GSPO, overridden: {reason}")]
    return [finding("moe_without_gspo", "error" if ctx.diverged else "warning", evidence,
                    "The policy is a mixture-of-experts model trained with token-level importance ratios: expert "
                    "routing changes between generation and training make those ratios noisy"
                    + (", and this run diverged" if ctx.diverged else "")
                    + ". GSPO's sequence-level ratios are stable under routing (emit_grpo_config with symptom=moe_instability).",
                    ctx.variant_patch("gspo"))]


def rule_hacking(ctx: Ctx) -> list[DiagnosisFinding]:
    names = sorted({k[len("rewards/"):-len("/mean")] for k in ctx.run.metric_names()
                    if k.startswith("rewards/") and k.endswith("/mean")})
    correctness = [n for n in names if CORRECTNESS_NAME.search(n)]
    others = [n for n in names if n not in correctness]
    evidence: list[Evidence] = []
    reasons = []
    if correctness and others:
        correct_change = {}
        for name in correctness:
            values = finite(v for _, v in ctx.series(f"rewards/{name}/mean"))
            if len(values) >= 4:
                early, late = ends(values)
                if late < 0.9:  # a correctness reward already near its 0/1 ceiling is not "stuck"
                    correct_change[name] = late - early
        for name in others:
            points = ctx.finite_series(f"rewards/{name}/mean")
            if len(points) < 4 or not correct_change:
                continue
            early, late = ends([v for _, v in points])
            spread = finite(v for _, v in ctx.series(f"rewards/{name}/std"))
            scale = max(statistics.fmean(spread) if spread else 0.0, 0.1 * abs(early), 1e-6)
            climbing = late - early > 0.5 * scale
            stuck = all(change <= 0.02 for change in correct_change.values())
            if climbing and stuck:
                evidence += [Evidence(metric=f"rewards/{name}/mean", step=points[0][0], value=points[0][1]),
                             Evidence(metric=f"rewards/{name}/mean", step=points[-1][0], value=points[-1][1])]
                reasons.append(f"'{name}' climbed {early:.3g} -> {late:.3g} while "
                               + ", ".join(f"'{c}' changed {d:+.3g}" for c, d in correct_change.items()))
        if reasons:  # the correctness side of the evidence, once
            for cname in correct_change:
                cpoints = ctx.finite_series(f"rewards/{cname}/mean")
                evidence += [Evidence(metric=f"rewards/{cname}/mean", step=cpoints[0][0], value=cpoints[0][1]),
                             Evidence(metric=f"rewards/{cname}/mean", step=cpoints[-1][0], value=cpoints[-1][1])]
    kl = ctx.finite_series("kl")
    reward = ctx.finite_series("reward")
    if kl and len(reward) >= 4 and max(v for _, v in kl) >= KL_WARN:
        r_early, r_late = ends([v for _, v in reward])
        if r_late > r_early:
            peak = max(kl, key=lambda p: p[1])
            evidence += [Evidence(metric="kl", step=peak[0], value=peak[1]),
                         Evidence(metric="reward", step=reward[-1][0], value=reward[-1][1])]
            reasons.append(f"KL jumped to {peak[1]:.3g} while the reward rose {r_early:.3g} -> {r_late:.3g}")
    if not reasons:
        return []
    return [finding("possible_reward_hacking", "warning", evidence,
                    "; ".join(reasons) + ". The policy may have found a way to score without doing the task. Stop the "
                    "run, sample completions from the latest checkpoint, fix the reward and pass the inspection gate "
                    "again; no config change fixes a reward that can be gamed.")]


def rule_loss_near_zero(ctx: Ctx) -> list[DiagnosisFinding]:
    loss = ctx.finite_series("loss")
    if not loss or not ctx.series("reward"):  # only GRPO runs log a reward
        return []
    start = loss[: min(3, len(loss))]
    if any(abs(v) > LOSS_ZERO for _, v in start):
        return []
    return [finding("loss_near_zero_expected", "info",
                    [Evidence(metric="loss", step=s, value=v) for s, v in start],
                    "GRPO's loss is near zero at the start: with group-normalised advantages the policy-gradient term "
                    "averages to about zero (and the KL term starts at zero). Normal, not a bug: watch reward, "
                    "reward_std and frac_reward_zero_std instead.")]


RULES: list[Callable[[Ctx], list[DiagnosisFinding]]] = [
    rule_environment, rule_fp16, rule_learning_rate, rule_nan, rule_grad_spike, rule_kl,
    rule_no_signal, rule_truncated, rule_flat, rule_entropy, rule_length, rule_moe, rule_hacking,
    rule_loss_near_zero,
]


# ---------------------------------------------------------------- patch validation
def validation_base(ctx: Ctx) -> tuple[dict, dict, str]:
    """(config, validator keyword arguments, description) the patches are merged into."""
    from mcp_server.recipe.models import default_rewards

    run = ctx.run
    request = run.request
    kwargs = {
        "gpu": request.get("gpu") or ("cpu" if ctx.config.get("use_cpu") else "H100"),
        "num_gpus": request.get("num_gpus") or 1,
        "override_reason": request.get("override_reason"),
        "reward_specs": run.reward_specs,
    }
    if ctx.config:
        base, what = dict(ctx.config), f"the run's config ({run.config_path or 'given'})"
    else:
        from mcp_server.recipe.variants import BASE_RECIPE
        from mcp_server.tiny import tiny_model_dir

        base = dict(BASE_RECIPE, model_name_or_path=str(tiny_model_dir()))
        lr, _ = ctx.learning_rate
        if lr is not None:
            base["learning_rate"] = lr
        what = "the recipe's default config (the run's config is unknown; pass config for an exact check)"
    if kwargs["reward_specs"] is None and not base.get("reward_funcs") and not base.get("reward_model_name_or_path"):
        kwargs["reward_specs"] = [s.model_dump() for s in default_rewards()]  # rewards are not what patches change
    return base, kwargs, f"{what}, target {kwargs['num_gpus']}x {kwargs['gpu']}"


def check_patches(ctx: Ctx, findings: list[DiagnosisFinding]) -> str | None:
    if not any(f.patch for f in findings):
        return None
    from mcp_server.recipe.validate import validate_values

    base, kwargs, what = validation_base(ctx)
    for f in findings:
        if not f.patch:
            continue
        result = validate_values({**base, **f.patch}, **kwargs)
        f.patch_valid = result.valid
        f.patch_problems = [f"{x.code} [{x.field}]: {x.message}" for x in result.findings if x.severity == "error"]
    return what


# ---------------------------------------------------------------- the core
def diagnose(source: str | Path, config: str | Path | dict | None = None, log: str | Path | None = None,
             validate_patches: bool = True) -> Diagnosis:
    """Diagnose a run from its metrics (and config and log when known). Raises UserInputError for a source,
    config or log that cannot be read."""
    run = load_run(source, config=config, log=log)
    ctx = Ctx(run)
    findings = [f for rule in RULES for f in rule(ctx)]
    findings.sort(key=lambda f: (SEVERITY_RANK[f.severity], CODE_RANK.get(f.code, len(CODE_RANK))))
    checked = check_patches(ctx, findings) if validate_patches else None
    problems = [f for f in findings if f.severity != "info"]
    last_step = run.rows[-1]["step"] if run.rows else None
    if problems:
        summary = f"{len(problems)} problem(s); first: {problems[0].code} ({problems[0].severity})"
    elif run.rows:
        summary = f"healthy: no problems in {len(run.rows)} logged steps (to step {last_step})"
    else:
        summary = "no problems found in the log (no metrics were logged)"
    return Diagnosis(
        source=str(run.run_dir or run.metrics_path or run.log_path), source_kind=run.kind,
        metrics_path=str(run.metrics_path) if run.metrics_path else None,
        config_path=str(run.config_path) if run.config_path else None,
        log_path=str(run.log_path) if run.log_path else None,
        steps_logged=len(run.rows), last_step=last_step, healthy=not problems, findings=findings,
        patches_checked_against=checked, summary=summary,
    )


def diagnose_run(request: DiagnoseRequest | str) -> Diagnosis:
    """The MCP tool's core: a DiagnoseRequest (or just a source path)."""
    if isinstance(request, (str, Path)):
        request = DiagnoseRequest(source=str(request))
    return diagnose(request.source, config=request.config_path, log=request.log_path,
                    validate_patches=request.validate_patches)

"""diagnose_run: what is wrong with a training run, from its logged metrics, config and stdout log.

Each rule reads the run and returns findings {code, severity, evidence, explanation, patch}. A patch is a dict
of config changes; it is merged into the run's config (or the recipe's default when the config is unknown) and
checked with the recipe validator, so an agent can apply it as it stands. Codes are stable; their meanings
and fixes are in references/failure-triage.md.

The rules read the run through diagnosis_context.Ctx and live in log_rules.py (the stdout log) and
metric_rules.py (the logged metrics); this module lists them, checks their patches and assembles the Diagnosis.
The request and result models are in training/models.py. The validator (which imports TRL) is imported only
when patches are checked.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Callable

from mcp_server.training.diagnosis_context import Ctx
from mcp_server.training.log_rules import rule_environment, rule_reward_errors
from mcp_server.training.metric_rules import (
    rule_entropy,
    rule_flat,
    rule_fp16,
    rule_grad_spike,
    rule_hacking,
    rule_kl,
    rule_learning_rate,
    rule_length,
    rule_loss_near_zero,
    rule_moe,
    rule_nan,
    rule_no_signal,
    rule_truncated,
)
from mcp_server.training.metrics import load_run
from mcp_server.training.stability_rules import (
    rule_entropy_rising,
    rule_importance_ratio,
    rule_length_collapse,
    rule_moe_router,
    rule_never_terminate,
    rule_reward_falling,
    rule_reward_none,
    rule_sampler_mismatch,
)
from mcp_server.training.models import DiagnoseRequest, Diagnosis, DiagnosisFinding
from mcp_server.recipe.models import default_rewards
from mcp_server.recipe.validate import validate_values
from mcp_server.recipe.variants import BASE_RECIPE
from mcp_server.tiny import tiny_model_dir

SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}

# Stable codes. Their order (the triage order findings are ranked by) is written once, in
# references/failure-triage.md, "The order of triage"; triage_order() reads it from there.
CODES: dict[str, str] = {
    "cuda_out_of_memory": "the training process ran out of GPU memory (torch OutOfMemoryError in the log)",
    "vllm_out_of_memory": "vLLM could not allocate its weights or KV cache",
    "nccl_timeout": "a distributed collective timed out (NCCL watchdog)",
    "import_error": "a package the run needs is missing or broken (ImportError / ModuleNotFoundError)",
    "disk_full": "a write was refused for lack of disk space or quota (a checkpoint save crashed)",
    "reward_function_error": "a reward function raised an exception (traceback in the log)",
    "reward_returns_none": "a reward function returned None for every completion (its logged mean is NaN)",
    "completions_never_terminate": "every completion hits max_completion_length and none ends (EOS, chat template, "
                                   "thinking)",
    "completions_truncated": "completions hit max_completion_length (clipped_ratio over 0.1)",
    "completion_length_collapse": "mean completion length fell to under 0.4x its start",
    "sampler_mismatch": "vLLM's log-probs differ from the trainer's (sampling/* metrics)",
    "importance_ratio_blowup": "many tokens' policy ratios are clipped (clip_ratio/*): off-policy updates too large",
    "moe_router_instability": "the MoE router's load-balancing loss (aux_loss) rises",
    "moe_without_gspo": "mixture-of-experts model with token-level importance ratios (-> GSPO)",
    "fp16_divergence": "fp16 on a GPU with bf16 (diverged, or at risk of diverging)",
    "lr_out_of_range": "learning rate outside GRPO's settled range for the fine-tuning mode",
    "entropy_rising": "policy entropy rises into gibberish",
    "entropy_collapse": "policy entropy fell fast (-> DAPO; an error when it becomes deterministic)",
    "grad_norm_spike": "grad_norm jumped an order of magnitude over its running level",
    "nan_loss": "loss or gradient norm became NaN/inf",
    "kl_explosion": "KL to the reference model grew large for the run's beta",
    "no_reward_signal": "groups get identical rewards (frac_reward_zero_std near 1 / reward_std 0): no advantage",
    "reward_falling": "the reward (or correctness) falls significantly",
    "reward_flat": "the mean reward does not move over many steps although rewards vary within groups",
    "length_reward_correlation": "completion length rises with the reward (-> Dr.GRPO)",
    "possible_reward_hacking": "one reward component climbs while correctness (or KL) says otherwise",
    "loss_near_zero_expected": "GRPO loss near zero at the start: normal, not a bug (info)",
}

RULES: list[Callable[[Ctx], list[DiagnosisFinding]]] = [
    rule_environment, rule_reward_errors, rule_reward_none, rule_never_terminate, rule_truncated,
    rule_length_collapse, rule_sampler_mismatch, rule_importance_ratio, rule_moe_router, rule_moe, rule_fp16,
    rule_learning_rate, rule_entropy_rising, rule_entropy, rule_grad_spike, rule_nan, rule_kl, rule_no_signal,
    rule_reward_falling, rule_flat, rule_length, rule_hacking, rule_loss_near_zero,
]

TRIAGE_FILE = Path("references") / "failure-triage.md"


def triage_path() -> Path:
    """references/failure-triage.md of the plugin folder (LLM_FINETUNING_PLUGIN_ROOT, else this checkout)."""
    root = os.environ.get("LLM_FINETUNING_PLUGIN_ROOT")
    return (Path(root) if root else Path(__file__).resolve().parents[2]) / TRIAGE_FILE


@functools.lru_cache(maxsize=1)
def triage_order() -> dict[str, int]:
    """Each code's rank: the order its first mention takes in failure-triage.md's "The order of triage"."""
    path = triage_path()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RuntimeError(f"cannot rank findings: {path} is unreadable ({exc.strerror}); the plugin folder is "
                           "incomplete (set LLM_FINETUNING_PLUGIN_ROOT to it)") from None
    section = text.split("## The order of triage", 1)[-1].split("\n## ", 1)[0]
    order: dict[str, int] = {}
    for code in re.findall(r"`([a-z0-9_]+)`", section):
        if code in CODES:
            order.setdefault(code, len(order))
    return order


def rank(findings: list[DiagnosisFinding]) -> list[DiagnosisFinding]:
    """Problems before notes; among problems, the triage order, a cause before its effects: a finding with
    `caused_by` comes right after its cause; then severity."""
    order = triage_order()
    by_code = {f.code: f for f in findings}

    def chain(f: DiagnosisFinding) -> tuple[int, ...]:
        """Triage ranks from the root cause down to this finding."""
        ranks, seen = [order.get(f.code, len(order))], {f.code}
        while f.caused_by in by_code and f.caused_by not in seen:
            f = by_code[f.caused_by]
            seen.add(f.code)
            ranks.insert(0, order.get(f.code, len(order)))
        return tuple(ranks)

    return sorted(findings, key=lambda f: (f.severity == "info", chain(f), SEVERITY_RANK[f.severity]))


def link_causes(ctx: Ctx, findings: list[DiagnosisFinding]) -> None:
    """Mark findings that another finding of the same run explains, where the metrics show the link."""
    by_code = {f.code: f for f in findings}
    truncated, length = by_code.get("completions_truncated"), by_code.get("length_reward_correlation")
    if truncated and length:  # the reward pays for length: completions pile up at the cap
        truncated.caused_by = "length_reward_correlation"
    never = by_code.get("completions_never_terminate")
    roots = [c for c in ("sampler_mismatch", "fp16_divergence", "lr_out_of_range")
             if c in by_code and by_code[c].severity == "error"]
    if never and roots and any(e.metric == "completions/mean_terminated_length" and e.step is not None
                               and isinstance(e.value, float) and e.value > 0 for e in never.evidence):
        never.caused_by = roots[0]  # completions ended before the run diverged


# ---------------------------------------------------------------- patch validation
def validation_base(ctx: Ctx) -> tuple[dict, dict, str]:
    """(config, validator keyword arguments, description) the patches are merged into."""

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

    base, kwargs, what = validation_base(ctx)
    # An error the run's config already has, on a field this patch leaves alone, is another finding's to fix
    # (a truncation patch on a run at learning_rate=1.0 is judged on what it changes).
    before = {(x.code, x.field) for x in validate_values(dict(base), **kwargs).findings if x.severity == "error"}
    checked: dict[str, list] = {}  # several findings often share a patch: validate it once
    for f in findings:
        if not f.patch:
            continue
        key = json.dumps(f.patch, sort_keys=True, default=str)
        if key not in checked:
            checked[key] = validate_values({**base, **f.patch}, **kwargs).findings
        errors = [x for x in checked[key] if x.severity == "error"
                  and ((x.code, x.field) not in before or x.field in f.patch)]
        f.patch_valid = not errors
        f.patch_problems = [f"{x.code} [{x.field}]: {x.message}" for x in errors]
    return what


# ---------------------------------------------------------------- the core
def diagnose(source: str | Path, config: str | Path | dict | None = None, log: str | Path | None = None,
             validate_patches: bool = True) -> Diagnosis:
    """Diagnose a run from its metrics (and config and log when known). Raises UserInputError for a source,
    config or log that cannot be read."""
    run = load_run(source, config=config, log=log)
    ctx = Ctx(run)
    findings = [f for rule in RULES for f in rule(ctx)]
    link_causes(ctx, findings)
    findings = rank(findings)
    checked = check_patches(ctx, findings) if validate_patches else None
    problems = [f for f in findings if f.severity != "info"]
    last_step = run.rows[-1]["step"] if run.rows else None
    logged = run.lines_logged or len(run.rows)  # a long log's rows are a sample (metrics.read_progress_records)
    if problems:
        summary = f"{len(problems)} problem(s); first: {problems[0].code} ({problems[0].severity})"
    elif run.rows:
        summary = f"healthy: no problems in {logged} logged steps (to step {last_step})"
    else:
        summary = "no problems found in the log (no metrics were logged)"
    return Diagnosis(
        source=str(run.run_dir or run.metrics_path or run.log_path), source_kind=run.kind,
        metrics_path=str(run.metrics_path) if run.metrics_path else None,
        config_path=str(run.config_path) if run.config_path else None,
        log_path=str(run.log_path) if run.log_path else None,
        steps_logged=logged, last_step=last_step, healthy=not problems, findings=findings,
        patches_checked_against=checked, summary=summary,
    )


def diagnose_run(request: DiagnoseRequest | str) -> Diagnosis:
    """The MCP tool's core: a DiagnoseRequest (or just a source path)."""
    if isinstance(request, (str, Path)):
        request = DiagnoseRequest(source=str(request))
    return diagnose(request.source, config=request.config_path, log=request.log_path,
                    validate_patches=request.validate_patches)

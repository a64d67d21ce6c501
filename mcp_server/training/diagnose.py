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

from pathlib import Path
from typing import Callable

from mcp_server.training.diagnosis_context import Ctx
from mcp_server.training.log_rules import rule_environment
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
from mcp_server.training.models import DiagnoseRequest, Diagnosis, DiagnosisFinding

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
    # An error the run's config already has, on a field this patch leaves alone, is another finding's to fix
    # (a truncation patch on a run at learning_rate=1.0 is judged on what it changes).
    before = {(x.code, x.field) for x in validate_values(dict(base), **kwargs).findings if x.severity == "error"}
    for f in findings:
        if not f.patch:
            continue
        result = validate_values({**base, **f.patch}, **kwargs)
        errors = [x for x in result.findings if x.severity == "error"
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

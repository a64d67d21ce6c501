"""diagnose_run: what is wrong with a training run, from its logged metrics, config and stdout log.

Each rule (declared in registry.py, written in its family's module) reads the run through context.Ctx and returns
findings {code, severity, evidence, explanation, patch}. triage.py links causes to their effects (onset steps and
the registry's mechanisms) and ranks them cause first. A patch is a dict of config changes; it is merged into the
run's config (or the recipe's default when the config is unknown) and checked with the recipe validator, so an
agent can apply it as it stands. Codes are stable; their meanings and fixes are in references/failure-triage.md.
The validator (which imports TRL) is imported only when patches are checked.
"""

from __future__ import annotations

import json
from pathlib import Path

from mcp_server.diagnosis.context import Ctx
from mcp_server.diagnosis.metrics import load_run
from mcp_server.diagnosis.models import DiagnoseRequest, Diagnosis, DiagnosisFinding
from mcp_server.diagnosis.registry import CODES, RULES, TRIAGE_ORDER
from mcp_server.diagnosis.triage import link, rank
from mcp_server.recipe.models import default_rewards
from mcp_server.recipe.validate import validate_values
from mcp_server.recipe.variants import BASE_RECIPE
from mcp_server.runs import Run
from mcp_server.tiny import tiny_model_dir

__all__ = ["CODES", "TRIAGE_ORDER", "diagnose", "diagnose_run"]


def findings_of(ctx: Ctx) -> list[DiagnosisFinding]:
    """Every rule's findings, linked cause to effect, their patches judged against the run, ranked cause first."""
    findings = [f for rule in RULES for f in rule.check(ctx)]
    link(ctx, findings)
    judge_patches(ctx, findings)
    return rank(findings)


def judge_patches(ctx: Ctx, findings: list[DiagnosisFinding]) -> None:
    """The rule every patch obeys, whatever rule wrote it: never a higher learning rate or longer completions on a
    run moving away (reward falling, KL or entropy running, length collapsed) or diverging, and never a higher rate
    on a run whose groups have lost their spread. Such a change is dropped, and the finding says why."""
    away = ctx.moving_away() + (["the run diverges"] if ctx.diverged else [])
    lr, _ = ctx.learning_rate
    limit = ctx.config.get("max_completion_length")
    for f in findings:
        dropped = []
        if lr is not None and isinstance(f.patch.get("learning_rate"), (int, float)) and f.patch["learning_rate"] > lr \
                and (away or ctx.signal_gone()):
            dropped.append("learning_rate")
        if away and isinstance(limit, int) and isinstance(f.patch.get("max_completion_length"), int) \
                and f.patch["max_completion_length"] > limit:
            dropped.append("max_completion_length")
        for key in dropped:
            f.patch.pop(key)
        if dropped:
            why = "; ".join(away) or "most groups have no reward spread"
            f.explanation += f" Not patched: {', '.join(dropped)} would grow on a run where {why}."


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
def diagnose(source: Run | str | Path, config: str | Path | dict | None = None, log: str | Path | None = None,
             validate_patches: bool = True) -> Diagnosis:
    """Diagnose a run from its metrics (and config and log when known). Raises UserInputError for a source,
    config or log that cannot be read."""
    run = load_run(source, config=config, log=log)
    ctx = Ctx(run)
    findings = findings_of(ctx)
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
        source=str(run.home.dir if run.home else run.metrics_path or run.log_path), source_kind=run.kind,
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

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

from mcp_server.config import FIELD, GRPOView
from mcp_server.diagnosis.context import Ctx
from mcp_server.diagnosis.metrics import load_run
from mcp_server.diagnosis.models import DiagnoseRequest, Diagnosis, DiagnosisFinding
from mcp_server.diagnosis.patch_effects import patch_changes
from mcp_server.diagnosis.rate_applied import rate_note
from mcp_server.diagnosis.registry import CODES, REGISTRY, RULES, TRIAGE_ORDER
from mcp_server.diagnosis.triage import link, rank
from mcp_server.diagnosis.unsigned_text import weigh
from mcp_server.recipe.models import default_rewards
from mcp_server.recipe.validate import validate_values
from mcp_server.recipe.variants import BASE_RECIPE
from mcp_server.runs import Run
from mcp_server.tiny import tiny_model_dir

__all__ = ["CODES", "TRIAGE_ORDER", "diagnose", "diagnose_run"]


def findings_of(ctx: Ctx) -> list[DiagnosisFinding]:
    """Every rule's findings, linked cause to effect, their patches judged against the run, ranked cause first."""
    findings = [f for rule in RULES for f in rule.check(ctx)]
    weigh(ctx.run.home, findings)  # the stdout log's findings: labelled unsigned, never over a signed success
    promote_far_rate(ctx, findings)
    link(ctx, findings)
    judge_patches(ctx, findings)
    for f in findings:
        f.patch_changes = patch_changes(ctx, f.patch)
    return rank(findings)


def promote_far_rate(ctx: Ctx, findings: list[DiagnosisFinding]) -> None:
    """A learning rate far above the settled range (ctx.rate_far_above) is a note only while the run shows no
    symptom it can cause; once one appears, whatever the trend so far, the rate is the likelier cause (a rate
    thousands of times the recipe's breaks a policy within a few steps on one CPU and a few more on another), so
    it becomes a warning and the linking ranks it first, its symptoms as its effects."""
    if not ctx.rate_far_above():
        return
    rate = next((f for f in findings if f.code == "lr_out_of_range" and f.severity == "info"), None)
    if rate is None:
        return
    explained = [f.code for f in findings if f.severity != "info" and f.code != "reward_flat"  # a low rate's
                 and f.code in REGISTRY["lr_out_of_range"].causes]
    if explained:
        rate.severity = "warning"
        rate.explanation += (f" It is far above the range, and the run shows {', '.join(sorted(set(explained)))}, "
                             "which such a rate causes: treat the rate first, whatever the metrics look like so far. "
                             "RL updates at supervised rates destroy the policy; the patch sets the recipe's rate.")
        rate.patch = {FIELD.learning_rate: ctx.recipe_lr()}  # a note carries none (divergence.rule_learning_rate)


def judge_patches(ctx: Ctx, findings: list[DiagnosisFinding]) -> None:
    """The rule every patch obeys, whatever rule wrote it: never a higher learning rate or longer completions on a
    run moving away (reward falling, KL or entropy running, length collapsed) or diverging, and never a higher rate
    on a run whose groups have lost their spread; and while the learning rate is far above its range and untreated,
    never longer completions or truncation masked out of the loss (a broken policy's rambling is the rate's
    symptom: masking hides it from the loss, a longer limit feeds it). Such a change is dropped, and the finding
    says why."""
    away = ctx.moving_away() + (["the run diverges"] if ctx.diverged else [])
    lr, _ = ctx.learning_rate
    limit = GRPOView.given(ctx.config).max_completion_length
    length = FIELD.max_completion_length
    far = ctx.rate_far_above()
    for f in findings:
        if far and f.code != "lr_out_of_range" and not _treats_rate(ctx, f.patch):
            masked = [k for k in (length, FIELD.mask_truncated_completions) if k in f.patch
                      and (k != length or not isinstance(limit, int)
                           or f.patch[k] > limit)]
            for key in masked:
                f.patch.pop(key)
            if masked:
                f.explanation += (f" Not patched: {', '.join(masked)}, while learning_rate={lr:g} (far above its "
                                  "range) is untreated: fix the rate first, then re-check truncation.")
        dropped = []
        patched_lr = f.patch.get(FIELD.learning_rate)
        if lr is not None and isinstance(patched_lr, (int, float)) and patched_lr > lr and (away or ctx.signal_gone()):
            dropped.append("learning_rate")
        if away and isinstance(limit, int) and isinstance(f.patch.get(length), int) and f.patch[length] > limit:
            dropped.append(length)
        for key in dropped:
            f.patch.pop(key)
        if dropped:
            why = "; ".join(away) or "most groups have no reward spread"
            f.explanation += f" Not patched: {', '.join(dropped)} would grow on a run where {why}."


def _treats_rate(ctx: Ctx, patch: dict) -> bool:
    """The patch brings the learning rate back inside its range."""
    rate = patch.get(FIELD.learning_rate)
    return isinstance(rate, (int, float)) and rate <= ctx.lr_range()[1]


# ---------------------------------------------------------------- patch validation
def validation_base(ctx: Ctx) -> tuple[dict, dict, str]:
    """(config, validator keyword arguments, description) the patches are merged into."""

    run = ctx.run
    request = run.request
    kwargs = {
        "gpu": request.gpu or ("cpu" if ctx.config.get(FIELD.use_cpu) else "H100"),
        "num_gpus": request.num_gpus,
        "override_reason": request.override_reason,
        "reward_specs": run.reward_specs,
    }
    if ctx.config:
        base, what = dict(ctx.config), f"the run's config ({run.config_path or 'given'})"
    else:

        base = dict(BASE_RECIPE, model_name_or_path=str(tiny_model_dir()))
        lr, _ = ctx.learning_rate
        if lr is not None:
            base[FIELD.learning_rate] = lr
        what = "the recipe's default config (the run's config is unknown; pass config for an exact check)"
    rewarded = base.get(FIELD.reward_funcs) or base.get(FIELD.reward_model_name_or_path)
    if kwargs["reward_specs"] is None and not rewarded:
        kwargs["reward_specs"] = [s.model_dump() for s in default_rewards()]  # rewards are not what patches change
    return base, kwargs, f"{what}, target {kwargs['num_gpus']}x {kwargs['gpu']}"


def check_patches(ctx: Ctx, findings: list[DiagnosisFinding]) -> str | None:
    if not any(f.patch or f.add_rewards for f in findings):
        return None

    base, kwargs, what = validation_base(ctx)
    # An error the run's config already has, on a field this patch leaves alone, is another finding's to fix
    # (a truncation patch on a run at learning_rate=1.0 is judged on what it changes).
    before = {(x.code, x.field) for x in validate_values(dict(base), **kwargs).findings if x.severity == "error"}
    checked: dict[str, list] = {}  # several findings often share a patch: validate it once
    for f in findings:
        if not f.patch and not f.add_rewards:
            continue
        key = json.dumps([f.patch, f.add_rewards], sort_keys=True, default=str)
        if key not in checked:
            specs = kwargs["reward_specs"]
            with_rewards = dict(kwargs, reward_specs=[*(specs or []), *f.add_rewards]) if f.add_rewards else kwargs
            checked[key] = validate_values({**base, **f.patch}, **with_rewards).findings
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
    elif run.rows and ctx.too_early:  # a rule with too few points is not a clean bill (issue 49)
        summary = f"too early to judge ({logged} logged steps, to step {last_step}): " + "; ".join(ctx.too_early)
    elif run.rows:
        summary = f"healthy: no problems in {logged} logged steps (to step {last_step})"
    else:
        summary = "no problems found in the log (no metrics were logged)"
    if run.unread:  # a run's own progress lines without the trainer's signature: never judged, named
        summary += f"; {run.unread}"
    rate = rate_note(run.home, run.config or {}, ctx.finite_series("learning_rate"))
    if rate:  # the schedule runs from another rate than the config's (issue 49)
        summary += f"; {rate}"
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

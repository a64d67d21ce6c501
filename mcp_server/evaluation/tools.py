"""The evaluation package's tools: evaluation against goldens, promotion, export, with their readable summaries."""

from __future__ import annotations

from mcp_server.evaluation.models import (
    EvaluateRequest,
    EvaluationResult,
    ExportRequest,
    ExportResult,
    PromoteRequest,
    PromotionResult,
)
from mcp_server.reporting import Report, silent
from mcp_server.toolspec import RUN, Command, Effects, Flag, ToolSpec


# The core is imported on the first call, not with the registry: the doors start without the cores' imports.
def evaluate_model(request: EvaluateRequest, report: Report = silent) -> EvaluationResult:
    from mcp_server.evaluation.evaluate import evaluate_model

    return evaluate_model(request, report=report)


def promote_checkpoint(request: PromoteRequest, report: Report = silent) -> PromotionResult:
    from mcp_server.evaluation.promote import promote_checkpoint

    return promote_checkpoint(request, report=report)


def export_model(request: ExportRequest, report: Report = silent) -> ExportResult:
    from mcp_server.evaluation.export import export_model

    return export_model(request, report=report)


def human_evaluation(result: EvaluationResult) -> str:
    lines = [
        *[f"WARNING: {w}" for w in result.warnings],
        f"{result.model}: {result.passed}/{result.n} passed = {result.pass_rate:.1%} "
        f"(95% CI {result.ci_low:.1%}-{result.ci_high:.1%}) on {result.goldens}",
        f"  goldens sha256 {result.goldens_sha256}",
        f"  baseline: {result.baseline_note}" + (f" ({result.baseline_path})" if result.baseline_path else ""),
    ]
    for item in [i for i in result.items if not i.passed][:3]:
        lines.append(f"  failed #{item.index} (gold {item.answer}): {item.completion[:100]!r}")
    return "\n".join(lines)


def human_promotion(result: PromotionResult) -> str:
    return "\n".join([*[f"WARNING: {w}" for w in result.warnings], f"{result.verdict}: {result.checkpoint}",
                      *[f"  {r}" for r in result.reasons], f"  baseline: {result.baseline_choice}",
                      f"  report: {result.report_path}"])


def human_export(result: ExportResult) -> str:
    return "\n".join([
        f"Exported {result.run_dir} -> {result.export_dir}" + (" (LoRA merged)" if result.merged_lora else ""),
        f"  files: {', '.join(result.files)}",
        f"  model card: {result.model_card}; promotion verdict: {result.promotion_verdict}",
        f"  smoke test ({result.smoke_items} goldens, greedy before/after): "
        + ("identical" if result.smoke_identical else "DIFFERENT"),
    ])


TOOLS = [
    ToolSpec(
        "evaluate_model", evaluate_model, EvaluationResult, request=EvaluateRequest,
        effects=Effects(writes=True, repeatable=True, open_world=True),
        description="""Greedy decoding (fixed seed) over a goldens file, graded pass/fail by the same verifiers as the rewards;
    pass rate with a 95% Wilson interval and per-item results. The first evaluation of a base model writes
    eval/baseline-<model>--<task>.json, which is never overwritten or loosened.""",  # noqa: E501 (the text MCP clients list, as it was)
        cli=Command(
            "Greedy pass rate (95%% Wilson CI) of a model on goldens; the first evaluation of a base model writes "
            "eval/baseline-<model>--<task>.json (never overwritten).", human_evaluation, hide=("seed", "batch_size"),
            flags={"model": Flag("model"), "goldens": Flag(default="tiny")},
        ),
    ),
    ToolSpec(
        "promote_checkpoint", promote_checkpoint, PromotionResult, request=PromoteRequest,
        effects=Effects(writes=True, destroys=True, repeatable=True, open_world=True),
        description="""Judge a run's checkpoint: the same goldens (sha256), graders and decoding as the base model's baseline,
    plus a frozen drift suite under the drift budget (<= 1 point noise, 1-5 points rerun with other seeds,
    > 5 points hard fail). The baseline's stored replies are graded again first, and both models' after: a grader
    scoring them otherwise now is refused. Writes promotion-report.md and promotion.json with PROMOTE or REJECT.""",  # noqa: E501 (the text MCP clients list, as it was)
        cli=Command(
            "PROMOTE or REJECT a run's checkpoint against the baseline and the drift budget; writes "
            "promotion-report.md. Exit 0 only on PROMOTE.", human_promotion, lambda r: r.verdict == "PROMOTE",
            hide=("rerun_seeds", "rerun_temperature", "min_improvement_points"), flags={"run": RUN},
        ),
    ),
    ToolSpec(
        "export_model", export_model, ExportResult, request=ExportRequest,
        effects=Effects(writes=True, open_world=True),
        description="""Export a promoted run: merge LoRA adapters when present, save safetensors, tokenizer and a model card
    (base model, config hash, rewards, inspection and promotion verdicts) into <run>/export/, and check that
    greedy outputs on a few goldens are identical before and after.""",  # noqa: E501 (the text MCP clients list, as it was)
        cli=Command(
            "Merge LoRA if any, save safetensors + tokenizer + model card into <run>/export/, smoke-test greedy "
            "outputs before/after.", human_export, lambda r: r.smoke_identical, hide=("smoke_items",),
            flags={"run": RUN},
        ),
    ),
]

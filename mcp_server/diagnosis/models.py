"""Requests and results of diagnose_run. Light (pydantic only): the MCP door imports it at start-up.

Every field has a description: it becomes the MCP tool schema an agent reads.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from mcp_server.inputs import PathText, Request

# ---------------------------------------------------------------- diagnosis
Severity = Literal["error", "warning", "info"]


class Evidence(BaseModel):
    metric: str = Field(description="TRL metric name (e.g. 'kl', 'completions/clipped_ratio'), a config field, or "
                                    "'log'.")
    step: int | None = Field(default=None, description="Optimizer step of the value; null for config values and log "
                                                       "lines.")
    value: float | int | str | bool | None = Field(
        description="The value seen: a number ('nan'/'inf' as text), a config value, or the log line."
    )


class DiagnosisFinding(BaseModel):
    code: str = Field(description="Stable snake_case code (see references/failure-triage.md).")
    severity: Severity = Field(description="error (the run is broken or wasting compute), warning, or info.")
    evidence: list[Evidence] = Field(default_factory=list, description="The metric values, config fields or log lines "
                                                                       "behind it.")
    explanation: str = Field(description="What the evidence means and what to do, in a few sentences.")
    patch: dict[str, Any] = Field(
        default_factory=dict,
        description="Config changes that address it, to merge into the run's config; empty when no config change "
        "fixes it (the explanation says what does).",
    )
    add_rewards: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Reward specs ({name, params, weight}) to add to the run's reward set (train/rewards.json, or "
        "emit_grpo_config's rewards), validated with the patch; empty when the fix is no reward change.",
    )
    patch_changes: list[str] = Field(
        default_factory=list,
        description="What else the patch changes beside what it targets (on-policy -> off-policy, prompts per "
        "optimizer step, completions per generation, memory, learning speed): read before applying it.",
    )
    patch_valid: bool | None = Field(
        default=None,
        description="Whether the run's config with this patch merged validates (validate_grpo_config), apart from "
        "errors the run's config already had on fields the patch leaves alone (other findings fix those); null when "
        "the patch is empty or validation was not run.",
    )
    patch_problems: list[str] = Field(
        default_factory=list, description="Validation errors of the patched config, when patch_valid is false."
    )
    caused_by: str | None = Field(
        default=None,
        description="The code of the root-cause finding of this diagnosis that explains this one (fix that first); "
        "this finding is ranked after it and carries no patch of its own.",
    )
    onset: int | None = Field(
        default=None,
        description="The first logged step at which the evidence shows this finding (its rule on the log up to that "
        "step); null for a finding that rests on the config or the stdout log (there from the start).",
    )
    other_causes: list[str] = Field(
        default_factory=list,
        description="Other findings that fit as the cause too: the samples at read_samples_at decide between them.",
    )
    read_samples_at: int | None = Field(
        default=None,
        description="On a root cause: the step whose samples to read first (sample_completions on the checkpoint "
        "nearest it), the earliest onset of this cause and its effects.",
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
        default_factory=list, description="Root cause first: problems before notes; root causes by onset, then the "
        "triage order, each followed by its effects (caused_by)."
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
        default=None, description="The run's stdout/stderr log, when it is not the run directory's "
                                  "train/logs/stdout.log."
    )
    validate_patches: bool = Field(
        default=True, description="Check every patch with the config validator (imports TRL; a few seconds)."
    )

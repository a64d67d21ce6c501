"""max_completion_length is never left at TRL's default silently: emission writes it with where it came from.

Issue 31: a "reply with the number only" task on a CPU target was emitted without it, so TRL's 512 applied to
every sampling pass and every step. The value, in order: the request's override, the agentic budget or the
thinking mode (set before this runs), the run's own measurement (emitting again into a run whose
inspection/samples.meta.json holds sample_completions' suggestion for the same model), else a placeholder by
target (TRL's default on a GPU, a rehearsal's budget on a CPU), said to be unmeasured.
"""

from __future__ import annotations

from pathlib import Path

from mcp_server.config import FIELD
from mcp_server.config.recipe import Recipe, Setting
from mcp_server.evidence import signed_samples_meta
from mcp_server.runs import Run

CPU_COMPLETION_LENGTH = 128  # a CPU run is a rehearsal: each of its sampling passes and steps scales with this
LENGTH = FIELD.max_completion_length


def measured_length(run: Run, model: str) -> tuple[Setting | None, str | None]:
    """(sample_completions' suggested max_completion_length and how it was measured, from the run's samples of this
    model; None when there are none, they came from another model, or they suggest nothing (censored); why a record
    there was not read). Only the record the sampler signed is read (evidence.signed_samples_meta): a length written
    into it by hand would be emitted as measured."""
    meta, why = signed_samples_meta(run)
    if meta is None:
        return None, (f"inspection/samples.meta.json not read: {why}" if run.samples_meta.exists() else None)
    lengths = meta.get("lengths")
    suggested = lengths.get("suggested_max_completion_length") if isinstance(lengths, dict) else None
    sampled = meta.get("model")
    if not isinstance(suggested, int) or isinstance(suggested, bool) or suggested <= 0 or not isinstance(sampled, str):
        return None, None
    if Path(sampled).expanduser().resolve() != Path(model).expanduser().resolve() and sampled != model:
        return None, None
    p99 = (lengths.get("completion_tokens") or {}).get("p99")
    cut = lengths.get("truncation_at_suggested")
    how = (f"measured: sample_completions' suggestion from {lengths.get('completions')} sampled completions "
           f"(inspection/samples.meta.json: 99th percentile {p99} tokens, rounded up to a multiple of 64"
           + (f", cutting {cut:.1%} of them" if isinstance(cut, (int, float)) else "") + ")")
    return Setting(suggested, how, "measured"), None


def completion_length(recipe: Recipe, overrides: dict, trl_default: int, cpu: bool, run: Run, model: str) -> Recipe:
    """The recipe with max_completion_length and its reason, unless the request or an earlier step set it."""
    if LENGTH in recipe or LENGTH in overrides:
        return recipe
    measured, unread = measured_length(run, model)
    if measured is not None:
        return recipe.with_value(LENGTH, measured.value, measured.reason, measured.source)
    then = ("not yet measured for this task: sample_completions measures the completions and suggests a value "
            "(its `lengths`); emit again into this run (run_dir) to apply it, or set it here, then sample again"
            + (f" ({unread})" if unread else ""))
    if cpu:
        return recipe.with_value(
            LENGTH, CPU_COMPLETION_LENGTH, f"CPU target: {CPU_COMPLETION_LENGTH} tokens, a rehearsal's budget (TRL's "
            f"default {trl_default} makes every sampling pass and step about {trl_default // CPU_COMPLETION_LENGTH}x "
            f"longer on a CPU); {then}", "target")
    return recipe.with_value(LENGTH, trl_default, f"{trl_default} tokens, TRL's default, {then}", "trl_default")

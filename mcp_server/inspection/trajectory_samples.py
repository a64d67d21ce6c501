"""sample_completions on an agentic run: the samples are trajectories from TRL's own tool loop (the run's
trainer, inspection.trajectories.rollout), stored as TRL hands them to the rewards (the completion is the list
of assistant and tool messages), so inspect_rewards, the verdict and the gate read them as any samples.
trajectories.jsonl is written beside them. An agentic run samples only as it trains: a model, data or
sampling override is refused (it could not back a verdict, and TRL's loop is the only one that runs tools)."""

from __future__ import annotations

import datetime as _dt
import json
import tempfile
import time

from mcp_server.config import FIELD
from mcp_server.errors import UserInputError
from mcp_server.inspection.files import clear_review
from mcp_server.inspection.lengths import length_advice
from mcp_server.inspection.models import MIN_REVIEW_SAMPLES, RATE_PROMPTS, SampleRequest, SampleResult
from mcp_server.inspection.pins import config_pins
from mcp_server.inspection.sample_files import write_samples_meta
from mcp_server.inspection.training_inputs import load_training_inputs
from mcp_server.inspection.trajectories import rollout_apart, write_trajectories
from mcp_server.config.grpo_fields import GRPOView
from mcp_server.reporting import Report, silent
from mcp_server.runs import Run
from mcp_server.workspace import written_digest

OVERRIDES = ("model", "dataset", "dataset_config", "dataset_split", "prompt_column", "n", "temperature", "top_p",
             "top_k", "max_new_tokens")


def _sample_lines(records: list[dict], group: int) -> list[str]:
    lines = []
    for record in records:
        columns = {k: v for k, v in record["row"].items()}
        lines.append(json.dumps({
            "id": record["id"], "prompt_index": record["group"], "sample_index": record["id"] % group,
            "row_index": record["row_index"], "prompt": record["prompt"], "completion": record["completion"],
            "completion_ids": record["completion_ids"], "columns": columns, "truncated": record["truncated"],
            "finish_reason": "length" if record["truncated"] else "stop"}, ensure_ascii=False, default=str))
    return lines


def sample_agentic(run: Run, request: SampleRequest, report: Report = silent) -> SampleResult:
    given = [name for name in OVERRIDES if getattr(request, name) is not None]
    if given:
        raise UserInputError(given[0], "an agentic run is sampled only as it trains (its trainer runs the tools): "
                                       f"leave {', '.join(given)} empty, or change train/config.yaml")
    started = time.perf_counter()
    num_prompts = request.num_prompts or RATE_PROMPTS
    with tempfile.TemporaryDirectory(prefix="datasets-") as cache:  # what train/train.py's loader reads
        trained = load_training_inputs(run, cache)["fingerprint"]
    # the run's code apart from the key; its models held to the pin recorded, once loaded (round 18, b06)
    batch = rollout_apart(run, num_prompts, request.seed, report, trained["model"])
    write_trajectories(run, batch, request.seed)
    records, group, config = batch["records"], batch["group"], run.read_config()
    path = run.samples
    digest = written_digest(path, "\n".join(_sample_lines(records, group)) + "\n")  # signed as written (round 18)
    limit = GRPOView(config).max_completion_length  # what the rollout used: TRL's default when unset
    lengths = length_advice([r["loss_tokens"] + r["masked_tokens"] for r in records],
                            [r["truncated"] for r in records], limit, [r["prompt_tokens"] for r in records])
    generation = {"temperature": config.get(FIELD.temperature), "top_p": config.get(FIELD.top_p),
                  "top_k": config.get(FIELD.top_k), "max_new_tokens": limit, "seed": request.seed}
    write_samples_meta(run, run.samples_meta, digest, {  # signed: the sampler vouches for samples.jsonl
        "model": str(config.get(FIELD.model_name_or_path)), "dataset_rows": batch["dataset_rows"],
        "num_prompts": batch["num_prompts"], "n": group, "conversational": True, "engine": "trl-tool-loop",
        "generation": generation, "samples_sha256": digest, "differs_from_config": [],
        "config_pins": config_pins(run), "trained": trained, "lengths": lengths, "agentic": True,
        "trajectory_codes": [c.model_dump() for c in batch["codes"]],
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})
    clear_review(run)  # only what inspect_rewards wrote (inspection.files)
    errors = [f"{c.code} ({c.count})" for c in batch["codes"] if c.severity == "error"]
    next_step = "Run inspect_rewards on this run, then read inspection/review.md."
    if len(records) < MIN_REVIEW_SAMPLES:
        next_step = f"Only {len(records)} samples: inspect_rewards needs at least {MIN_REVIEW_SAMPLES}. " + next_step
    if errors:
        next_step = ("The trajectories show " + ", ".join(errors) + ": read inspection/trajectories.md "
                     "(sample_trajectories names each) before inspecting rewards. " + next_step)
    return SampleResult(
        run_dir=str(run.dir), samples_path=str(path), samples_sha256=digest, num_samples=len(records),
        num_prompts=batch["num_prompts"], n=group, dataset_rows=batch["dataset_rows"], conversational=True,
        model=str(config.get(FIELD.model_name_or_path)), engine="trl-tool-loop",
        truncated=sum(r["truncated"] for r in records), generation=generation, differs_from_config=[],
        lengths=lengths, seconds=round(time.perf_counter() - started, 3), next_step=next_step)

"""The inspection gate's tools: sampling, reward inspection, the verdict and the gate, with their readable
summaries and the `--agree` / `--disagree` sample-id flags."""

from __future__ import annotations

from mcp_server.errors import UserInputError
from mcp_server.inspection.models import (
    GateRequest,
    GateResult,
    InspectRequest,
    InspectResult,
    SampleRequest,
    SampleResult,
    VerdictRequest,
    VerdictResult,
)
from mcp_server.inspection.trajectory_models import TrajectoryRequest, TrajectoryResult
from mcp_server.reporting import Report, silent
from mcp_server.worker import apart
from mcp_server.worker_targets import CHECK_GATE, INSPECT_REWARDS, RECORD_VERDICT, SCORE_BLIND
from mcp_server.toolspec import READS, RUN, Command, Effects, Flag, ToolSpec


# The core is imported on the first call, not with the registry: the doors start without the cores' imports.
def sample_completions(request: SampleRequest, report: Report = silent) -> SampleResult:
    from mcp_server.inspection.sampling import sample_completions

    return sample_completions(request, report=report)


def sample_trajectories(request: TrajectoryRequest, report: Report = silent) -> TrajectoryResult:
    from mcp_server.inspection.trajectories import sample_trajectories

    return sample_trajectories(request, report=report)


# The tools that import the run's reward modules run them out of a process that holds a protocol (worker.apart).
def inspect_rewards(request: InspectRequest, report: Report = silent) -> InspectResult:
    from pathlib import Path

    from mcp_server.inspection import blind_probes
    from mcp_server.runs import Run

    result = apart(INSPECT_REWARDS, request, report=report)
    run = Run(Path(result.run_dir))
    if not blind_probes.current(run):  # scored in the keyless worker: the probes are derived here, with the key
        blind_probes.record_review(run, lambda probe_samples: apart(SCORE_BLIND, str(run.dir), probe_samples))
    return result


def record_inspection_verdict(request: VerdictRequest) -> VerdictResult:
    return apart(RECORD_VERDICT, request)


def _model_line(model: str) -> str:
    """The name a person knows the model by, and where it loaded from when that is another path (issue 49)."""
    from mcp_server.model_ref import shown_name

    name = shown_name(model)
    return model if name == model else f"{name} (loaded from {model})"


def _sampled_line(r: SampleResult) -> str:
    """What this process sampled and in how long; a stopped pass's completions it reused apart (walk 12: "Sampled
    128 completions ... in 322.5s" of a process that generated 64 and reused 64)."""
    reused, kept = r.plan.get("reused_completions") or 0, r.plan.get("reused_prompts") or 0
    if not reused:
        return (f"Sampled {r.num_samples} completions ({r.num_prompts} prompts x {r.n}) with {r.engine} in "
                f"{r.seconds:.1f}s")
    return (f"Sampled {r.num_samples - reused} completions (prompts {kept + 1}-{r.num_prompts} of {r.num_prompts} x "
            f"{r.n}) with {r.engine} in {r.seconds:.1f}s; {reused} more (prompts 1-{kept}) reused from a stopped "
            f"pass: {r.num_samples} in the samples file")


def human_samples(r: SampleResult) -> str:
    return "\n".join(
        [
            _sampled_line(r),
            f"  model:     {_model_line(r.model)}",
            f"  plan:      {r.plan.get('text', '')}",
            f"  samples:   {r.samples_path}",
            f"  truncated: {r.truncated}",
            f"  lengths:   {r.lengths.get('advice', '')}",
            *[f"  DIFFERS FROM THE CONFIG (no verdict on these): {d}" for d in r.differs_from_config],
            f"  next:      {r.next_step}",
        ]
    )


def human_trajectories(r: TrajectoryResult) -> str:
    calls = ", ".join(f"{n} {status}" for status, n in r.tool_calls.items()) or "none"
    return "\n".join([f"Rolled out {r.num_trajectories} trajectories through TRL's tool loop in {r.seconds:.1f}s",
                      f"  trajectories: {r.trajectories_path}", f"  tool calls:   {calls}",
                      *[f"  {c.severity.upper()} {c.code} ({c.count}): {c.message}" for c in r.codes],
                      f"  next:         {r.next_step}"])


def human_inspection(r: InspectResult) -> str:
    lines = [
        f"Reviewed {r.num_samples} samples ({r.num_prompts} prompts x {r.samples_per_prompt}); sheet: "
        f"{r.review_md_path}",
        f"  base success rate: {r.base_success_rate:.0%} of {r.rate_prompts} prompts (95% interval "
        f"{r.base_success_interval[0]:.0%}-{r.base_success_interval[1]:.0%}; success: {r.success_rule})",
        f"  zero-variance groups: {r.zero_variance_groups}/{r.num_prompts}; malformed: {r.malformed}; "
        f"well-formed but wrong: {r.well_formed_but_wrong}; truncated: {r.truncated}",
    ]
    for d in r.distributions:
        lines.append(f"  {d.name:<24} mean {d.mean}  std {d.std}  min {d.min}  max {d.max}  zeros {d.zero_share:.0%}")
    lines += [f"  training rows: {r.row_probes}"] if r.row_probes else []
    lines += [f"  CHECK reward {p.reward}: {'; '.join(p.reasons)}" for p in r.reward_probes if p.flagged]
    lines += [f"  CHECK sample {s.id}: {'; '.join(s.reasons)}" for s in r.likely_misscored]
    lines += [f"  warning: {w}" for w in r.warnings]
    lines.append(("  ROUTE: SFT FIRST. " if r.route == "sft_first" else "  next: ") + r.next_step)
    return "\n".join(lines)


def human_gate(g: GateResult) -> str:
    head = "GATE OPEN" if g.passed else "GATE CLOSED"
    return f"{head}: {g.reason}" + (f"\n  to clear: {g.how_to_clear}" if g.how_to_clear else "")


def human_verdict(r: VerdictResult) -> str:
    over = "".join(f"\nNOTE: passed over the review's flag on {line}" for line in r.passed_over)
    over += "".join(f"\nWARNING: {line}" for line in r.warnings)
    return (f"Recorded '{r.verdict}' by {r.reviewer} ({r.agree} agree, {r.disagree} disagree of {r.reviewed}) "
            f"in {r.verdict_path}{over}\n{human_gate(r.gate)}")


def parse_ids(value: str | None, field: str) -> list[int]:
    """'3,17,20-25' -> [3, 17, 20, 21, 22, 23, 24, 25]."""
    ids: list[int] = []
    for part in (value or "").split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            ids.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
        except ValueError:
            raise UserInputError(field, f"expected sample ids like '3,17,20-25', got '{part}'") from None
    return ids


def _add_sample_ids(p) -> None:
    p.add_argument("--agree", help="Sample ids agreed with, e.g. '0-9,12'.")
    p.add_argument("--disagree", help="Sample ids disagreed with, e.g. '3,17'.")


def _fold_sample_ids(args, data: dict) -> None:
    verdicts = data.get("sample_verdicts") or []
    if not isinstance(verdicts, list):
        raise UserInputError("--verdicts", "expected a JSON list of {id, agree, note}")
    verdicts += [{"id": i, "agree": True} for i in parse_ids(args.agree, "--agree")]
    verdicts += [{"id": i, "agree": False} for i in parse_ids(args.disagree, "--disagree")]
    data["sample_verdicts"] = verdicts


def check_gate(request: GateRequest) -> GateResult:
    """The gate of the request's run (the core takes the run itself: launch and resume call it too)."""
    return apart(CHECK_GATE, request.run)


TOOLS = [
    ToolSpec(
        "sample_completions", sample_completions, SampleResult, request=SampleRequest,
        effects=Effects(writes=True, destroys=True, open_world=True),
        description="""Generate n completions per prompt from the policy model (settings from the run's train/config.yaml by
    default) and store them in <run>/inspection/samples.jsonl for reward inspection.""",  # noqa: E501 (the text MCP clients list, as it was)
        cli=Command("Sample n completions per prompt into <run>/inspection/samples.jsonl.", human_samples,
                    flags={"run": RUN}),
    ),
    ToolSpec(
        "sample_trajectories", sample_trajectories, TrajectoryResult, request=TrajectoryRequest,
        effects=Effects(writes=True, destroys=True, open_world=True),
        description="""Agentic runs: roll out a batch through TRL's own tool loop with the run's trainer (model, template,
    environment, tools, budget) into <run>/inspection/trajectories.jsonl, and name what is wrong by code with
    counts (unparsed calls, tool failures, results dropped by the budget, turn cap, mask, group starts, replay,
    state kept across reset, rewards for unseen results).""",  # noqa: E501 (the text MCP clients list)
        cli=Command("Agentic runs: roll out a batch through TRL's tool loop into <run>/inspection/trajectories.jsonl "
                    "and name what is wrong.", human_trajectories,
                    lambda r: not any(c.severity == "error" for c in r.codes), flags={"run": RUN}),
    ),
    ToolSpec(
        "inspect_rewards", inspect_rewards, InspectResult, request=InspectRequest,
        effects=Effects(writes=True, repeatable=True),
        description="""Score the stored samples (50-100) with the run's rewards; write inspection/review.md for a person to read.
    Returns score distributions, zero-variance groups, malformed / well-formed-but-wrong / truncated counts,
    likely mis-scored samples and the base success rate (zero: route to SFT first; GRPO cannot learn).""",  # noqa: E501 (the text MCP clients list, as it was)
        cli=Command("Score the samples with the run's rewards and write inspection/review.md.", human_inspection,
                    lambda r: r.grpo_can_learn, flags={"run": RUN}),
    ),
    ToolSpec(
        "record_inspection_verdict", record_inspection_verdict, VerdictResult, request=VerdictRequest,
        effects=Effects(writes=True, destroys=True, repeatable=True),
        description="""Record the person's verdict on review.md (per-sample agree/disagree, pass/fail, who) in
    inspection/verdict.json with the hashes of the reward code and samples. Only record what the person said.""",  # noqa: E501 (the text MCP clients list, as it was)
        cli=Command(
            "Record a person's verdict on review.md (the gate's sign-off).", human_verdict,
            extra=_add_sample_ids, fold=_fold_sample_ids,
            flags={"run": RUN, "sample_verdicts": Flag("--verdicts"), "agree_with_rest": Flag("--agree-rest")},
        ),
    ),
    ToolSpec(
        "check_inspection_gate", check_gate, GateResult, request=GateRequest, effects=READS,
        description="""Is the run cleared to train? Passes only with a passing verdict whose hashes match the current rewards
    (train/rewards.json and reward code) and samples. Says why not and how to clear it.""",  # noqa: E501 (the text MCP clients list, as it was)
        cli=Command("Is the run cleared to train? Exit 0 only when the gate is open.", human_gate,
                    lambda r: r.passed, flags={"run": RUN}),
    ),
]

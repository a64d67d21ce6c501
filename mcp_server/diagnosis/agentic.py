"""Family 'samples', agentic runs: rules on TRL's only tool metrics (tools/call_frequency: calls per rollout;
tools/failure_frequency: failed calls per call). Both are hard failures the live guard stops on: a policy that
stops calling its tool, or whose calls mostly fail, learns from trajectories that no longer use the tool."""

from __future__ import annotations

from mcp_server.diagnosis.context import Ctx, ends, finding
from mcp_server.diagnosis.models import DiagnosisFinding, Evidence

CALLS_FALL = 0.25  # the late call frequency under this share of the early one: collapsing
MIN_EARLY_CALLS = 0.2  # calls per rollout at the start for a collapse to mean anything
FAILURES_HIGH = 0.5  # half the recent calls fail
MIN_POINTS = 3


def _evidence(name: str, points: list[tuple[int, float]]) -> list[Evidence]:
    return [Evidence(metric=name, step=points[0][0], value=points[0][1]),
            Evidence(metric=name, step=points[-1][0], value=points[-1][1])]


def rule_tool_calls(ctx: Ctx) -> list[DiagnosisFinding]:
    calls = ctx.finite_series("tools/call_frequency")
    if len(calls) < MIN_POINTS:
        return []
    early, late = ends([v for _, v in calls])
    if early < MIN_EARLY_CALLS or late >= CALLS_FALL * early:
        return []
    return [finding("tool_calls_collapsing", "error", _evidence("tools/call_frequency", calls),
                    f"tool calls per rollout fell from {early:.2f} to {late:.2f}: the policy is learning to answer "
                    "without its tool (a reward paid without the tool's result, a broken call format the parser no "
                    "longer reads, or results dropped by the budget). Sample trajectories from the last checkpoint "
                    "(sample_trajectories) and read the codes.")]


def rule_tool_failures(ctx: Ctx) -> list[DiagnosisFinding]:
    failures = ctx.finite_series("tools/failure_frequency")
    if len(failures) < MIN_POINTS:
        return []
    early, late = ends([v for _, v in failures])
    if late < FAILURES_HIGH or late <= early:
        return []
    return [finding("tool_failures_rising", "error", _evidence("tools/failure_frequency", failures),
                    f"the share of tool calls that fail rose from {early:.0%} to {late:.0%}: the model learns from "
                    "error messages instead of results (wrong arguments, a tool or environment that raises or times "
                    "out). Read the failures per tool with sample_trajectories.")]

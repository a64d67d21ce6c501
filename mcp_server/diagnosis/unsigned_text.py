"""What a run's stdout log alone says weighs less than what its trainer signed (issue 48, round 16, F4).

train/logs/stdout.log is unsigned: anyone who writes the workspace can append to it (three lines made a succeeded
CPU run read "cuda_out_of_memory (error)" with a memory patch). A finding whose only evidence is lines of that log
says so in its explanation; where the run's signed outcome.json (evidence.py, this launch's) says it succeeded,
such a finding is a note (info) without a patch: unsigned text never outranks the signed record. Metrics are
already read only from the trainer's signed progress lines (metrics.py)."""

from __future__ import annotations

from mcp_server.diagnosis.models import DiagnosisFinding
from mcp_server.evidence import recorded_launch, valid_run
from mcp_server.runs import Run
from mcp_server.userfiles import read_json_if_present

LABEL = "From train/logs/stdout.log alone, which is unsigned (anyone who writes the workspace can write it)."


def signed_success(home: Run | None) -> bool:
    """Whether the run's outcome.json is signed for this run and launch and says it succeeded."""
    if home is None:
        return False
    value = read_json_if_present(home.outcome)
    if not isinstance(value, dict) or not valid_run(home, home.outcome, value):
        return False
    launch = recorded_launch(home.dir)
    return value.get("state") == "succeeded" and (launch is None or value.get("launch_id") == launch)


def weigh(home: Run | None, findings: list[DiagnosisFinding]) -> None:
    """Label (and under a signed success, demote) each finding resting on the run's stdout log alone."""
    if home is None:  # a log given alone: there is no signed record to weigh it against
        return
    succeeded = None
    for f in findings:
        if not f.evidence or any(e.metric != "log" for e in f.evidence):
            continue
        if succeeded is None:
            succeeded = signed_success(home)
        f.explanation = f"{LABEL} {f.explanation}"
        if succeeded and f.severity != "info":
            f.severity, f.patch, f.add_rewards = "info", {}, []
            f.explanation += (" Not counted as a problem: the run's signed outcome.json says it succeeded, and an "
                              "unsigned log line never outranks it (no patch).")

"""A launched run's inspection verdict and kept reward code are what its launch passed through: never recorded
again (issue 49). Read by the gate (inspection/gate.py)."""

from __future__ import annotations

from mcp_server.errors import UserInputError
from mcp_server.runs import Run
from mcp_server.userfiles import read_json_if_present


def refuse_if_launched(run: Run) -> None:
    """A launched run's verdict and inspection/reward_code/ are what its launch passed through (the trainer imports
    the kept code): never rewritten, while it runs or after (issue 49: a re-recorded pass replaced them mid-run, no
    copy kept, and the model card showed it as the launch's)."""
    launched = run.launched_evidence()
    if not launched:
        return
    recorded = (read_json_if_present(run.run_json) or {}).get("state")
    state = f"launched (run.json last recorded it {recorded})" if isinstance(recorded, str) else "launched"
    raise UserInputError("run", f"{run.name} is {state}: it holds {', '.join(launched[:4])}, and its inspection "
                         "verdict and reward code are what that launch passed through, so they are never rewritten. "
                         "To review other rewards or samples, emit_grpo_config (without run_dir) for a new run and "
                         "sample, inspect and record its verdict there")


def refuse_review_if_launched(run: Run) -> None:
    """A launched run's review (review.md, review.json, review.jsonl) is what its verdict vouches for: the verdict
    pins its digest, and the gate (a resume's, a re-check's) refuses a review that is not the one recorded. So
    inspect_rewards never rewrites it (issue 49: inspect-rewards on a succeeded run replaced all three silently)."""
    launched = run.launched_evidence()
    if not launched:
        return
    raise UserInputError("run", f"{run.name} was launched (it holds {', '.join(launched[:4])}): its review "
                         "(inspection/review.md, review.json, review.jsonl) is what the launch's verdict vouches "
                         "for, so inspect_rewards never rewrites it. To score other rewards or new samples, "
                         "emit_grpo_config (without run_dir) for a new run and sample and inspect there; "
                         "sample_completions on this run keeps its samples apart, in inspection/explore-<n>/")


def way_on_for(run: Run, how: str) -> str:
    """The way on, as this run allows it: a launched run's verdict is never recorded again
    (refuse_if_launched), so what leads there names what does."""
    if "verdict" not in how or not run.launched_evidence():
        return how
    return ("put back what changed since the verdict (its pins), or emit_grpo_config (without run_dir) for a new "
            "run and sample, inspect and record its verdict there: this run was launched, so its verdict is never "
            "recorded again")

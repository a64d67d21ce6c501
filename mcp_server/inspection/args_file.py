"""An args file beside the training script (train/train.args, any train/<script>.args): transformers'
HfArgumentParser reads `<sys.argv[0]>.args` by default and applies its arguments over config.yaml, in the trainer
alone (round 8, G5: pinned fields no sampling pass or pin saw). One check, said the same by the inspection gate
(check_inspection_gate, the CLI's and MCP's gate check) and by the launch and resume gate
(training.launch_gates.args_file_refusals); the trainer refuses a pinned field set there as well
(inspection.trained._command_line_overrides)."""

from __future__ import annotations

from mcp_server.runs import Run


def args_files(run: Run) -> list[str]:
    """The run's args files beside its training script, relative to the run directory (a dangling link too)."""
    if not run.train.is_dir():
        return []
    return sorted(p.relative_to(run.dir).as_posix() for p in run.train.glob("*.args"))


def args_file_problem(run: Run) -> tuple[str, str] | None:
    """(what is wrong, how to clear it) when the run has an args file beside its training script; None when not."""
    found = args_files(run)
    if not found:
        return None
    named = ", ".join(found)
    return (f"{named} is an args file: transformers' argument parser reads it beside the training script and "
            "applies its arguments over train/config.yaml, unseen by sampling and the verdict: nothing trains with "
            "it", f"put its values in train/config.yaml (then sample and inspect again, and record the verdict) and "
            f"remove {named}, then launch again")

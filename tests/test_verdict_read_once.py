"""The verdict a launch passes to its trainer is the one its inspection gate judged (issue 48, "what trains is what
was reviewed"; round 18's open item): `launchers.base.verdict_env` hashed inspection/verdict.json again after the
gate had read it, so a verdict swapped in between had its hash, its reward-code and train.py pins and its loader
files exported to the trainer, which then believed it. Now the launch reads verdict.json once (RunSpec.verdict),
the gate judges that text (check_inspection_gate with the launch's spec) and the launcher writes its pins from the
same text (LaunchPlan.verdict). The swap is made at its exact point, deterministically: after the launch's read.
Constructed inputs, nothing trains."""

from __future__ import annotations

import hashlib
import json

from mcp_server.runs import Run

from support import emit_run

REVIEWED = {"verdict": "pass", "pins": {"reward_code": "a" * 64, "script": "b" * 64}}
FORGED = {"verdict": "pass", "pins": {"reward_code": "c" * 64, "script": "d" * 64}}


def test_the_gate_judges_the_verdict_the_launch_read_not_the_file_read_again(workspace, tiny_model):
    from mcp_server.inspection.gate import check_inspection_gate
    from mcp_server.recipe.runspec import RunSpec

    run = Run(emit_run("gate-reads-once"))
    run.samples.parent.mkdir(parents=True, exist_ok=True)
    run.samples.write_text("{}\n")
    run.verdict.write_text("{}")  # an incomplete record: the gate names what it lacks
    spec = RunSpec.of_run(run)
    run.verdict.write_text("not json")  # swapped after the launch read it
    result = check_inspection_gate(run, spec)
    assert not result.passed and "incomplete or malformed" in result.reason, result.reason


def test_the_launcher_passes_the_pins_of_the_verdict_the_launch_read(workspace, tiny_model):
    """SLURM's launch.slurm (written, not submitted) exports the verdict's hash and its reward-code and train.py
    pins: those of the bytes the launch read, with verdict.json swapped for a forged one after that read."""
    from mcp_server.inspection.trained import REWARD_SHA_ENV, VERDICT_SHA_ENV
    from mcp_server.training.launch import build_launch_plan, write_plan_files
    from mcp_server.training.launchers.base import SCRIPT_SHA_ENV
    from mcp_server.training.models import LaunchRequest

    run = Run(emit_run("launcher-reads-once", gpu="H100", num_gpus=4))
    reviewed = json.dumps(REVIEWED)
    run.verdict.parent.mkdir(parents=True, exist_ok=True)
    run.verdict.write_text(reviewed)
    plan = build_launch_plan(run, LaunchRequest(run=str(run.dir), num_nodes=2))  # the launch's one read
    assert plan.launcher == "slurm"
    run.verdict.write_text(json.dumps(FORGED))  # after the gate judged it
    script = write_plan_files(run, plan)["slurm_text"]
    for name, value in {VERDICT_SHA_ENV: hashlib.sha256(reviewed.encode()).hexdigest(),
                        REWARD_SHA_ENV: "a" * 64, SCRIPT_SHA_ENV: "b" * 64}.items():
        assert f"export {name}={value}\n" in script, (name, script)
    assert "c" * 64 not in script and "d" * 64 not in script

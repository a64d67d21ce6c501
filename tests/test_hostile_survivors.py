"""Issue 33, "The suite lets realistic bugs through": the run survivors of its mutation audit (the sandbox's are in
test_sandbox_hostile.py, the checkpoint order and the run mark in test_hostile_runs.py), each a test of the promise
the README makes, through the core API with inputs whose answer is known by construction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support import diagnose_series, healthy_rows, with_series


@pytest.mark.parametrize("num_gpus, use_vllm", [(1, True), (2, False), (4, False), (2, True)])
def test_several_gpus_start_through_launch_training_never_as_one_process(workspace, num_gpus, use_vllm):
    """2- and 4-GPU runs printed `python train/train.py` (one process on one GPU) as the way to start them (the
    suite checked 1 and 8 GPUs with a vLLM server only). A catalog model, so the memory plan (offline) lays the
    GPUs out: without vLLM every GPU trains."""
    from mcp_server.emission.emit import emit_grpo_config
    from mcp_server.recipe.models import GRPORecipeRequest

    result = emit_grpo_config(GRPORecipeRequest(model="Qwen/Qwen2.5-1.5B-Instruct", dataset="tiny", gpu="H100",
                                                num_gpus=num_gpus, run_name=f"gpus-{num_gpus}",
                                                overrides={"use_vllm": use_vllm}))
    header = next(line for line in Path(result.config_path).read_text().splitlines() if "Train with" in line)
    if num_gpus == 1:
        assert result.launch_command.endswith("python train/train.py --config train/config.yaml"), result
        return
    for text in (result.launch_command, header):
        assert "launch-training" in text and "training GPU(s)" in text, text
    assert "&& python train/train.py" not in result.launch_command


@pytest.mark.parametrize("stop, state", [({"by": "guard", "code": "signal_lost"}, "failed"),
                                         ({"by": "guard", "code": "entropy_rising"}, "stopped"),
                                         ({"by": "request"}, "stopped")])
def test_a_guard_stop_on_a_lost_signal_is_failed_never_stopped(workspace, stop, state):
    """A guard stop on signal_lost was recorded "stopped" (resumable, as if nothing were wrong) instead of
    "failed": the run learned nothing. The trainer's own door (write_outcome, as the emitted train.py calls it when
    the Trainer returns), then training_status."""
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.trainer.progress import write_outcome
    from mcp_server.training.status import training_status

    run_dir = workspace / "runs" / "guarded"
    logs = run_dir / "train" / "logs"
    logs.mkdir(parents=True)
    (logs / "stopped.json").write_text(json.dumps({"step": 7, **stop}))
    if stop["by"] == "guard":  # the guard's own record, as guard.py writes it beside stopped.json
        (logs / "guard.json").write_text(json.dumps({"mode": "stop", "step": 7, "findings": [], "stopped": {
            "code": stop["code"], "step": 7, "save": True}}))
    write_outcome(run_dir, "succeeded", global_step=7)
    assert json.loads((logs / "outcome.json").read_text())["state"] == state
    assert training_status(StatusRequest(run=str(run_dir))).state == state


@pytest.mark.parametrize("logs, dead_from", [(40, 20), (100, 70), (100, 1), (65, 63)])
def test_an_onset_is_the_first_step_its_rule_fires_on_long_logs_too(tmp_path, logs, dead_from):
    """An off-by-one in the onset search over long logs (over 64 logs, bisected instead of scanned) moved every
    onset by a step. signal_lost fires once two logs after the first have zero spread and no gradient: a log dead
    from row `dead_from` on has its onset at the row after it, whatever the log's length."""
    rows = healthy_rows(logs)
    dead = [i >= dead_from for i in range(logs)]
    rows = with_series(rows, "frac_reward_zero_std", [1.0 if d else 0.1 for d in dead])
    rows = with_series(rows, "grad_norm", [0.0 if d else 0.5 for d in dead])
    found = next(f for f in diagnose_series(tmp_path, rows).findings if f.code == "signal_lost")
    assert found.onset == max(dead_from, 1) + 2, found  # steps are 1-based: row i is step i + 1

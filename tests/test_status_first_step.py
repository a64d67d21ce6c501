"""Walk 9: nine minutes after the launch, `training-status` said "no step logged yet; first step expected about
5.8 min per step", with no time elapsed and no word that the step (8.6 min) had run past the estimate. Before the
first step is logged, the status says how long training has run since the trainer began (its signed train-begin
record of this launch), or, before that, since the launch (loading); past the estimate, that the step is over it
and by how much, in the words a later overdue step gets. Through the CLI, on a live launcher (`bash train/launch.sh`
from the run directory, as a person starts one) and a stored CPU probe of constructed readings."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from conftest import run_cli_json
from support import write_signed
from test_run_states import OLD, Cell, build, lineage, make_template

# A small llama the estimate can plan (its config alone: nothing loads it).
TINY = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000,
        "max_position_embeddings": 512, "torch_dtype": "float32"}
READING = {"flops": 5e9, "bandwidth": 3e9, "threads": 2, "op_s": 200e-6, "sync_s": 1e-3, "share": 1.0}
UNLIKE = [READING, {**READING, "sync_s": 0.09, "share": 0.1}, {**READING, "flops": 20e9, "bandwidth": 10e9,
                                                              "op_s": 35e-6, "sync_s": 35e-6}]  # other machines' states


@pytest.fixture
def live(tmp_path):
    """A launched run (no step logged) whose launcher is alive: `bash train/launch.sh` sleeping in its directory."""
    run_dir = build(tmp_path, make_template(tmp_path), Cell("launching", tuple(lineage("launching")), id="live"))
    (tmp_path / "base-model" / "config.json").write_text(json.dumps(TINY))
    (run_dir / "train" / "launch.sh").write_text("sleep 600\n")
    proc = subprocess.Popen(["bash", "train/launch.sh"], cwd=run_dir, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        record = json.loads((run_dir / "run.json").read_text())
        me = psutil.Process(proc.pid)
        (run_dir / "run.json").write_text(json.dumps({**record, "state": "starting", "pid": proc.pid, "pgid": None,
                                                      "create_time": me.create_time(), "started_ts": time.time() - 42}))
        cache = tmp_path / "cache"
        cache.mkdir()
        now = {**READING, "measured_at": time.time()}
        readings = [{**r, "measured_at": time.time()} for r in UNLIKE]
        (cache / "cpu_probe.json").write_text(json.dumps({"2": {**now, "readings": readings}}))
        yield run_dir, {"LLM_FINETUNING_WORKSPACE": str(tmp_path), "LLM_FINETUNING_CACHE": str(cache),
                        "OMP_NUM_THREADS": "2"}
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # its own group: bash and the sleep it started
        proc.wait()


def _status(run_dir: Path, env: dict) -> dict:
    proc, status = run_cli_json("training-status", str(run_dir), env=env)
    assert proc.returncode == 0 and status["step"] is None and status["step_estimate_s"], (proc.stderr, status)
    return status


@pytest.mark.slow
@pytest.mark.parametrize("began_ago", [None, 5.0, 86400.0])  # still loading; under way, under its estimate; far past
def test_status_before_the_first_step_says_the_time_and_the_overrun(live, began_ago):
    run_dir, env = live
    if began_ago is not None:
        write_signed(run_dir / "train" / "logs" / "train-begin.json",
                     {"max_steps": 4, "global_step": 0, "time": time.time() - began_ago, "launch_id": OLD})
    status = _status(run_dir, env)
    message, estimate = status["message"], status["step_estimate_s"]
    assert status["state"] == ("starting" if began_ago is None else "running"), message
    assert "no step logged yet" in message and "first step expected about" in message, message
    if began_ago is None:
        assert re.search(r"training not begun: launched (4\d|5\d) s ago \(loading\)", message), message
        assert "running for" not in message, message
        return
    began = re.search(r"training began (\d+) s ago|training began ([\d.]+) h ago", message)
    assert began, message
    if began_ago < estimate:
        assert "longer than" not in message and int(began[1]) < 60, message
        return
    overdue = re.search(r"step 1 running for (\d+) s, longer than the (\d+) s estimated \(([\d.]+) h over\)", message)
    assert overdue and abs(int(overdue[1]) - began_ago) < 60 and int(overdue[2]) == round(estimate), message
    assert float(overdue[3]) == pytest.approx((began_ago - estimate) / 3600, abs=0.06), message


@pytest.mark.slow
def test_the_status_splits_the_step_as_the_emission_did(live, monkeypatch):
    """Walk 9: emit-config said "generation 3.4 min, training 3.1 min", training-status "generation 73 s, training
    4.4 min" for the same run. The status (CLI, the run's own threads taken off the load) and the estimate as
    emission makes it (step_estimate, in this process at this machine's load) split the step alike: the same stored
    probe of unlike readings."""
    from test_estimates import _split_bounds

    from mcp_server.memory.estimate import step_estimate
    from mcp_server.recipe.runspec import RunSpec
    from mcp_server.runs import Run

    run_dir, env = live
    status = _status(run_dir, env)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    emitted = step_estimate(RunSpec.of_run(Run(run_dir)), measure=False)
    (low, high), (e_low, e_high) = _split_bounds(status["message"]), _split_bounds(emitted.text)
    # one share inside both, as far as their rounded words ("generation 1 s, training 12 s") can say
    assert max(low, e_low) <= min(high, e_high) + 0.02, (status["message"], emitted.text)


@pytest.mark.slow
@pytest.mark.parametrize("began_ago", [33.0, 200.0])  # the resumed trainer began under a step's time; past it
def test_a_resumed_step_runs_from_the_resumes_start_not_the_last_logged_step(live, began_ago):
    """Walk 10: after a stop and resume, `training-status` said "step 2 running for 133 s ... (35 s over)" when the
    resumed trainer had begun 33 s before: the step's time counted the gap between the launches. Step 1 logged by the
    earlier launch 600 s ago (98 s a step); this launch's train-begin `began_ago` s ago. Through the CLI."""
    from support import write_signed_lines

    run_dir, env = live
    now = time.time()
    record = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**record, "started_ts": now - began_ago - 5}))
    write_signed(run_dir / "train" / "logs" / "train-begin.json",
                 {"max_steps": 3, "global_step": 1, "time": now - began_ago, "launch_id": OLD})
    write_signed_lines(run_dir / "train" / "logs" / "progress.jsonl",
                       [{"step": 1, "time": now - 600, "step_time": 98.0, "loss": 0.1}])
    proc, status = run_cli_json("training-status", str(run_dir), env=env)
    message = status["message"]
    assert proc.returncode == 0 and status["state"] == "running" and status["step"] == 1, (proc.stderr, message)
    overdue = re.search(r"step 2 running for (\d+) s, longer than the 98 s steps so far", message)
    if began_ago < 98:
        assert "running for" not in message and "over)" not in message, message
    else:
        assert overdue and abs(int(overdue[1]) - began_ago) < 30, message

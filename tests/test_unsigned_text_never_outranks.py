"""Issue 48, round 16 (F4, F4a): what a workspace writer without the key can make the readers say about a run.

F4: three lines appended to the unsigned train/logs/stdout.log (a Traceback and "CUDA out of memory") made
diagnose-run report "cuda_out_of_memory (error)" with a memory patch on a run whose signed outcome said it
succeeded. The table: the run's signed end (succeeded, failed, stopped) x forged log lines of each environment
rule: under a signed success the finding is a note without a patch, labelled unsigned; otherwise it stands
(an OOM in the log of a failed run is the likeliest cause), labelled unsigned all the same.
F4a: a signed progress line moved to the end of the progress log made training-status and list-runs say
"step 1/6": the step shown is the highest signed step, wherever its line sits. Both through the CLI.
"""

from __future__ import annotations

import json

import pytest

from conftest import run_cli_json
from test_run_states import _cell, lineage

FORGED = {
    "cuda_out_of_memory": "Traceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory. "
                          "Tried to allocate 20.00 GiB\n",
    "disk_full": "OSError: [Errno 28] No space left on device\n",
    "import_error": "ModuleNotFoundError: No module named 'flash_attn'\n",
}
ENDS = {"succeeded": "succeeded", "failed": "failed", "stopped": "stopped"}


@pytest.mark.parametrize("end", list(ENDS))
@pytest.mark.parametrize("code", list(FORGED))
def test_unsigned_log_lines_never_outrank_the_signed_outcome(tmp_path, monkeypatch, end, code):
    from mcp_server.runs import Run

    run_dir = _cell(tmp_path, monkeypatch, ENDS[end], lineage(end))
    with Run(run_dir).stdout.open("a") as log:
        log.write(FORGED[code])
    proc, out = run_cli_json("diagnose-run", str(run_dir), "--no-validate", cwd=tmp_path,
                             env={"LLM_FINETUNING_WORKSPACE": str(tmp_path)})
    assert proc.returncode in (0, 1), proc.stderr[-600:]
    found = [f for f in out["findings"] if f["code"] == code]
    assert len(found) == 1, (code, [f["code"] for f in out["findings"]])
    assert "unsigned" in found[0]["explanation"], found[0]["explanation"]
    if end == "succeeded":
        assert found[0]["severity"] == "info" and not found[0]["patch"], found[0]
        assert code not in out["summary"], out["summary"]
    else:
        assert found[0]["severity"] == "error", found[0]


@pytest.mark.parametrize("moved", [0, 1, 2])
def test_a_signed_progress_line_moved_last_does_not_set_the_step_shown(tmp_path, monkeypatch, moved):
    from mcp_server.runs import Run

    run_dir = _cell(tmp_path, monkeypatch, "succeeded", lineage("succeeded"))
    progress = Run(run_dir).progress
    lines = progress.read_text().splitlines()
    steps = [json.loads(line)["step"] for line in lines]
    assert len(lines) == 3 and max(steps) == 4, steps
    lines.append(lines.pop(moved))  # a signed line of an earlier step (or the last itself) put at the end
    progress.write_text("\n".join(lines) + "\n")
    env = {"LLM_FINETUNING_WORKSPACE": str(tmp_path)}
    proc, status = run_cli_json("training-status", str(run_dir), cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-600:]
    assert status["step"] == 4 and status["latest"]["step"] == 4, (status["step"], status["latest"])
    proc, runs = run_cli_json("list-runs", cwd=tmp_path, env=env)
    row = next(r for r in runs["runs"] if r["run_dir"].endswith(run_dir.name))
    assert row["step"] == 4, row


def test_a_step_logged_again_by_a_resume_shows_the_later_line(tmp_path, monkeypatch):
    """m15's survivor (issue 48): a resume re-logs the step it resumed from, so the highest step can appear twice;
    status must show the later line (the resumed attempt's loss and reward), not the replaced attempt's."""
    from support import append_signed

    from mcp_server.runs import Run

    run_dir = _cell(tmp_path, monkeypatch, "succeeded", lineage("succeeded"))
    progress = Run(run_dir).progress
    last = json.loads(progress.read_text().splitlines()[-1])
    assert last["step"] == 4 and last["loss"] != 0.777, last
    append_signed(progress, {**last, "loss": 0.777, "time": last["time"] + 1.0})  # the resumed attempt's step 4
    proc, status = run_cli_json("training-status", str(run_dir), cwd=tmp_path,
                                env={"LLM_FINETUNING_WORKSPACE": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-600:]
    assert status["step"] == 4 and status["latest"]["loss"] == 0.777, status["latest"]

"""Issue 48, round 16: what trains is what was reviewed for the whole run, not only before its first step.

G1: the trainer checked the reward's files and replayed the review once, before step 1. A reward input changed after
step 1 trained at 5.0 on the steps after and the run "succeeded": a path only looked at (os.path.exists), a file
read through an fd kept open since the import, a plain open() of a file under /dev/shm (the reads pin left /dev/ out
by its prefix), a SQLite connection kept open. F3: a grader reading its rubric under /dev/shm was never pinned, so a
rubric changed between the baseline and the candidate PROMOTEd.

Now a read is pinned by what the file is, not where it lives (rewards/read_events.py: a regular file anywhere; not a
device, a pipe, a socket or the kernel's procfs/sysfs state), a look at a file (os.stat, os.access) is a read of it,
the trainer re-pins every reviewed file at the end of every reward call (reads.Reads.recheck), and it replays the
review at every logging step and after the last one (inspection.replay.again): a moved score stops the run, exit 3.

Rows: every place a regular file can live x every form of reading it (pinned by the review, refused at the reward
call after it changed); what holds no content (not pinned); real tiny-model launches where the input changes after
step 1 (each G1 variant, and a child process's output that only the replay sees); F3 through evaluate_model and
promote_checkpoint."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from mcp_server.inspection.gate import record_inspection_verdict
from mcp_server.inspection.models import InspectRequest, VerdictRequest
from mcp_server.inspection.review import inspect_rewards
from mcp_server.inspection.trained import reviewed_reward_funcs
from support import emit_run, hand_made_run, pass_inspection, wait_for

# Where a regular file can live: a folder made there for the row (removed after it).
PLACES = {
    "workspace": lambda ws: ws / "inputs",
    "tmp": lambda ws: Path(tempfile.gettempdir()) / f"llmft-r16-{uuid.uuid4().hex}",
    "dev-shm": lambda ws: Path("/dev/shm") / f"llmft-r16-{uuid.uuid4().hex}",
    "home": lambda ws: Path.home() / f".llmft-r16-{uuid.uuid4().hex}",
}
# How a reward reads its input (module-level setup, the value at each call, the change that moves it 1 -> 5).
FORMS = {
    "open": ("", "float(open(KNOB).read())", lambda d: (d / "knob").write_text("5")),
    "exists": ("", "5.0 if os.path.exists(FLAG) else 1.0", lambda d: (d / "flag").write_text("")),
    "stat": ("", "float(os.stat(KNOB).st_size)", lambda d: (d / "knob").write_text("55555")),
    "listdir": ("", "float(len(os.listdir(FOLDER)))", lambda d: [(d / "listed" / f"{i}").write_text("")
                                                                 for i in range(4)]),
    "kept fd": ("_F = open(KNOB)", "_F.seek(0) or float(_F.read())", lambda d: (d / "knob").write_text("5")),
    "sqlite": ("_DB = sqlite3.connect(DB)", "float(_DB.execute('select v from k').fetchone()[0])",
               lambda d: _sql(d / "k.db", "update k set v = 5")),
}
REWARD = '''import os, sqlite3, subprocess
KNOB, FLAG, FOLDER, DB = {knob!r}, {flag!r}, {folder!r}, {db!r}
{setup}


def knob_reward(completions, **kwargs):
    v = {body}
    return [v for c in completions]
'''


def _sql(db: Path, statement: str) -> None:
    with sqlite3.connect(db) as connection:
        connection.execute(statement)
    connection.close()


def _inputs(folder: Path) -> dict:
    """The row's inputs at value 1: knob (1 byte), no flag, a folder of one name, a database holding 1."""
    folder.mkdir(parents=True)
    (folder / "knob").write_text("1")
    (folder / "listed").mkdir()
    (folder / "listed" / "only").write_text("")
    _sql(folder / "k.db", "create table k (v)")
    _sql(folder / "k.db", "insert into k values (1)")
    return {"knob": str(folder / "knob"), "flag": str(folder / "flag"), "folder": str(folder / "listed"),
            "db": str(folder / "k.db")}


def _reviewed_run(workspace, tiny_model, monkeypatch, source: str, tag: str) -> Path:
    """A hand-made run whose reward is `source`, inspected and passed."""
    code = workspace / "code"
    code.mkdir()
    module = f"r16_{tag}_{abs(hash(str(workspace)))}"
    (code / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(code))
    run_dir = hand_made_run(workspace, tiny_model, "r16", [["a", "b", "c", "d"]] * 13, ["2"] * 13,
                            rewards=[{"name": f"{module}.knob_reward"}])
    inspect_rewards(InspectRequest(run=str(run_dir)))
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana", agree_with_rest=True))
    return run_dir


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("place", list(PLACES))
def test_a_regular_file_anywhere_read_any_way_is_pinned_and_refused_once_changed(workspace, tiny_model,
                                                                                 monkeypatch, capsys, place, form):
    """Reviewed at 1, the trainer's functions score 1 (after its replay); the input changed after that (as after
    step 1) -> the next reward call exits 3 naming the file and the reward, before TRL has its scores. Before round
    16: /dev/shm was never pinned, and the look, the kept fd and the kept database scored 5 unchecked."""
    if place == "dev-shm" and not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm on this system")
    folder = PLACES[place](workspace)
    try:
        paths = _inputs(folder)
        setup, body, change = FORMS[form]
        tag = "".join(c for c in f"{place}{form}" if c.isalnum())
        run_dir = _reviewed_run(workspace, tiny_model, monkeypatch,
                                REWARD.format(**paths, setup=setup, body=body), tag)
        pinned = json.loads((run_dir / "inspection" / "verdict.json").read_text())["pins"]["reward_reads"]
        assert any(p.startswith(str(folder)) for p in pinned), sorted(pinned)
        funcs, _ = reviewed_reward_funcs(run_dir)
        assert "replayed the review" in capsys.readouterr().err
        call = {"prompts": ["Q0"], "completions": ["a"], "completion_ids": [[]], "answer": ["2"]}
        assert funcs[0](**call) == [1.0]
        change(folder)
        with pytest.raises(SystemExit) as refused:
            funcs[0](**call)
        err = capsys.readouterr().err
        assert refused.value.code == 3, err
        assert str(folder) in err and "knob_reward" in err and "not what the inspection verdict reviewed" in err, err
    finally:
        shutil.rmtree(folder, ignore_errors=True)


NO_CONTENT = {  # what a reward may read that holds no content to pin: a device, the kernel's state
    "/dev/null": "float(len(open('/dev/null').read()) + 1)",
    "/dev/urandom": "float(len(open('/dev/urandom', 'rb').read(4)) - 3)",
    "/proc/self/status": "float('Name:' in open('/proc/self/status').read())",
    "/sys/kernel": "float(os.path.exists('/sys/kernel'))",
}


@pytest.mark.parametrize("read", list(NO_CONTENT))
def test_what_holds_no_content_is_not_pinned(workspace, tiny_model, monkeypatch, capsys, read):
    """A character device or the kernel's procfs/sysfs state: by its type, not pinned (its read is no reviewed
    content; the replay judges what it changes), and the reward trains."""
    if not os.path.exists(read):
        pytest.skip(f"no {read} on this system")
    source = REWARD.format(knob="", flag="", folder="", db="", setup="", body=NO_CONTENT[read])
    run_dir = _reviewed_run(workspace, tiny_model, monkeypatch, source, "".join(c for c in read if c.isalnum()))
    pinned = json.loads((run_dir / "inspection" / "verdict.json").read_text())["pins"].get("reward_reads") or {}
    assert not [p for p in pinned if p.startswith(("/dev/", "/proc/", "/sys/"))], pinned
    funcs, _ = reviewed_reward_funcs(run_dir)
    assert funcs[0](prompts=["Q0"], completions=["a"], completion_ids=[[]], answer=["2"]) == [1.0]


#------------------------------------------------------ real launches: the input changed after step 1 (round 16, G1)
TINY = {"max_steps": 3, "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 12,
        "logging_steps": 1, "save_steps": 1, "gradient_accumulation_steps": 1, "report_to": "none"}
LAUNCHED = '''import os, socket, sqlite3, subprocess
KNOB, FLAG, DB, HOLD = {knob!r}, {flag!r}, {db!r}, {hold!r}
{setup}
_BATCHES = [0]


def knob_reward(completions, **kwargs):
    if len(completions) == 4:  # a training step's batch (the replay scores 52 samples, then one row at a time)
        _BATCHES[0] += 1
        if _BATCHES[0] == 2 and os.environ.get("LLM_FINETUNING_VERDICT_SHA256"):  # the trainer's step 2 waits
            with socket.socket(socket.AF_UNIX) as hold:  # until the test has changed the input (a socket: no file
                hold.connect(HOLD)                       # read, before round 16 as after)
                hold.recv(1)
    v = {body}
    return [v for c in completions]
'''
LAUNCH_FORMS = {
    "exists": ("", "5.0 if os.path.exists(FLAG) else 1.0", "flag"),
    "kept fd": ("_F = open(KNOB)", "_F.seek(0) or float(_F.read())", "knob"),
    "dev-shm open": ("", "float(open(KNOB).read())", "knob"),
    "sqlite": ("_DB = sqlite3.connect(DB)", "float(_DB.execute('select v from k').fetchone()[0])", "db"),
    # a child process's output, of a file its arguments do not name (a glob; a named one is pinned since round 17):
    # no pin names it, the replay at step 2's logging step sees it moved
    "child process": ("", "float(subprocess.check_output(['/bin/sh', '-c', 'cat ' + KNOB[:-1] + '?']))", "knob"),
    "unchanged": ("", "float(open(KNOB).read())", None),
}


def _release(hold: socket.socket, change, deadline: float) -> None:
    """Once step 2's reward call waits on the socket (it connected), `change` the input, then let the call go on."""
    hold.settimeout(0.5)
    while True:
        try:
            connection, _ = hold.accept()
            break
        except socket.timeout:
            assert time.monotonic() < deadline, "step 2's reward call never came"
    with connection:
        change()
        connection.sendall(b"x")


@pytest.mark.slow
@pytest.mark.parametrize("form", list(LAUNCH_FORMS))
def test_an_input_changed_after_step_1_stops_the_run(workspace, monkeypatch, form):
    """Reviewed and launched at 1, the input moved to 5 while step 2's reward call runs: before round 16 steps 2-3
    trained at 5.0 and the run succeeded; now the run stops there, exit 3 (the reward call's check names the file;
    the child process's output is the replay's: the reward, the sample, reviewed 1, now 5), never succeeded, no
    step 2 logged. Unchanged: the review replayed again at every logging step and after the last, same scores."""
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    place = Path("/dev/shm") if form == "dev-shm open" and os.path.isdir("/dev/shm") else workspace
    folder = place / f"llmft-r16-launch-{uuid.uuid4().hex}"
    short = Path(tempfile.mkdtemp(prefix="r16hold-", dir="/tmp"))  # a socket's path is at most 107 bytes
    hold = short / "hold"
    listening = socket.socket(socket.AF_UNIX)
    try:
        listening.bind(str(hold))
        listening.listen(1)
        paths = _inputs(folder)
        setup, body, moved = LAUNCH_FORMS[form]
        code = workspace / "user-rewards"
        code.mkdir()
        module = f"r16launch_{''.join(c for c in form if c.isalnum())}"
        (code / f"{module}.py").write_text(LAUNCHED.format(**paths, hold=str(hold), setup=setup, body=body))
        monkeypatch.syspath_prepend(str(code))
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(code), os.environ.get("PYTHONPATH")])))
        monkeypatch.delitem(sys.modules, module, raising=False)
        data = workspace / "sums.jsonl"
        data.write_text("".join(json.dumps({"prompt": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n"
                                for i in range(16)))
        run_dir = emit_run("r16", dataset=str(data), base=TINY, rewards=[{"name": f"{module}.knob_reward"}])
        pass_inspection(run_dir, max_samples=None, reviewer="ana")
        result = launch_training(LaunchRequest(run=str(run_dir)))
        assert result.launched, result.message
        changes = {"flag": lambda: Path(paths["flag"]).write_text(""), "knob": lambda: Path(paths["knob"]).write_text(
            "5"), "db": lambda: _sql(Path(paths["db"]), "update k set v = 5"), None: lambda: None}
        _release(listening, changes[moved], time.monotonic() + 600)
        status = wait_for(run_dir, lambda s: s.state not in ("starting", "running"), timeout=600)
        log = (run_dir / "train" / "logs" / "stdout.log").read_text()
        steps = [json.loads(line).get("step") for line in
                 (run_dir / "train" / "logs" / "progress.jsonl").read_text().splitlines() if '"step"' in line]
        if moved is None:
            assert status.state == "succeeded", (status.state, log[-3000:])
            assert "replayed the review 3 more times during training" in log, log[-3000:]
            return
        assert status.state == "failed", (status.state, log[-3000:])
        assert 2 not in steps and 3 not in steps, (steps, log[-3000:])
        if form == "child process":
            assert "stopping training after step 2, refused: the reward knob_reward scores 52 of the 52" in log, log
            assert "reviewed 1, now 5" in log, log[-3000:]
        else:
            assert "not what the inspection verdict reviewed" in log and str(folder) in log, log[-3000:]
            assert "knob_reward" in log, log[-3000:]
    finally:
        listening.close()
        shutil.rmtree(short, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)


#------------------------------------------------------------------ F3: a grader's rubric under /dev/shm (round 16)
GRADER = '''def shm_grader(completions, **kwargs):
    v = float(open({rubric!r}).read())
    return [v for c in completions]
'''


@pytest.mark.slow
@pytest.mark.parametrize("place", ["dev-shm", "tmp"])
def test_promote_refuses_a_baseline_whose_grader_read_a_rubric_anywhere_else(workspace, tiny_model, monkeypatch,
                                                                              place):
    """F3: the baseline measured with the rubric saying 0 (every golden fails), the rubric then says 1: before, a
    file under /dev/shm was never pinned and promote said PROMOTE +100 points, signed; now the baseline pins it by
    what it is and promote refuses, naming the file."""
    from mcp_server.errors import UserInputError
    from mcp_server.evaluation.evaluate import evaluate_model
    from mcp_server.evaluation.models import EvaluateRequest, PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint

    if place == "dev-shm" and not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm on this system")
    folder = PLACES[place](workspace)
    folder.mkdir(parents=True)
    try:
        rubric = folder / "rubric"
        rubric.write_text("0")
        code = workspace / "code"
        code.mkdir()
        module = f"r16grader_{place.replace('-', '')}_{abs(hash(str(workspace)))}"
        (code / f"{module}.py").write_text(GRADER.format(rubric=str(rubric)))
        monkeypatch.syspath_prepend(str(code))
        goldens = workspace / "goldens.jsonl"
        goldens.write_text("".join(json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                                   for i in range(6)))
        graders = [{"name": f"{module}.shm_grader"}]
        first = evaluate_model(EvaluateRequest(model=str(tiny_model), goldens=str(goldens), graders=graders,
                                               baseline="write", max_new_tokens=4))
        assert str(rubric) in json.loads(Path(first.baseline_path).read_text())["graders_reads"]
        run_dir = hand_made_run(workspace, tiny_model, "promoted", [["<answer>1</answer>", ""]] * 6,
                                [str(i + 1) for i in range(6)], rewards=graders)
        shutil.copytree(tiny_model, run_dir / "checkpoints")  # a model placed in a run never launched
        rubric.write_text("1")
        with pytest.raises(UserInputError, match="rubric") as refused:
            promote_checkpoint(PromoteRequest(run=str(run_dir), goldens=str(goldens)))
        assert str(rubric) in str(refused.value) and "its content changed" in str(refused.value), refused.value
        assert not (run_dir / "promotion.json").exists()
    finally:
        shutil.rmtree(folder, ignore_errors=True)

"""Issue 48, round 9 (G1, P4): a file reward code reads by a path in its code is part of what was reviewed.

G1: a reviewed reward read its rubric (scale 1) while it was sampled and reviewed; set to -1000 after the verdict,
the gate opened and training ran at -125. The table: how the reward reads it (open, pathlib's read_text,
json.load(open), os.open) x what happens to it after the verdict (nothing, edited, replaced by a link, removed) x
where it is judged (the gate; the trainer's own check, reviewed_reward_funcs, which train.py calls before the
first step). Then a file the trainer opens that the review never opened, and P4: a baseline measured while the
grader's rubric said one thing, promoted against once it said "every answer is right"."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from mcp_server.inspection.gate import check_inspection_gate, record_inspection_verdict
from mcp_server.inspection.models import InspectRequest, VerdictRequest
from mcp_server.inspection.review import inspect_rewards
from mcp_server.inspection.trained import reviewed_reward_funcs
from support import hand_made_run

READERS = {
    "open": "with open(RUBRIC) as f:\n        scale = json.loads(f.read())['scale']",
    "pathlib": "scale = json.loads(pathlib.Path(RUBRIC).read_text())['scale']",
    "json.load(open)": "scale = json.load(open(RUBRIC))['scale']",
    "os.open": "fd = os.open(RUBRIC, os.O_RDONLY)\n    scale = json.loads(os.read(fd, 4096))['scale']\n"
               "    os.close(fd)",
}
REWARD = '''import json, os, pathlib
RUBRIC = {rubric!r}
EXTRA = {extra!r}


def rubric_reward(completions, answer, **kwargs):
    {reader}
    if getattr(__import__("builtins"), "R9_EXTRA_BRANCH", None):  # a branch the review never took (the process's
        # state: a variable read would be pinned since round 17; a look at EXTRA would be a read of it)
        scale = json.load(open(EXTRA))["scale"]
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [scale * float(f"<answer>{{a}}</answer>" in t) for t, a in zip(texts, answer)]
'''


def _edit(path: Path) -> None:
    path.write_text(json.dumps({"scale": -1000.0}))


def _link(path: Path) -> None:
    other = path.with_name("other.json")
    other.write_text(json.dumps({"scale": -1000.0}))
    path.unlink()
    path.symlink_to(other)


CHANGES = {"unchanged": None, "edited": (_edit, "its content changed"),
           "replaced by a link": (_link, "replaced by a link"), "removed": (Path.unlink, "removed")}


def _reviewed(workspace, tiny_model, monkeypatch, reader: str, tag: str):
    """A run whose custom reward reads rubric.json by a path in its code, sampled, inspected and passed."""
    folder = workspace / "code"
    folder.mkdir()
    rubric = workspace / "rubric.json"
    rubric.write_text(json.dumps({"scale": 1.0}))
    module = f"rubricrew_{tag}_{abs(hash(str(workspace)))}"
    (folder / f"{module}.py").write_text(REWARD.format(rubric=str(rubric), extra=str(workspace / "extra.json"),
                                                       reader=READERS[reader]))
    monkeypatch.syspath_prepend(str(folder))
    right = "<answer>2</answer>"
    run_dir = hand_made_run(workspace, tiny_model, "reads", [[right, "", "", ""]] * 13, ["2"] * 13,
                            rewards=[{"name": f"{module}.rubric_reward"}])
    inspect_rewards(InspectRequest(run=str(run_dir)))
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana", agree_with_rest=True))
    return run_dir, rubric


def _trainer(run_dir: Path, capsys):
    """reviewed_reward_funcs as train.py calls it, then one reward call as TRL makes it: (exit code or None, the
    scores or None, stderr)."""
    try:
        funcs, _ = reviewed_reward_funcs(run_dir)
        scores = funcs[0](prompts=["Q0"], completions=["<answer>2</answer>"], completion_ids=[[]], answer=["2"])
    except SystemExit as exc:
        return exc.code, None, capsys.readouterr().err
    return None, scores, capsys.readouterr().err


@pytest.mark.parametrize("door", ["gate", "trainer"])
@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("reader", list(READERS))
def test_a_file_the_reward_reads_is_pinned(workspace, tiny_model, monkeypatch, capsys, reader, change, door):
    tag = "".join(c for c in f"{reader}{change}{door}" if c.isalnum())
    run_dir, rubric = _reviewed(workspace, tiny_model, monkeypatch, reader, tag)
    verdict = json.loads((run_dir / "inspection" / "verdict.json").read_text())
    assert str(rubric) in verdict["pins"].get("reward_reads", {}), verdict["pins"].keys()
    assert str(rubric) in (run_dir / "inspection" / "review.md").read_text()
    if CHANGES[change]:
        CHANGES[change][0](rubric)
    if door == "gate":
        gate = check_inspection_gate(run_dir)
        if CHANGES[change] is None:
            assert gate.passed, gate.reason
        else:
            assert not gate.passed, gate.reason
            assert str(rubric) in gate.reason and "rubric_reward" in gate.reason, gate.reason
            assert CHANGES[change][1] in gate.reason, gate.reason
        return
    code, scores, err = _trainer(run_dir, capsys)
    if CHANGES[change] is None:
        assert code is None and scores == [1.0], err
    else:
        assert code == 3 and scores is None, (code, scores, err)
        assert str(rubric) in err and "rubric_reward" in err and CHANGES[change][1] in err, err


def test_a_file_opened_only_in_training_is_refused_there(workspace, tiny_model, monkeypatch, capsys):
    """A file the review never opened (here: a branch its samples never took) is refused at its first open in
    a reward call, naming it: nobody reviewed what it scores."""
    run_dir, _ = _reviewed(workspace, tiny_model, monkeypatch, "open", "onlytraining")
    (workspace / "extra.json").write_text(json.dumps({"scale": -1000.0}))
    monkeypatch.setattr("builtins.R9_EXTRA_BRANCH", "1", raising=False)
    assert check_inspection_gate(run_dir).passed  # nothing the gate can know of
    code, scores, err = _trainer(run_dir, capsys)
    assert code == 3 and scores is None, (code, scores, err)
    assert str(workspace / "extra.json") in err and "never read when the rewards were reviewed" in err, err


def test_a_file_swapped_after_the_first_step_is_refused_at_its_next_open(workspace, tiny_model, monkeypatch,
                                                                          capsys):
    """Every open during a reward call is checked, not the first one only: a rubric swapped between steps."""
    run_dir, rubric = _reviewed(workspace, tiny_model, monkeypatch, "json.load(open)", "betweensteps")
    funcs, _ = reviewed_reward_funcs(run_dir)
    call = {"prompts": ["Q0"], "completions": ["<answer>2</answer>"], "completion_ids": [[]], "answer": ["2"]}
    assert funcs[0](**call) == [1.0]
    _edit(rubric)
    with pytest.raises(SystemExit) as refused:
        funcs[0](**call)
    assert refused.value.code == 3 and str(rubric) in capsys.readouterr().err


def test_a_file_changed_between_review_and_verdict_is_refused(workspace, tiny_model, monkeypatch):
    """The verdict vouches for the files as the review read them, not as they are when it is recorded."""
    from mcp_server.errors import UserInputError

    run_dir, rubric = _reviewed(workspace, tiny_model, monkeypatch, "open", "beforeverdict")
    inspect_rewards(InspectRequest(run=str(run_dir)))
    _edit(rubric)
    with pytest.raises(UserInputError, match="rubric.json"):
        record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana",
                                                 agree_with_rest=True))


GRADER = '''import json
RUBRIC = {rubric!r}


def rubric_grader(completions, answer, **kwargs):
    with open(RUBRIC) as f:
        rub = json.load(f)
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [1.0 if rub.get("all") else rub["scale"] * float(f"<answer>{{a}}</answer>" in t)
            for t, a in zip(texts, answer)]
'''


@pytest.mark.slow
def test_promote_refuses_a_baseline_whose_grader_read_another_file(workspace, tiny_model, monkeypatch):
    """P4: the base model's baseline measured with {"scale": 1}; the grader's file then says every answer is
    right. Promote refuses, naming the file, instead of PROMOTE +88.9 points; measured again, it files a
    baseline for the new content beside the first."""
    from mcp_server.errors import UserInputError
    from mcp_server.evaluation.evaluate import evaluate_model
    from mcp_server.evaluation.models import EvaluateRequest, PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint

    folder = workspace / "code"
    folder.mkdir()
    rubric = workspace / "grader.json"
    rubric.write_text(json.dumps({"scale": 1.0}))
    module = f"gradrew_{abs(hash(str(workspace)))}"
    (folder / f"{module}.py").write_text(GRADER.format(rubric=str(rubric)))
    monkeypatch.syspath_prepend(str(folder))
    goldens = workspace / "goldens.jsonl"
    goldens.write_text("".join(json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                               for i in range(6)))
    graders = [{"name": f"{module}.rubric_grader"}]
    first = evaluate_model(EvaluateRequest(model=str(tiny_model), goldens=str(goldens), graders=graders,
                                           baseline="write", max_new_tokens=4))

    run_dir = hand_made_run(workspace, tiny_model, "promoted", [["<answer>1</answer>", ""]] * 6,
                            [str(i + 1) for i in range(6)], rewards=graders)
    shutil.copytree(tiny_model, run_dir / "checkpoints")  # a model placed in a run never launched: judged as placed
    rubric.write_text(json.dumps({"scale": 1.0, "all": True}))
    with pytest.raises(UserInputError, match="grader.json") as refused:
        promote_checkpoint(PromoteRequest(run=str(run_dir), goldens=str(goldens)))
    assert "its content changed" in str(refused.value)
    again = evaluate_model(EvaluateRequest(model=str(tiny_model), goldens=str(goldens), graders=graders,
                                           baseline="write", max_new_tokens=4))
    assert again.baseline_written and again.baseline_path != first.baseline_path
    assert os.path.isfile(first.baseline_path)
    baseline = json.loads(Path(first.baseline_path).read_text())
    assert str(rubric) in baseline["graders_reads"], baseline.get("graders_reads")


AT_IMPORT = '''import json
RUBRIC = {rubric!r}
with open(RUBRIC) as f:
    SCALE = json.load(f)["scale"]


def rubric_reward(completions, answer, **kwargs):
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [SCALE * float(f"<answer>{{a}}</answer>" in t) for t, a in zip(texts, answer)]
'''


def test_a_file_read_at_import_is_pinned_when_the_module_was_imported_before(workspace, tiny_model, monkeypatch):
    """A module-level read, by a module a long-lived worker imported before the review (here: this process, through
    build_reward_funcs): the review still records it, and the gate names it once edited."""
    from mcp_server.rewards import build_reward_funcs

    folder = workspace / "code"
    folder.mkdir()
    rubric = workspace / "rubric.json"
    rubric.write_text(json.dumps({"scale": 1.0}))
    module = f"atimport_{abs(hash(str(workspace)))}"
    (folder / f"{module}.py").write_text(AT_IMPORT.format(rubric=str(rubric)))
    monkeypatch.syspath_prepend(str(folder))
    build_reward_funcs([{"name": f"{module}.rubric_reward"}])  # imported before any recording
    run_dir = hand_made_run(workspace, tiny_model, "atimport", [["<answer>2</answer>", "", "", ""]] * 13,
                            ["2"] * 13, rewards=[{"name": f"{module}.rubric_reward"}])
    inspect_rewards(InspectRequest(run=str(run_dir)))
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana", agree_with_rest=True))
    assert check_inspection_gate(run_dir).passed
    _edit(rubric)
    gate = check_inspection_gate(run_dir)
    assert not gate.passed and str(rubric) in gate.reason and f"{module} (its import)" in gate.reason, gate.reason


# ---------------------------------------------------------------- a rubric's identity, field by field (m10)
# What a file's pin is keyed by in a process that pinned it before (rewards.reads caches a digest by inode, size,
# mtime and ctime; above the whole-file limit the pin IS those fields): every way a rewrite after the verdict can
# leave them, generated: the content the same or not x the size x the inode (written in place or renamed over) x
# the mtime (put back, as `touch -r` or a tar extract does, or new); ctime always moves (the kernel sets it, nothing
# puts it back). A size change with the same content cannot happen: left out. The review and the check run in one
# process (a long-lived worker, the trainer after a review), so a cached digest is there to be trusted wrongly. A
# hashed file is refused exactly when its content changed; a large one (pinned by identity) whenever it was touched.
IDENTITY = {"content": ("same", "changed"), "size": ("same", "other"), "inode": ("same", "new"),
            "mtime": ("put back", "new")}
IDENTITY_ROWS = [dict(zip(IDENTITY, row)) for row in itertools.product(*IDENTITY.values())
                 if not (row[0] == "same" and row[1] == "other")]
SIZED = {("same", "same"): b'{"scale": 1.0}', ("changed", "same"): b'{"scale": 9.0}',
         ("changed", "other"): b'{"scale": -1000.0}'}


def _rewritten(path: Path, row: dict) -> None:
    before = os.stat(path)
    data = SIZED[(row["content"], row["size"])]
    if row["inode"] == "new":
        staged = path.with_name(".staged")
        staged.write_bytes(data)
        os.replace(staged, path)
    else:
        with open(path, "r+b") as handle:
            handle.write(data)
            handle.truncate()
    mtime = before.st_mtime_ns + (0 if row["mtime"] == "put back" else 10**9)
    os.utime(path, ns=(before.st_atime_ns, mtime))
    while os.stat(path).st_ctime_ns == before.st_ctime_ns:  # within the clock's tick: let ctime move, as it will
        time.sleep(0.005)
        os.chmod(path, before.st_mode)
    after = os.stat(path)
    assert (after.st_ino == before.st_ino) == (row["inode"] == "same"), row
    assert (after.st_size == before.st_size) == (row["size"] == "same"), row
    assert (after.st_mtime_ns == before.st_mtime_ns) == (row["mtime"] == "put back"), row


@pytest.mark.parametrize("door", ["gate", "trainer"])
@pytest.mark.parametrize("pinned", ["hashed", "large (by identity)"])
@pytest.mark.parametrize("row", IDENTITY_ROWS, ids=["-".join(f"{k} {v}" for k, v in r.items()) for r in IDENTITY_ROWS])
def test_a_rubric_rewritten_after_the_verdict_is_judged_by_content_whatever_its_identity_keeps(
        workspace, tiny_model, monkeypatch, capsys, row, pinned, door):
    from mcp_server.rewards import reads

    if pinned != "hashed":
        monkeypatch.setattr(reads, "WHOLE_FILE_BYTES", 4)  # the rubric is above the whole-file limit
    tag = "".join(c for c in "".join(row.values()) + pinned + door if c.isalnum())
    run_dir, rubric = _reviewed(workspace, tiny_model, monkeypatch, "open", tag)
    assert check_inspection_gate(run_dir).passed  # pinned (and its digest cached) in this process
    _rewritten(rubric, row)
    refused = row["content"] == "changed" or pinned != "hashed"
    if door == "gate":
        gate = check_inspection_gate(run_dir)
        assert gate.passed != refused, (row, pinned, gate.reason)
        assert not refused or (str(rubric) in gate.reason and "its content changed" in gate.reason), gate.reason
        return
    code, scores, err = _trainer(run_dir, capsys)
    if refused:
        assert code == 3 and scores is None and str(rubric) in err and "its content changed" in err, (row, err)
    else:
        assert code is None and scores == [1.0], (row, err)


# ---------------------------------------------------------------- what the reward's import loads (round 15)
# Every route by which the import system, or a loader the reward calls, loads a file while the reward imports and
# runs: pinned (the reward-code hash for a module imported by its name, copied for the trainer; the reads pins for
# one loaded by path) or refused at the review naming it. Changed after the verdict: the gate and the trainer refuse,
# naming the file. Extension modules are built with the system C compiler (Python's sysconfig), never skipped.
EXTENSION = '''#include <Python.h>
static long calls = 0;
static PyObject* val(PyObject* s, PyObject* a) {{ calls++; return PyFloat_FromDouble({value}); }}
static PyMethodDef M[] = {{{{"val", val, METH_NOARGS, ""}}, {{0}}}};
static struct PyModuleDef D = {{PyModuleDef_HEAD_INIT, "{name}", 0, -1, M}};
PyMODINIT_FUNC PyInit_{name}(void) {{ return PyModule_Create(&D); }}
'''


def _extension(folder: Path, name: str, value: str) -> Path:
    """folder/<name><EXT_SUFFIX>: a C extension module whose val() returns the C expression `value` (`calls`: how
    many times it was called), built with the system C compiler; replaced whole (a new inode), as a rebuild does."""
    import subprocess
    import sysconfig

    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "no C compiler (cc, gcc) on this machine: the extension-module rows need one"
    source = folder / f".{name}.c"
    source.write_text(EXTENSION.format(name=name, value=value))
    built = folder / f".{name}.so.new"
    done = subprocess.run([compiler, "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}", str(source),
                           "-o", str(built)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    source.unlink()
    target = folder / f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}"
    os.replace(built, target)
    return target


BY_PATH = ('import importlib.util\n_s = importlib.util.spec_from_file_location("{helper}", {path!r})\n'
           '_m = importlib.util.module_from_spec(_s)\n_s.loader.exec_module(_m)\nval = _m.val\n')
RECIPE = BY_PATH.replace("_s.loader.exec_module", "import sys\nsys.modules[_s.name] = _m\n_s.loader.exec_module")
LOADED = '''{load}

def loaded_reward(completions, **kwargs):
    return [val() for _ in completions]
'''


def _py_helper(folder: Path, name: str, value: str) -> Path:
    path = folder / "helpers" / f"{name}.py"
    path.parent.mkdir(exist_ok=True)
    value = "1.0 if _n[0] <= 1 else 5.0" if value == LATER else value
    path.write_text(f"_n = [0]\ndef val():\n    _n[0] += 1\n    return {value}\n")
    return path


# route -> (the helper's maker, the reward module's load code, where the trainer loads it: "copy" (the reviewed
# copy in inspection/reward_code/, by name) or "path" (where the review loaded it))
ROUTES = {
    "an extension module imported by its name": (lambda f, n, v: _extension(f, n, v), "from {helper} import val",
                                                 "copy"),
    "an extension module loaded by path": (lambda f, n, v: _extension(f / "helpers", n, v), BY_PATH, "path"),
    "a source file loaded by path (spec_from_file_location)": (_py_helper, BY_PATH, "path"),
    "a source file loaded by path, in sys.modules first (the documented recipe)": (_py_helper, RECIPE, "path"),
}
LATER = "calls <= 1 ? 1.0 : 5.0"  # the review's scores on its first call (the trainer's replay), 5.0 after


def _loading_run(workspace, tiny_model, monkeypatch, route: str, tag: str):
    """A run whose reward loads a helper by `route`, inspected and passed: (run, the helper's file, the module)."""
    folder = workspace / "code"
    (folder / "helpers").mkdir(parents=True)
    module, helper = f"loadrew_{tag}", f"loadhelp_{tag}"
    make, load, _ = ROUTES[route]
    path = make(folder, helper, "1.0")
    (folder / f"{module}.py").write_text(LOADED.format(load=load.format(helper=helper, path=str(path))))
    monkeypatch.syspath_prepend(str(folder))
    run_dir = hand_made_run(workspace, tiny_model, "loads", [["a", "b", "c", "d"]] * 13, ["2"] * 13,
                            rewards=[{"name": f"{module}.loaded_reward"}])
    inspect_rewards(InspectRequest(run=str(run_dir)))
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana", agree_with_rest=True))
    assert check_inspection_gate(run_dir).passed
    return run_dir, path, module


def _fresh(*names: str) -> None:
    """The modules dropped, as a new process (the trainer's) has never imported them."""
    import sys

    for name in names:
        sys.modules.pop(name, None)


@pytest.mark.slow  # builds C extensions with the system compiler (a process each)
@pytest.mark.parametrize("door", ["gate", "trainer"])
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_file_the_rewards_import_loads_is_pinned(workspace, tiny_model, monkeypatch, capsys, route, door):
    tag = "".join(c for c in route + door if c.isalnum())[-40:] + str(abs(hash(str(workspace))))[:6]
    run_dir, path, module = _loading_run(workspace, tiny_model, monkeypatch, route, tag)
    make, _, where = ROUTES[route]
    if door == "gate":
        make(path.parents[1] if path.parent.name == "helpers" else path.parent, path.name.split(".")[0], LATER)
        gate = check_inspection_gate(run_dir)
        assert not gate.passed and path.name in gate.reason, gate.reason
        return
    copy = run_dir / "inspection" / "reward_code" / path.name
    changed = copy if where == "copy" else path
    assert changed.is_file(), sorted(p.name for p in changed.parent.iterdir())
    make(changed.parents[1] if changed.parent.name == "helpers" else changed.parent, path.name.split(".")[0], LATER)
    _fresh(module, f"loadhelp_{tag}")
    code, scores, err = _trainer(run_dir, capsys)
    assert code == 3 and scores is None and str(changed) in err, (code, scores, err)


def test_a_zip_archive_on_the_path_is_refused_alike_where_it_is_imported_and_where_it_is_only_resolved(
        workspace, tiny_model, monkeypatch):
    """zipimport: a member of an archive is no file a pin can name; the review refuses it, naming the archive (not
    an unexpected NotADirectoryError). One refusal (rewards.source_only.zip_refusal), said alike where the import
    happens (the reward imports its helper) and where the read-only server resolves it from the files (it imports
    nothing): the module, the archive and what is accepted instead."""
    import zipfile

    from mcp_server.errors import UserInputError

    folder = workspace / "code"
    folder.mkdir()
    archive = workspace / "helpers.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("ziphelp_r15.py", "def val():\n    return 1.0\n")
    (folder / "ziprew_r15.py").write_text(LOADED.format(load="from ziphelp_r15 import val"))
    monkeypatch.syspath_prepend(str(archive))
    monkeypatch.syspath_prepend(str(folder))
    run_dir = hand_made_run(workspace, tiny_model, "zip", [["a", "b", "c", "d"]] * 13, ["2"] * 13,
                            rewards=[{"name": "ziprew_r15.loaded_reward"}])
    said = {}
    for mode in ("imported", "read-only"):
        monkeypatch.setenv("LLM_FINETUNING_READ_ONLY", "1" if mode == "read-only" else "0")
        with pytest.raises(UserInputError) as refused:
            inspect_rewards(InspectRequest(run=str(run_dir)))
        message = str(refused.value)
        assert f"ziphelp_r15 would be imported from the zip archive {archive}: refused" in message, (mode, message)
        assert "a .py source file" in message and "unpack it beside the reward" in message, (mode, message)
        said[mode] = message[message.index("ziphelp_r15 would be"):]
    assert said["imported"] == said["read-only"], said
    assert not (run_dir / "inspection" / "review.json").exists()


@pytest.mark.slow  # the helper beside it is loaded by path; one inspection
def test_a_module_that_writes_the_reviewed_bytes_back_over_itself_is_refused_by_the_trainer(
        workspace, tiny_model, monkeypatch, capsys):
    """Round 15 G4: the reviewed copy replaced after the launch by a module that, at its import, writes the
    reviewed bytes back over its own file: the trainer hashes the bytes it compiled, not the file read again."""
    route = "a source file loaded by path (spec_from_file_location)"
    run_dir, _, module = _loading_run(workspace, tiny_model, monkeypatch, route, "selfrestore")
    copy = run_dir / "inspection" / "reward_code" / f"{module}.py"
    reviewed = copy.read_text()
    evil = reviewed.replace("return [val() for _ in completions]", "return _later(completions)")  # same lines
    copy.write_text(evil + "_n = [0]\ndef _later(completions):\n    _n[0] += 1\n"
                    "    return [1.0 if _n[0] <= 1 else 5.0 for _ in completions]\n"
                    f"open(__file__, 'w').write({reviewed!r})\n")
    _fresh(module, "loadhelp_selfrestore")
    code, scores, err = _trainer(run_dir, capsys)
    assert code == 3 and scores is None and str(copy) in err, (code, scores, err)
    assert copy.read_text() == reviewed  # it did write itself back: its file alone says nothing


SO_GRADER = '''import {helper}


def g(completions, **kwargs):
    return [{helper}.val() for _ in completions]
'''
HONEST_GRADER = '''def g(completions, **kwargs):
    return [0.0 for _ in completions]
'''


def _grader_so(folder: Path, module: str, value: str) -> Path:
    (folder / f"{module}.py").write_text(SO_GRADER.format(helper=f"{module}_gk"))
    return _extension(folder, f"{module}_gk", value)


def _grader_restoring(folder: Path, module: str, value: str) -> Path:
    path = folder / f"{module}.py"
    if value == "0.0":
        path.write_text(HONEST_GRADER)
    else:  # every golden passes, and the baseline's bytes are written back at its import
        path.write_text(HONEST_GRADER.replace("0.0", "1.0") + f"open(__file__, 'w').write({HONEST_GRADER!r})\n")
    return path


GRADER_ROUTES = {"a C extension the grader imports, rebuilt": _grader_so,
                 "a grader that writes the baseline's bytes back over itself": _grader_restoring}


@pytest.mark.slow  # decodes (the tiny model, 6 goldens of 4 tokens); builds a C extension
@pytest.mark.parametrize("route", list(GRADER_ROUTES))
def test_promote_refuses_a_baseline_whose_graders_loaded_other_code(workspace, tiny_model, monkeypatch, route):
    """Round 15 F1/F2: the base model's baseline measured with every golden failing; then the grader's extension
    rebuilt to pass them all, or the grader replaced by one that passes them all and writes the baseline's bytes
    back at its import. Promote refuses naming the file, not PROMOTE +100 points."""
    from mcp_server.errors import UserInputError
    from mcp_server.evaluation.evaluate import evaluate_model
    from mcp_server.evaluation.models import EvaluateRequest, PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint

    folder = workspace / "code"
    folder.mkdir()
    module = f"grload_{''.join(c for c in route if c.isalnum())[:12]}_{abs(hash(str(workspace)))}"
    path = GRADER_ROUTES[route](folder, module, "0.0")
    monkeypatch.syspath_prepend(str(folder))
    goldens = workspace / "goldens.jsonl"
    goldens.write_text("".join(json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                               for i in range(6)))
    graders = [{"name": f"{module}.g"}]
    first = evaluate_model(EvaluateRequest(model=str(tiny_model), goldens=str(goldens), graders=graders,
                                           baseline="write", max_new_tokens=4))
    assert first.baseline_written and first.passed == 0, first.baseline_note
    run_dir = hand_made_run(workspace, tiny_model, "promoted", [["<answer>1</answer>", ""]] * 6,
                            [str(i + 1) for i in range(6)], rewards=graders)
    shutil.copytree(tiny_model, run_dir / "checkpoints")
    GRADER_ROUTES[route](folder, module, "1.0")
    _fresh(module, f"{module}_gk")  # as a new process finds them
    with pytest.raises(UserInputError) as refused:
        promote_checkpoint(PromoteRequest(run=str(run_dir), goldens=str(goldens)))
    assert str(path) in str(refused.value), refused.value

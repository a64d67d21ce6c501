"""Issue 48, round 10 G3: a file reward code reads is pinned whatever audit event its read goes through.

A reward read its rubric from a SQLite file (`sqlite3.connect`, which opens it in C: no "open" event); the
rubric changed after the verdict and training used it. The table: each family of Python 3.11's audit events that
name a path a reward reads (rewards.reads: sqlite3.connect, os.listdir/os.scandir and what lists through them,
and those that read through "open": shutil's copies, mmap, io.open_code) x the file unchanged or changed x where
it is judged: the verdict (changed after the review), the gate and the trainer (changed after the verdict). Then
what cannot be pinned, refused naming the call: ctypes and SQLite's extension loading, from reward code."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from mcp_server.errors import UserInputError
from mcp_server.inspection.gate import check_inspection_gate, record_inspection_verdict
from mcp_server.inspection.models import InspectRequest, VerdictRequest
from mcp_server.inspection.review import inspect_rewards
from mcp_server.inspection.trained import reviewed_reward_funcs
from support import hand_made_run


def _database(workspace: Path) -> Path:
    db = workspace / "rubric.db"
    con = sqlite3.connect(db)
    con.execute("create table r (scale real)")
    con.execute("insert into r values (1.0)")
    con.commit()
    con.close()
    return db


def _redatabase(db: Path) -> None:
    con = sqlite3.connect(db)
    con.execute("update r set scale = scale + 1")
    con.commit()
    con.close()


def _folder(workspace: Path) -> Path:
    folder = workspace / "answers"
    folder.mkdir()
    (folder / "one.txt").write_text("1")
    return folder


def _refolder(folder: Path) -> None:
    (folder / f"{len(list(folder.iterdir()))}.txt").write_text("another")


def _rubric(workspace: Path) -> Path:
    rubric = workspace / "rubric.json"
    rubric.write_text(json.dumps({"scale": 1.0}))
    return rubric


def _rerubric(rubric: Path) -> None:
    rubric.write_text(json.dumps({"scale": json.loads(rubric.read_text())["scale"] + 1}))


COUNT = "scale = float({})"
# family: (what it reads, how it changes (each time anew), the reward's lines that set `scale` from PATH, the
# pinned key's suffix)
FAMILIES = {
    "sqlite3.connect": (_database, _redatabase, "con = sqlite3.connect(PATH)\n    "
                        "scale = con.execute('select scale from r').fetchone()[0]\n    con.close()", ""),
    "sqlite3.connect (a URI)": (_database, _redatabase, "con = sqlite3.connect('file:' + PATH + '?mode=ro', uri=True)"
                                "\n    scale = con.execute('select scale from r').fetchone()[0]\n    con.close()", ""),
    "os.listdir": (_folder, _refolder, COUNT.format("len(os.listdir(PATH))"), "/"),
    "os.scandir": (_folder, _refolder, COUNT.format("len(list(os.scandir(PATH)))"), "/"),
    "glob.glob": (_folder, _refolder, COUNT.format("len(glob.glob(PATH + '/*'))"), "/"),
    "pathlib.Path.glob": (_folder, _refolder, COUNT.format("len(list(pathlib.Path(PATH).glob('*')))"), "/"),
    "os.walk": (_folder, _refolder, COUNT.format("sum(len(f) for _, _, f in os.walk(PATH))"), "/"),
    "shutil.copyfile": (_rubric, _rerubric, "copy = tempfile.mkdtemp() + '/r.json'\n    "
                        "shutil.copyfile(PATH, copy)\n    scale = json.load(open(copy))['scale']", ""),
    "mmap": (_rubric, _rerubric, "fd = os.open(PATH, os.O_RDONLY)\n    "
             "scale = json.loads(mmap.mmap(fd, 0, access=mmap.ACCESS_READ)[:])['scale']\n    os.close(fd)", ""),
    "io.open_code": (_rubric, _rerubric, "scale = json.loads(io.open_code(PATH).read())['scale']", ""),
    # opened for writing too, but what was there is read: a read, not the reward's scratch
    "open r+": (_rubric, _rerubric, "scale = json.loads(open(PATH, 'r+').read())['scale']", ""),
    "open a+": (_rubric, _rerubric, "f = open(PATH, 'a+')\n    f.seek(0)\n    "
                "scale = json.loads(f.read())['scale']", ""),
    "os.open O_RDWR": (_rubric, _rerubric, "fd = os.open(PATH, os.O_RDWR)\n    "
                       "scale = json.loads(os.read(fd, 1 << 16))['scale']\n    os.close(fd)", ""),
    # round 11: a path through /proc, a folder by descriptor, O_CREAT or an append-open on an existing file, and
    # makedirs(exist_ok) on an existing folder were read unpinned
    "open /proc/self/root": (_rubric, _rerubric, "scale = json.load(open('/proc/self/root' + PATH))['scale']", ""),
    "os.listdir(fd)": (_folder, _refolder, "fd = os.open(PATH, os.O_RDONLY)\n    "
                       "scale = float(len(os.listdir(fd)))\n    os.close(fd)", "/"),
    "os.open O_CREAT": (_rubric, _rerubric, "fd = os.open(PATH, os.O_RDONLY | os.O_CREAT)\n    "
                        "scale = json.loads(os.read(fd, 1 << 16))['scale']\n    os.close(fd)", ""),
    "append-open, then open": (_rubric, _rerubric, "open(PATH, 'a').close()\n    "
                               "scale = json.load(open(PATH))['scale']", ""),
    "makedirs(exist_ok), then listdir": (_folder, _refolder, "os.makedirs(PATH, exist_ok=True)\n    "
                                         "scale = float(len(os.listdir(PATH)))", "/"),
    # round 11: importlib's readers, this package's reader for its caller, a name relative to a folder's descriptor
    "__loader__.get_data": (_rubric, _rerubric, "scale = json.loads(__loader__.get_data(PATH))['scale']", ""),
    "pkgutil.get_data": (_rubric, _rerubric, "scale = json.loads(pkgutil.get_data(__name__, "
                         "os.path.relpath(PATH, os.path.dirname(__file__))))['scale']", ""),
    "mcp_server.userfiles.read_json": (_rubric, _rerubric, "from mcp_server.userfiles import read_json\n    "
                                       "scale = read_json(PATH, 'rubric')['scale']", ""),
    "os.open(dir_fd=)": (_rubric, _rerubric, "d = os.open(os.path.dirname(PATH), os.O_RDONLY)\n    "
                         "fd = os.open(os.path.basename(PATH), os.O_RDONLY, dir_fd=d)\n    "
                         "scale = json.loads(os.read(fd, 1 << 16))['scale']\n    os.close(fd)\n    os.close(d)", ""),
    # a native reader (no audit event of its own: rewards.native_reads)
    "torch.from_file": (_rubric, _rerubric, "import torch\n    scale = json.loads(bytes(torch.from_file(PATH, "
                        "size=os.path.getsize(PATH), dtype=torch.uint8).tolist()))['scale']", ""),
}
REWARD = '''import ctypes, glob, io, json, mmap, os, pathlib, pkgutil, shutil, sqlite3, sys, tempfile
PATH = {path!r}


def read_reward(completions, answer, **kwargs):
    {reader}
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [scale * float(f"<answer>{{a}}</answer>" in t) for t, a in zip(texts, answer)]
'''


def _run(workspace, tiny_model, monkeypatch, reader: str, path: Path, tag: str) -> Path:
    folder = workspace / "code"
    folder.mkdir()
    module = f"readrew_{''.join(c for c in tag if c.isalnum())}_{abs(hash(str(workspace)))}"
    (folder / f"{module}.py").write_text(REWARD.format(path=str(path), reader=reader))
    monkeypatch.syspath_prepend(str(folder))
    right = "<answer>2</answer>"
    return hand_made_run(workspace, tiny_model, "reads", [[right, "", "", ""]] * 13, ["2"] * 13,
                         rewards=[{"name": f"{module}.read_reward"}])


def _verdict(run_dir: Path) -> None:
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana", agree_with_rest=True))


def _trainer(run_dir: Path, capsys):
    try:
        funcs, _ = reviewed_reward_funcs(run_dir)
        scores = funcs[0](prompts=["Q0"], completions=["<answer>2</answer>"], completion_ids=[[]], answer=["2"])
    except SystemExit as exc:
        return exc.code, None, capsys.readouterr().err
    return None, scores, capsys.readouterr().err


@pytest.mark.parametrize("changed", [False, True], ids=["unchanged", "changed"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_what_a_reward_reads_through_any_audit_event_is_pinned(workspace, tiny_model, monkeypatch, capsys, family,
                                                              changed):
    make, change, reader, suffix = FAMILIES[family]
    path = make(workspace)
    run_dir = _run(workspace, tiny_model, monkeypatch, reader, path, family + str(changed))
    inspect_rewards(InspectRequest(run=str(run_dir)))
    review = json.loads((run_dir / "inspection" / "review.json").read_text())
    assert str(path) + suffix in review.get("reward_reads", {}), review.get("reward_reads")
    if changed:  # after the review, the verdict refuses it; reviewed again, then changed after the verdict
        change(path)
        with pytest.raises(UserInputError, match=path.name):
            _verdict(run_dir)
        inspect_rewards(InspectRequest(run=str(run_dir)))
        _verdict(run_dir)
        change(path)
    else:
        _verdict(run_dir)
    gate = check_inspection_gate(run_dir)
    code, scores, err = _trainer(run_dir, capsys)
    if not changed:
        assert gate.passed, gate.reason
        assert code is None and scores == [1.0], err
    else:
        assert not gate.passed and path.name in gate.reason and "read_reward" in gate.reason, gate.reason
        assert code == 3 and scores is None and path.name in err, (code, scores, err)


UNPINNABLE = {
    "ctypes.dlopen": "ctypes.CDLL('libc.so.6')\n    scale = 1.0",
    "sqlite3.enable_load_extension": "con = sqlite3.connect(':memory:')\n    "
                                     "sys.audit('sqlite3.enable_load_extension', con, True)\n    scale = 1.0",
}


@pytest.mark.parametrize("call", list(UNPINNABLE))
def test_a_read_that_cannot_be_pinned_is_refused_naming_the_call(workspace, tiny_model, monkeypatch, call):
    """ctypes (a C library reads whatever it likes) and SQLite's extensions cannot be pinned: the review refuses
    the reward, naming the call (this build's sqlite3 has no enable_load_extension: its audit event is raised as
    the module would raise it). A ':memory:' database is no file and is fine."""
    run_dir = _run(workspace, tiny_model, monkeypatch, UNPINNABLE[call], workspace / "none", call)
    with pytest.raises(UserInputError, match=call.replace(".", r"\.")):
        inspect_rewards(InspectRequest(run=str(run_dir)))


@pytest.mark.slow
def test_the_cli_gate_refuses_a_sqlite_rubric_changed_after_the_verdict(workspace, tiny_model, monkeypatch):
    """Round 10's G3 end to end through the CLI (processes; the review and the gate's check in the worker): the
    review pins rubric.db, the verdict is recorded, the rubric changes, the gate refuses naming it."""
    import os

    from conftest import run_cli, run_cli_json

    db = _database(workspace)
    run_dir = _run(workspace, tiny_model, monkeypatch, FAMILIES["sqlite3.connect"][2], db, "clisqlite")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(workspace / "code"), os.environ.get("PYTHONPATH")])),
           "LLM_FINETUNING_WORKSPACE": str(workspace)}
    steps = [("inspect-rewards", str(run_dir)),
             ("record-inspection-verdict", str(run_dir), "--verdict", "pass", "--reviewer", "ana", "--agree-rest")]
    for step in steps:
        proc = run_cli(*step, cwd=workspace, env=env, process=True)
        assert proc.returncode == 0, (step, proc.stderr)
    proc, gate = run_cli_json("check-inspection-gate", str(run_dir), cwd=workspace, env=env, process=True)
    assert gate["passed"], gate
    _redatabase(db)
    proc, gate = run_cli_json("check-inspection-gate", str(run_dir), cwd=workspace, env=env, process=True)
    assert not gate["passed"] and "rubric.db" in gate["reason"] and "read_reward" in gate["reason"], gate


def test_what_importlib_lists_for_a_reward_is_not_its_input(tmp_path, monkeypatch):
    """importlib.metadata lists every folder on sys.path (the working directory among them, which differs between
    the review's worker and the trainer): the import machinery's business, not a reward's input. The reward's own
    listing of a folder is pinned."""
    from mcp_server.rewards import reads
    from mcp_server.rewards.dotted import import_dotted

    folder = _folder(tmp_path)
    module = f"metarew_{abs(hash(str(tmp_path)))}"
    (tmp_path / f"{module}.py").write_text(
        "import importlib.metadata, os\n"
        f"def f(completions, **kw):\n    importlib.metadata.version('pytest')\n    os.listdir({str(folder)!r})\n"
        "    return [1.0 for c in completions]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with reads.recording() as read:
        with reads.calling("f"):
            import_dotted(f"{module}.f", "rewards")(["a"])
    assert [p for p in read.pins() if p.endswith("/")] == [str(folder) + "/"], read.pins()


# ---------------------------------------------------------------- a SQLite rubric in every journal mode (m10)
# Every journal mode SQLite has (sqlite.org/pragma.html#pragma_journal_mode), x where a change after the verdict
# lies: committed and closed (in the database file), or committed by a writer that still holds its connection with
# checkpoints off (in WAL mode the rows sit in rubric.db-wal, the database file untouched). Each side file SQLite
# keeps beside the database while that writer holds it is found on disk, not listed here: every one of them must be
# pinned by the review, but the WAL's shared-memory index (-shm), which SQLite rebuilds from the -wal and whose read
# marks every reader rewrites: it holds no row (m10: rows held in the -wal trained unpinned).
JOURNAL_MODES = ("delete", "truncate", "persist", "memory", "wal", "off")
WHERE_CHANGED = ("unchanged", "committed", "held in its side files")
NO_ROWS = {"-shm": "the WAL's index, rebuilt from the -wal; its read marks change at every read"}


def _database_in(workspace: Path, mode: str) -> Path:
    db = workspace / "rubric.db"
    con = sqlite3.connect(db)
    assert con.execute(f"pragma journal_mode={mode}").fetchone()[0] == mode  # this build accepts it
    con.execute("create table r (scale real)")
    con.execute("insert into r values (1.0)")
    con.commit()
    con.close()
    return db


def _changed_in(db: Path, mode: str, where: str, held: list) -> None:
    con = sqlite3.connect(db)
    con.execute(f"pragma journal_mode={mode}")
    con.execute("pragma wal_autocheckpoint=0")
    con.execute("update r set scale = scale + 1")
    con.commit()
    if where == "committed":
        con.close()
    else:
        held.append(con)  # a writer still holding the database: its last commit not checkpointed


@pytest.mark.parametrize("where", WHERE_CHANGED)
@pytest.mark.parametrize("mode", JOURNAL_MODES)
def test_a_sqlite_rubric_is_pinned_in_every_journal_mode_with_every_side_file(workspace, tiny_model, monkeypatch,
                                                                              capsys, mode, where):
    db = _database_in(workspace, mode)
    run_dir = _run(workspace, tiny_model, monkeypatch, FAMILIES["sqlite3.connect"][2], db, f"{mode}{where}")
    inspect_rewards(InspectRequest(run=str(run_dir)))
    _verdict(run_dir)
    held: list = []
    try:
        if where != "unchanged":
            _changed_in(db, mode, where, held)
        pinned = json.loads((run_dir / "inspection" / "review.json").read_text())["reward_reads"]
        side = sorted(p.name[len(db.name):] for p in db.parent.glob(db.name + "-*"))
        assert str(db) in pinned, pinned
        assert [s for s in side if s not in NO_ROWS and str(db) + s not in pinned] == [], (side, sorted(pinned))
        gate = check_inspection_gate(run_dir)
        code, scores, err = _trainer(run_dir, capsys)
    finally:
        for con in held:
            con.close()
    if where == "unchanged":
        assert gate.passed, gate.reason
        assert code is None and scores == [1.0], err
    else:
        assert not gate.passed and db.name in gate.reason and "read_reward" in gate.reason, gate.reason
        assert code == 3 and scores is None and db.name in err, (code, scores, err)

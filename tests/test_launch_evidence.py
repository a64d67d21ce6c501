"""What shows a run was launched, as a table (issue 48, the m13 audit's survivor 12: `_holds_a_file` counted any
entry, so the empty `checkpoints/completions/` GRPOTrainer makes when it is built, before its first step, read as
a launch; no test built that folder).

Every place launch evidence is read from (Run.launched_evidence: the launch record, the promotion, train/logs/,
export/, checkpoints/, an earlier attempt's train/logs-attempt-<n>/, the config's own output_dir) x every form that
place can take (absent, an empty folder, empty nested folders, one file, one file deep in folders, a link to a
file, a link to nothing) -> whether the run reads as launched, naming the place, and so whether emit-config
--run-dir into it and a fresh launch_training are refused (naming it) or go on (a launch then stops at the next
gate: these runs were never inspected; a launch record that is not a regular JSON file is refused as one). A
folder counts only when a file is somewhere under it; a record's place counts when anything stands there; an
earlier attempt's logs folder counts whatever it holds (only a launcher's archiving makes one).

The places are checked against the run's layout (the members of `Run`): a member that makes a run read as launched
without a row here fails `test_every_layout_member_that_shows_a_launch_has_rows`. Nothing trains; the emissions
and launches run in this process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import cli_here

from mcp_server.errors import UserInputError
from mcp_server.runs import FOLDERS, Run
from mcp_server.training.launch import launch_training
from mcp_server.training.models import LaunchRequest

EMIT = ("emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu")
OUT = "out"  # the output_dir of the row about the config's own output_dir

# place -> (its kind, its path relative to the run). Kinds: "folder" (a file anywhere under it), "record" (anything
# in its place), "archive" (the folder itself).
PLACES = {
    "run_json": ("record", "run.json"),
    "promotion": ("record", "promotion.json"),
    "logs": ("folder", "train/logs"),
    "export": ("folder", "export"),
    "checkpoints": ("folder", "checkpoints"),
    "attempt_logs": ("archive", "train/logs-attempt-1"),
    "output_dir": ("folder", OUT),
}


def _file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}\n")


def _link(path: Path, target: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


# form -> (how it is made at `path` in `run`, for a place of each kind; None: the kind has no such form)
FORMS = {
    "absent": {kind: (lambda run, path: None) for kind in ("folder", "record", "archive")},
    "an empty folder": {kind: (lambda run, path: path.mkdir(parents=True)) for kind in ("folder", "record", "archive")},
    "empty nested folders": {
        "folder": lambda run, path: [(path / sub).mkdir(parents=True) for sub in ("completions", "runs/a/b")],
        "archive": lambda run, path: (path / "a" / "b").mkdir(parents=True)},
    "one file": {"folder": lambda run, path: _file(path / "trainer_state.json"),
                 "record": lambda run, path: _file(path),
                 "archive": lambda run, path: _file(path / "stdout.log")},
    "one file deep in folders": {"folder": lambda run, path: _file(path / "completions" / "a" / "b" / "step-1.json")},
    "a link to a file": {"folder": lambda run, path: _link(path / "completions" / "latest", Run(run).config),
                         "record": lambda run, path: _link(path, Run(run).config)},
    "a link to nothing": {"folder": lambda run, path: _link(path / "completions" / "latest", run / "nothing"),
                          "record": lambda run, path: _link(path, run / "nothing")},
}
SHOWS_A_LAUNCH = {  # (kind, form) -> whether the run then reads as launched
    ("folder", "absent"): False, ("folder", "an empty folder"): False, ("folder", "empty nested folders"): False,
    ("folder", "one file"): True, ("folder", "one file deep in folders"): True, ("folder", "a link to a file"): True,
    ("folder", "a link to nothing"): False,
    ("record", "absent"): False, ("record", "an empty folder"): True, ("record", "one file"): True,
    ("record", "a link to a file"): True, ("record", "a link to nothing"): False,
    ("archive", "absent"): False, ("archive", "an empty folder"): True, ("archive", "empty nested folders"): True,
    ("archive", "one file"): True,
}
ROWS = [(place, form) for place, (kind, _) in PLACES.items() for form, makers in FORMS.items() if kind in makers]


def test_every_row_has_its_answer():
    assert {(PLACES[place][0], form) for place, form in ROWS} == set(SHOWS_A_LAUNCH)


def _members(run: Run) -> dict[str, Path]:
    """Every path member of the run's layout (Run's properties), by name."""
    return {name: getattr(run, name) for name, member in vars(Run).items()
            if isinstance(member, property) and name != "name"}


def test_every_layout_member_that_shows_a_launch_has_rows(tmp_path):
    """One file at (or in) each member of the layout, alone in a run: it shows a launch exactly when the member
    is, or lies under, a place of the table."""
    places = [Path(rel) for kind, rel in (PLACES[p] for p in PLACES if p != "output_dir")]
    wrong = {}
    for name, path in _members(Run(tmp_path / "layout")).items():
        run = Run(tmp_path / name)
        rel = path.relative_to(tmp_path / "layout")
        where = run.dir / rel
        _file(where / "x" if name in FOLDERS else where)
        shows = bool(run.launched_evidence())
        under = any(rel == p or p in rel.parents for p in places)
        if shows != under:
            wrong[name] = (str(rel), shows)
    assert not wrong, f"members whose launch evidence is not the table's (member: (path, shows a launch)): {wrong}"


@pytest.fixture(scope="module")
def warm(tiny_model, tmp_path_factory):
    """One emission first (the tiny model and the emission's imports), so each row's own emissions are quick."""
    root = tmp_path_factory.mktemp("evidence-warm")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLM_FINETUNING_WORKSPACE", str(root))
        (root / "runs" / "warm").mkdir(parents=True)
        assert cli_here(*EMIT, "--run-dir", str(root / "runs" / "warm")).returncode == 0


@pytest.mark.usefixtures("warm")
@pytest.mark.parametrize(("place", "form"), ROWS, ids=[f"{place}: {form}" for place, form in ROWS])
def test_a_place_of_launch_evidence_in_each_form(place, form, workspace):
    kind, rel = PLACES[place]
    run_dir = workspace / "runs" / "r"
    run_dir.mkdir(parents=True)
    options = ("--override", f"output_dir={OUT}") if place == "output_dir" else ()
    first = cli_here(*EMIT, "--run-dir", str(run_dir), *options)
    assert first.returncode == 0, first.stderr
    FORMS[form][kind](run_dir, run_dir / rel)
    launched = SHOWS_A_LAUNCH[(kind, form)]

    evidence = Run(run_dir).launched_evidence()
    named = [str(run_dir / rel) if place == "output_dir" else rel]
    assert evidence == (named if launched else []), evidence

    again = cli_here(*EMIT, "--run-dir", str(run_dir), *options)  # emission into it
    if launched:
        assert again.returncode == 2 and f"holds a launched run ({named[0]})" in again.stderr, again.stderr
    else:
        assert again.returncode == 0, again.stderr
    try:  # a fresh launch
        result, error = launch_training(LaunchRequest(run=str(run_dir))), None
    except UserInputError as exc:
        result, error = None, exc
    if place == "run_json" and form not in ("absent", "one file"):  # the launch reads its record: refused as one
        assert error is not None and error.field == "run" and "is not a launch record" in str(error), error or result
        assert str(run_dir / rel) in str(error), str(error)
    else:
        assert error is None and not result.launched, error or result
        state = [r for r in result.refusals if r.gate == "state"]
        if launched:
            assert state and f"it holds {named[0]})" in state[0].message, result.refusals
        else:  # on to the next gates: the run was never inspected; a link where training writes (train/logs/, the
            # output_dir) is the logs gate's too, named (round 17, b06)
            gates = [r.gate for r in result.refusals]
            planted = form == "a link to nothing" and place in ("logs", "checkpoints", "output_dir")
            want = ["logs", "inspection"] if planted else ["inspection"]
            assert not state and gates[:len(want)] == want, result.refusals
            assert not planted or "completions/latest" in result.refusals[0].message, result.refusals
    assert os.path.lexists(run_dir / rel) == (form != "absent")  # neither door moved or removed it

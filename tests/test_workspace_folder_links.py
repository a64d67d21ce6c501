"""Issue 48, round 10 D1: a workspace-level folder that is a symbolic link leading outside the workspace sent writes
there (`ws/eval -> /tmp/outside-eval`: evaluate_model wrote the goldens, a baseline and its signed ledger line
outside; `ws/runs -> /tmp/outside-runs`: emit-config wrote a whole run there). Every folder the project writes at
the workspace's top is declared once (workspace.WORKSPACE_FOLDERS) and named through workspace.workspace_folder,
which refuses such a link naming the folder and what to do; nothing is written, inside or outside.

The rows come from the declaration: each declared folder x each way of leading outside x each door that writes
there (WRITERS); `test_every_written_workspace_folder_has_rows` fails for a declared folder without a writer row,
and for a folder the package joins onto the workspace root that is not declared. Cheap: the doors refuse before
anything is decoded, emitted or trained.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from mcp_server.errors import UserInputError
from mcp_server.workspace import WORKSPACE_FILES, WORKSPACE_FOLDERS


class Refused(Exception):
    """A door's refusal, as its caller sees it (the core's UserInputError, the CLI's exit 2 and stderr)."""


def _cli(workspace: Path, *args: str) -> None:
    proc = run_cli(*args, cwd=workspace)
    if proc.returncode != 2:
        raise AssertionError(f"exit {proc.returncode}, not a refusal: {proc.stderr[-400:]}")
    raise Refused(proc.stderr.strip())


def _emit_core(workspace: Path) -> None:
    from support import emit_config

    emit_config(model="tiny", gpu="cpu", run_name="linked")


def _emit_cli(workspace: Path) -> None:
    _cli(workspace, "emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu", "--run-name", "linked")


def _evaluate_core(workspace: Path) -> None:
    from mcp_server.evaluation.evaluate import evaluate_model
    from mcp_server.evaluation.models import EvaluateRequest

    evaluate_model(EvaluateRequest(model="tiny", goldens="tiny", max_new_tokens=2))


def _evaluate_cli(workspace: Path) -> None:
    _cli(workspace, "evaluate-model", "tiny", "--goldens", "tiny", "--max-new-tokens", "2")


def _promote_core(workspace: Path) -> None:
    from support import emit_run

    from mcp_server.evaluation.models import PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint

    run = emit_run("promoted")  # runs/ is a real folder in the eval rows
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "config.json").write_text("{}")
    promote_checkpoint(PromoteRequest(run=str(run), goldens="tiny"))


def _agentic_demo(workspace: Path) -> None:
    from mcp_server.demo_agentic import run_agentic_demo

    run_agentic_demo(workspace)


# The doors that write into each declared folder: a declared folder without a row fails the next test.
WRITERS = {
    "agentic-demo-warm-start": {"run_agentic_demo": _agentic_demo},
    "runs": {"emit_grpo_config": _emit_core, "llm-finetuning emit-config": _emit_cli},
    "eval": {"evaluate_model": _evaluate_core, "llm-finetuning evaluate-model": _evaluate_cli,
             "promote_checkpoint": _promote_core},
}


def test_every_written_workspace_folder_has_rows():
    assert set(WRITERS) == set(WORKSPACE_FOLDERS), "a declared workspace folder without rows, or rows without one"
    joined = set()
    for path in (ROOT / "mcp_server").rglob("*.py"):
        text = path.read_text(encoding="utf-8")  # names joined onto the workspace root, or onto a `root` variable in
        # a module that takes the root from LLM_FINETUNING_WORKSPACE itself (the agentic demo)
        takes = re.search(r"\broot = .*LLM_FINETUNING_WORKSPACE", text)
        onto = r"(?:workspace_root\(\)|\broot\)?)" if takes else r"workspace_root\(\)"
        joined |= set(re.findall(onto + r"\s*/\s*\"([^\"]+)\"", text))
    undeclared = joined - set(WORKSPACE_FOLDERS) - set(WORKSPACE_FILES)
    assert not undeclared, f"the package writes {undeclared} at the workspace's top without declaring it"


def _lead_outside(workspace: Path, name: str, how: str, outside: Path) -> None:
    if how == "a link to a folder outside":
        outside.mkdir()
        (workspace / name).symlink_to(outside)
    elif how == "a link to a link inside that leads outside":
        outside.mkdir()
        (workspace / "hop").symlink_to(outside)
        (workspace / name).symlink_to(workspace / "hop")
    else:  # a dangling link: a write would create its target
        (workspace / name).symlink_to(outside)


HOWS = ("a link to a folder outside", "a link to a link inside that leads outside", "a dangling link outside")


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("name, door", [(name, door) for name, doors in WRITERS.items() for door in doors])
def test_a_workspace_folder_leading_outside_is_refused_by_every_door_that_writes_there(workspace, tmp_path, name,
                                                                                       door, how):
    outside = tmp_path / f"outside-{name}"
    _lead_outside(workspace, name, how, outside)
    before = _listing(workspace, name)
    with pytest.raises((UserInputError, Refused)) as refused:
        WRITERS[name][door](workspace)
    message = str(refused.value)
    assert f"{name}: the workspace folder {workspace / name} (" in message, message
    assert "outside the workspace" in message and "Replace the link with a folder" in message, message
    assert _listing(workspace, name) == before  # nothing half-written in the workspace
    assert not outside.exists() or not any(outside.iterdir()), sorted(outside.rglob("*"))  # nor outside it


def _listing(workspace: Path, name: str) -> list[Path]:
    """Everything in the workspace; for an eval row, less runs/ (promote_checkpoint's row emits its own run)."""
    found = (p.relative_to(workspace) for p in workspace.rglob("*"))
    return sorted(p for p in found if name == "runs" or p.parts[0] != "runs")


def test_a_workspace_folder_linked_inside_the_workspace_is_followed(workspace):
    """A link that stays inside the workspace (runs -> ./all-runs) is no escape: emission writes through it."""
    (workspace / "all-runs").mkdir()
    (workspace / "runs").symlink_to(workspace / "all-runs")
    from support import emit_config

    result = emit_config(model="tiny", gpu="cpu", run_name="inside")
    assert Path(result.run_dir).resolve().parent == (workspace / "all-runs").resolve()
    assert os.path.islink(workspace / "runs")


@pytest.mark.slow  # a CLI process, as the round ran it
def test_the_rounds_replay_emit_config_into_a_runs_link_is_refused(workspace, tmp_path):
    outside = tmp_path / "outside-runs"
    outside.mkdir()
    (workspace / "runs").symlink_to(outside)
    proc = run_cli("emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu", cwd=workspace, process=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-600:]
    assert f"runs: the workspace folder {workspace / 'runs'}" in proc.stderr, proc.stderr
    assert not any(outside.iterdir()) and sorted(p.name for p in workspace.iterdir()) == ["runs"]


def test_a_launch_is_refused_before_anything_starts_when_eval_leads_outside(workspace, tmp_path):
    """A launch records eval/'s baselines in run.json once its process started: the launch gate lists the folder
    first (launch_gates.workspace_refusals), so the refusal comes before a trainer starts, never after."""
    from support import emit_run

    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest

    run = emit_run("linked-launch")
    outside = tmp_path / "outside-eval"
    _lead_outside(workspace, "eval", HOWS[0], outside)
    result = launch_training(LaunchRequest(run=str(run)))
    assert not result.launched and not (run / "run.json").exists()
    named = [r for r in result.refusals if r.gate == "logs" and f"eval: the workspace folder {workspace / 'eval'}"
             in r.message]
    assert named and "outside the workspace" in named[0].message, result.refusals
    assert not any(outside.iterdir())


@pytest.mark.parametrize("given", ["NAME", "runs/NAME"])
@pytest.mark.parametrize("target", ["outside", "inside"])
def test_a_run_folder_linked_below_runs_is_refused_when_it_leads_outside(workspace, tmp_path, given, target):
    """Round 11 D1: `runs/<run>` a link to a run folder elsewhere had sampling and the review written there. Every
    door takes its run through runs.resolve_run, which refuses a name that leads outside the workspace through a
    link (naming it) and follows one that stays inside."""
    from mcp_server.runs import RUN_MARKERS, resolve_run

    where = tmp_path / "elsewhere" if target == "outside" else workspace / "kept"
    moved = where / "the-run"
    (moved / RUN_MARKERS[0]).parent.mkdir(parents=True)
    (moved / RUN_MARKERS[0]).write_text("model_name_or_path: tiny\n")
    (workspace / "runs").mkdir(exist_ok=True)
    (workspace / "runs" / "linked").symlink_to(moved)
    name = given.replace("NAME", "linked")
    if target == "outside":
        with pytest.raises(UserInputError, match="leads outside the workspace"):
            resolve_run(name)
    else:
        assert resolve_run(name).dir == moved.resolve()


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_the_baseline_ledger_planted_as_a_link_is_never_appended_through(workspace, tmp_path, kind):
    """Round 11 D2: eval/baselines.jsonl hard-linked to a file outside had evaluate_model append its signed line
    there (O_NOFOLLOW stops a symbolic link only). The ledger is appended as every run log is
    (workspace.open_append_nofollow): refused, the file behind it untouched. Round 17: refused as an error naming
    the ledger (field eval, not an OSError that the worker reported as "unexpected"), the unrecorded baseline gone."""
    from mcp_server.evaluation.evaluate import baseline_ledger, record_baseline
    from mcp_server.errors import UserInputError
    from mcp_server.workspace import eval_root

    outside = tmp_path / "precious.jsonl"
    outside.write_text("mine\n")
    eval_root().mkdir(exist_ok=True)
    baseline = eval_root() / "baseline-x.json"
    baseline.write_text("{}")
    (baseline_ledger().symlink_to if kind == "symlink" else lambda p: os.link(p, baseline_ledger()))(outside)
    with pytest.raises(UserInputError, match="baselines.jsonl"):
        record_baseline(baseline, "{}")
    assert outside.read_text() == "mine\n" and not baseline.exists()


# Round 14 F1: list_runs listed a run reached through a link out of the workspace ("evil ... succeeded") while every
# other tool refuses that link. Each kind of entry of runs/ x what list_runs lists (by name) and the note it gives.
RUNS_ENTRIES = {  # kind -> (how the entry "entry" is made, whether it is listed, what its note says or None)
    "link out": (lambda ws, out: (ws / "runs" / "entry").symlink_to(out), False, "leads outside the workspace"),
    "link in": (lambda ws, out: (ws / "runs" / "entry").symlink_to(ws / "runs" / "real"), False,
                "a link to real, listed as itself"),
    "dangling": (lambda ws, out: (ws / "runs" / "entry").symlink_to(ws / "runs" / "gone"), False,
                 "is a link to nothing"),
    "loop": (lambda ws, out: (ws / "runs" / "entry").symlink_to(ws / "runs" / "entry"), False, "a loop of links"),
    "real dir": (lambda ws, out: _a_run(ws / "runs" / "entry"), True, None),
}


def _a_run(folder: Path) -> Path:
    from mcp_server.runs import RUN_MARKERS

    (folder / RUN_MARKERS[0]).parent.mkdir(parents=True)
    (folder / RUN_MARKERS[0]).write_text("model_name_or_path: tiny\n")
    return folder


@pytest.mark.parametrize("kind", RUNS_ENTRIES)
def test_list_runs_reads_no_run_through_a_link_other_tools_refuse_and_none_twice(workspace, tmp_path, kind):
    from mcp_server.training.status import list_runs
    from mcp_server.training.tools import human_runs

    make, listed, says = RUNS_ENTRIES[kind]
    _a_run(workspace / "runs" / "real")
    make(workspace, _a_run(tmp_path / "other-ws" / "runs" / "x"))
    result = list_runs()
    names = [r.run for r in result.runs]
    assert names == (["real", "entry"] if listed else ["real"]), (kind, names)
    if says is None:
        assert result.notes == [], result.notes
    else:
        (note,) = result.notes
        assert note.startswith("entry not listed: ") and says in note, note
        assert f"note: {note}" in human_runs(result)

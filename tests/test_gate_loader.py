"""Issue 48, round 7 (G, the loader): LD_LIBRARY_PATH in the launching shell (launch.sh keeps it for CUDA) put a
stand-in libpython first whose constructor re-added a shadow folder to PYTHONPATH after launch.sh cleared PYTHON*;
a shadow `trl` there paid every completion 1.0. The contract as a table: every variable the dynamic loader and the
C library obey (inspection.loader_env) x every change after the verdict (added, edited, removed) is named by the
gate and refused by the launch gate and by train/launch.sh before anything runs the interpreter; a loader folder or
library inside the workspace is refused outright, in every form ld.so reads it; the trainer refuses a package it
imports (TRL and what it imports) from outside the pinned interpreter's own stdlib and site-packages.

Cells are cheap (constructed runs, the gate's functions); the rows that run bash, the trainer's module or a real
launch are marked slow.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mcp_server.inspection.loader_env import (FILE_PIN, LOADER_FILES_ENV, LOADER_PATHS, NO_FILE, TRAINER_PACKAGES,
                                              TRAINING_PATHS_ENV, interpreter_paths, loader_env_pin, names_a_file)
from mcp_server.inspection.pins import changes, run_pins, training_python_pin
from mcp_server.runs import Run
from mcp_server.training.launch_gates import interpreter_refusals

REWARD = "0" * 64
# A variable of each kind: the ones naming folders or libraries (LOADER_PATHS), one that changes how glibc behaves,
# one plain LD_* switch.
# Round 8 (G3): those that change what trains, read by transformers' TrainingArguments and accelerate's state
# (ACCELERATE_MIXED_PRECISION trained bf16 against a verdict pinning bf16: false).
VARIABLES = (*LOADER_PATHS, "GLIBC_TUNABLES", "LD_BIND_NOW", "ACCELERATE_MIXED_PRECISION", "ACCELERATE_USE_CPU",
             "ACCELERATE_DYNAMO_BACKEND", "FSDP_SHARDING_STRATEGY")
ENV_CHANGES = ("added", "edited", "removed")


@pytest.fixture(autouse=True)
def _clean_loader_env(monkeypatch):
    """Each cell starts from no loader variable (whatever the shell running the tests had)."""
    for name in [n for n in loader_env_pin() if n in os.environ]:  # not the `NAME sha256` of a file one names
        monkeypatch.delenv(name)


def _run(workspace: Path) -> Run:
    run = Run(workspace / "runs" / "r")
    (run.dir / "train").mkdir(parents=True)
    (run.dir / "train" / "config.yaml").write_text(yaml.safe_dump({"output_dir": "checkpoints",
                                                                   "model_name_or_path": "tiny"}))
    (run.dir / "train" / "train.py").write_text("print('train')\n")
    return run


def _record(run: Run) -> dict:
    """A verdict's pins as record_inspection_verdict writes them, from this environment."""
    pins = run_pins(run, REWARD)
    run.verdict.parent.mkdir(parents=True, exist_ok=True)
    run.verdict.write_text(json.dumps({"pins": pins}))
    return pins


def _outside(tmp_path: Path, name: str, n: int = 1) -> str:
    """A value for `name` outside the workspace (a folder of libraries, a library, a tunable)."""
    if name in LOADER_PATHS:
        folder = tmp_path / "elsewhere" / f"v{n}"
        folder.mkdir(parents=True, exist_ok=True)
        return str(folder / "lib.so") if name in ("LD_PRELOAD", "LD_AUDIT") else str(folder)
    return f"glibc.malloc.check={n}" if name == "GLIBC_TUNABLES" else str(n)


@pytest.mark.parametrize("how", ENV_CHANGES)
@pytest.mark.parametrize("name", VARIABLES)
def test_the_loader_environment_changed_is_named(workspace, tmp_path, monkeypatch, name, how):
    """The verdict pins the loader's variables of the reviewer's launch; one added, edited or removed after it is
    named by the gate (the part, the variable, what was reviewed and what it is now) and refused by the launch
    gate before anything runs the interpreter."""
    run = _run(workspace)
    if how != "added":
        monkeypatch.setenv(name, _outside(tmp_path, name, 1))
    reviewed = os.environ.get(name)
    before = _record(run)
    assert before["loader_env"] == ({name: reviewed} if reviewed else {}), before["loader_env"]
    assert interpreter_refusals(run) == []
    if how == "removed":
        monkeypatch.delenv(name)
    else:
        monkeypatch.setenv(name, _outside(tmp_path, name, 2))
    now = os.environ.get(name)
    moved = changes(before, run_pins(run, REWARD))
    assert len(moved) == 1 and name in moved[0], (name, how, moved)
    assert repr(reviewed) in moved[0] if reviewed else "was unset" in moved[0], moved
    assert repr(now) in moved[0] if now else "now unset" in moved[0], moved
    refusals = interpreter_refusals(run)
    said = " ".join(f"{r.message} {r.how_to_clear}" for r in refusals)
    assert [r.gate for r in refusals] == ["inspection"] and name in said and "nothing was started" in said, said
    assert "record_inspection_verdict" in said, said


# Round 8's known gap: a file such a variable names (ACCELERATE_DEEPSPEED_CONFIG_FILE) was pinned by its name alone,
# so a deepspeed json edited after the verdict trained. Each variable naming a file x each form of its value x each
# change to the file after the verdict: the gate names the variable, the file and both digests, the launch gate
# refuses, and the trainer's own check (the pins as the launcher passes them) refuses before it reads it.
FILE_VARIABLES = ("ACCELERATE_DEEPSPEED_CONFIG_FILE", "ACCELERATE_CONFIG_FILE", "ACCELERATE_DEBUG_RDV_FILE")
FILE_FORMS = ("absolute", "relative to the run directory", "through a link")
FILE_CHANGES = ("edited", "replaced by a link to another file", "removed", "made a folder", "added where none was")


def _file_value(run: Run, tmp_path: Path, form: str) -> tuple[str, Path]:
    """(the variable's value, the file it names) in `form`."""
    if form == "relative to the run directory":
        (run.dir / "conf").mkdir(exist_ok=True)
        return "conf/ds.json", run.dir / "conf" / "ds.json"
    target = tmp_path / "conf" / "ds.json"
    target.parent.mkdir(exist_ok=True)
    if form == "through a link":
        (tmp_path / "ds-link.json").symlink_to(target)
        return str(tmp_path / "ds-link.json"), target
    return str(target), target


def _change_file(path: Path, how: str, tmp_path: Path) -> None:
    if how == "edited":
        path.write_text('{"zero_optimization": {"stage": 3}, "train_batch_size": 64}')
    elif how == "replaced by a link to another file":
        other = tmp_path / "other.json"
        other.write_text('{"zero_optimization": {"stage": 0}}')
        path.unlink()
        path.symlink_to(other)
    elif how == "removed":
        path.unlink()
    elif how == "made a folder":
        path.unlink()
        path.mkdir()
    else:
        path.write_text('{"zero_optimization": {"stage": 2}}')


def test_every_file_variable_accelerate_and_transformers_read_is_pinned_by_content():
    """Each ACCELERATE_* / FSDP_* name the installed transformers and accelerate read whose name says it names a
    file or a folder (*_FILE, *_PATH, *_CONFIG*: their source, not a list of ours) has its content pinned."""
    import importlib.util
    import re

    names = set()
    for module in ("transformers.training_args", "accelerate.state", "accelerate.utils.dataclasses",
                   "accelerate.utils.launch", "accelerate.utils.environment"):
        spec = importlib.util.find_spec(module)
        if spec and spec.origin:
            names |= set(re.findall(r'"((?:ACCELERATE|FSDP)_[A-Z0-9_]+)"', Path(spec.origin).read_text()))
    files = {n for n in names if re.search(r"_(FILE|PATH|CONFIG)", n)}
    assert "ACCELERATE_DEEPSPEED_CONFIG_FILE" in files, sorted(names)
    assert [n for n in sorted(files) if not names_a_file(n)] == []
    assert not names_a_file("LD_LIBRARY_PATH") and not names_a_file("ACCELERATE_MIXED_PRECISION")


@pytest.mark.parametrize("how", FILE_CHANGES)
@pytest.mark.parametrize("form", FILE_FORMS)
@pytest.mark.parametrize("name", FILE_VARIABLES)
def test_a_file_a_pinned_variable_names_is_pinned_by_content(workspace, tmp_path, monkeypatch, name, form, how):
    """The verdict pins the file's sha256 beside the variable; a change to the file after it (the variable's value
    unchanged) is named by the gate (the variable, the file, the reviewed digest and the one now), refused by the
    launch gate, and by the trainer before accelerate or transformers reads it; put back, all pass again."""
    from mcp_server.training.launchers.base import verdict_env
    from mcp_server.training.trainer.verified_script import loader_files_changed

    run = _run(workspace)
    value, path = _file_value(run, tmp_path, form)
    reviewed = '{"zero_optimization": {"stage": 2}}'
    if how != "added where none was":
        path.write_text(reviewed)
    monkeypatch.setenv(name, value)
    before = _record(run)
    import hashlib

    digest = hashlib.sha256(reviewed.encode()).hexdigest() if path.exists() else NO_FILE
    assert before["loader_env"] == {name: value, name + FILE_PIN: digest}, before["loader_env"]
    assert interpreter_refusals(run) == []
    monkeypatch.chdir(run.dir)  # where the trainer starts
    monkeypatch.setenv(LOADER_FILES_ENV, verdict_env(run.verdict.read_text())[LOADER_FILES_ENV])
    assert loader_files_changed() == []
    _change_file(path, how, tmp_path)
    moved = changes(before, run_pins(run, REWARD))
    said = f"the file {name} names ({value!r}) was {'sha256 ' + digest if digest != NO_FILE else NO_FILE}"
    assert len(moved) == 1 and said in moved[0] and "now " in moved[0], (moved, said)
    refusals = interpreter_refusals(run)
    told = " ".join(f"{r.message} {r.how_to_clear}" for r in refusals)
    assert [r.gate for r in refusals] == ["inspection"] and said in told and "nothing was started" in told, told
    trainer = loader_files_changed()
    assert len(trainer) == 1 and said in trainer[0], trainer


def _inside_forms(workspace: Path, run: Run, tmp_path: Path) -> dict[str, tuple[str, str]]:
    """Every form ld.so (and glibc) reads a folder or library in, pointing inside the workspace."""
    (workspace / "lib").mkdir(exist_ok=True)
    (tmp_path / "link").symlink_to(workspace / "lib", target_is_directory=True)
    return {
        "a folder in the workspace": ("LD_LIBRARY_PATH", f"/usr/lib:{workspace}/lib"),
        "an empty entry (the run directory)": ("LD_LIBRARY_PATH", ":/usr/lib"),
        "a trailing empty entry": ("LD_LIBRARY_PATH", "/usr/lib:"),
        "a relative entry after ';'": ("LD_LIBRARY_PATH", "/usr/lib;lib"),
        "a link outside to a folder inside": ("LD_LIBRARY_PATH", str(tmp_path / "link")),
        "the run's own folder": ("LD_LIBRARY_PATH", str(run.dir / "train")),
        "a preloaded library, space-separated": ("LD_PRELOAD", f"/usr/lib/x.so {workspace}/lib/evil.so"),
        "a relative preloaded library": ("LD_PRELOAD", "./evil.so"),
        "an audit library": ("LD_AUDIT", f"{run.dir}/audit.so"),
        "gconv modules": ("GCONV_PATH", f"{workspace}/lib"),
        "locale data": ("LOCPATH", f"{workspace}/lib"),
    }


FORMS = ("a folder in the workspace", "an empty entry (the run directory)", "a trailing empty entry",
         "a relative entry after ';'", "a link outside to a folder inside", "the run's own folder",
         "a preloaded library, space-separated", "a relative preloaded library", "an audit library", "gconv modules",
         "locale data")


@pytest.mark.parametrize("form", FORMS)
def test_a_loader_path_inside_the_workspace_is_refused_outright(workspace, tmp_path, monkeypatch, form):
    """A folder or library inside the workspace (the attacker's, docs/development.md) is refused even when the
    verdict was recorded with it: the refusal names the variable and the entry."""
    run = _run(workspace)
    name, value = _inside_forms(workspace, run, tmp_path)[form]
    monkeypatch.setenv(name, value)
    _record(run)  # recorded with it: the pins agree, the workspace is refused anyway
    refusals = interpreter_refusals(run)
    said = " ".join(r.message for r in refusals)
    assert len(refusals) == 1 and "inside the workspace" in said and f"{name}:" in said, (form, said)


# Every variable that names folders or libraries and each separator ld.so(8) and glibc split it on, written from their
# documentation, not read from the code under test (LD_LIBRARY_PATH: ':' and ';'; LD_PRELOAD: spaces and colons).
LD_SEPARATORS = {"LD_LIBRARY_PATH": ":;", "LD_PRELOAD": ": ", "LD_AUDIT": ":", "GCONV_PATH": ":", "LOCPATH": ":"}


# Every form an entry of a loader variable takes, pointing at the workspace itself, inside it, or beside it, and
# whether it is refused: in a folder list (LD_LIBRARY_PATH, GCONV_PATH, LOCPATH) and in a library list (LD_PRELOAD,
# LD_AUDIT, where an entry without '/' is a library name searched in the library path, checked itself, and an empty
# entry is nothing). Each entry follows an outside one after a colon (every variable splits on it).
ENTRY_FORMS = {  # form: (entry, refused in a folder list, refused in a library list)
    "the workspace root": (lambda ws, run, tmp: str(ws), True, True),
    "the workspace root, trailing slash": (lambda ws, run, tmp: f"{ws}/", True, True),
    "the workspace root through a link": (lambda ws, run, tmp: str(tmp / "ws-link"), True, True),
    "the workspace root through '..'": (lambda ws, run, tmp: f"{ws}/lib/..", True, True),
    "the workspace root, relative from the run folder": (lambda ws, run, tmp: "../..", True, True),
    "a file at the workspace's top": (lambda ws, run, tmp: f"{ws}/evil.so", True, True),
    "a subfolder": (lambda ws, run, tmp: f"{ws}/lib", True, True),
    "the run folder": (lambda ws, run, tmp: str(run.dir), True, True),
    "an empty entry (the run folder)": (lambda ws, run, tmp: "", True, False),
    "a relative '.' (the run folder)": (lambda ws, run, tmp: ".", True, False),
    "a relative './' (the run folder)": (lambda ws, run, tmp: "./", True, True),
    "a folder beside the workspace, its name the workspace's and more": (lambda ws, run, tmp: f"{ws}-other/lib",
                                                                          False, False),
    "a folder outside the workspace": (lambda ws, run, tmp: str(tmp / "elsewhere"), False, False),
    "the workspace's parent": (lambda ws, run, tmp: str(ws.parent), False, False),
}
LIBRARY_LISTS = ("LD_PRELOAD", "LD_AUDIT")


@pytest.mark.parametrize("name", list(LD_SEPARATORS))
@pytest.mark.parametrize("form", list(ENTRY_FORMS))
def test_every_form_of_a_loader_entry_at_or_in_the_workspace_is_refused_outright(workspace, tmp_path, monkeypatch,
                                                                                  form, name):
    """m7-gate-loader-workspace-itself: the workspace root itself (a stand-in libpython dropped at its top), in
    every form it is written, is refused like any folder inside it, for every loader variable; what lies beside or
    above it is not."""
    run = _run(workspace)
    (workspace / "lib").mkdir()
    (tmp_path / "ws-link").symlink_to(workspace, target_is_directory=True)
    build, in_folders, in_libraries = ENTRY_FORMS[form]
    entry = build(workspace, run, tmp_path)
    monkeypatch.setenv(name, f"/usr/lib:{entry}")
    _record(run)  # recorded with it: only the workspace refusal can close the gate
    refusals = interpreter_refusals(run)
    said = " ".join(r.message for r in refusals)
    if in_libraries if name in LIBRARY_LISTS else in_folders:
        assert len(refusals) == 1 and "inside the workspace" in said and f"{name}: {entry}" in said, (form, said)
    else:
        assert refusals == [], (form, said)


def _separated(name: str, sep: str, position: int, inside: str) -> str:
    """Three entries of `name` joined by `sep`, the one at `position` inside the workspace."""
    entries = ["/usr/lib/x86_64-linux-gnu/libm.so.6" if name in LIBRARY_LISTS else "/usr/lib/x86_64-linux-gnu",
               "/opt/cuda/lib64/libcudart.so" if name in LIBRARY_LISTS else "/opt/cuda/lib64"]
    entries.insert(position, inside)
    return sep.join(entries)


# Each separator, an entry inside the workspace in each position.
SEPARATORS = [(name, sep) for name, seps in LD_SEPARATORS.items() for sep in seps]
SEPARATORS += [("LD_PRELOAD", " : "), ("LD_PRELOAD", "  ")]


def test_every_loader_path_variable_has_its_separators_in_the_table():
    assert set(LD_SEPARATORS) == set(LOADER_PATHS), set(LD_SEPARATORS) ^ set(LOADER_PATHS)


@pytest.mark.parametrize("position", [0, 1, 2], ids=["first", "middle", "last"])
@pytest.mark.parametrize("name, sep", SEPARATORS, ids=[f"{n} {s!r}" for n, s in SEPARATORS])
def test_an_entry_inside_the_workspace_is_refused_whatever_separates_it(workspace, monkeypatch, name, sep,
                                                                       position):
    """m7-gate-preload-space-unsplit: LD_PRELOAD='libm.so.6 <workspace>/evil.so' is two libraries to ld.so, the
    second inside the workspace: refused, in every position and with every separator ld.so splits on."""
    run = _run(workspace)
    inside = f"{workspace}/evil.so" if name in LIBRARY_LISTS else f"{workspace}/lib"
    monkeypatch.setenv(name, _separated(name, sep, position, inside))
    _record(run)
    refusals = interpreter_refusals(run)
    said = " ".join(r.message for r in refusals)
    assert len(refusals) == 1 and f"{name}: {inside} -> " in said, (sep, position, said)


@pytest.mark.parametrize("value", ["/usr/lib/x86_64-linux-gnu", "$ORIGIN/../lib", "libjemalloc.so.2"])
def test_a_loader_path_outside_the_workspace_recorded_by_the_verdict_passes(workspace, monkeypatch, value):
    """What the reviewer's own environment loads from outside the workspace, unchanged, is trusted (CUDA's
    libraries): a bare library name is searched in the library path, $ORIGIN where the binary lies."""
    run = _run(workspace)
    monkeypatch.setenv("LD_PRELOAD" if value.startswith("lib") else "LD_LIBRARY_PATH", value)
    _record(run)
    assert interpreter_refusals(run) == []


def test_the_verdict_records_where_the_trainers_packages_may_come_from():
    """The pinned interpreter's own stdlib and site-packages (sysconfig and site of that interpreter): where this
    interpreter's TRL and torch lie, and no folder of the workspace."""
    import importlib.util

    paths = interpreter_paths(training_python_pin(sys.executable))
    assert paths and all(os.path.isabs(p) for p in paths), paths
    for name in ("trl", "torch"):
        origin = os.path.realpath(importlib.util.find_spec(name).origin)
        assert any(origin.startswith(p + os.sep) for p in paths), (name, origin, paths)


def _shadow(folder: Path, marker: Path) -> Path:
    """A shadow `trl` as round 7 planted it: its import would replace the reviewed rewards."""
    (folder / "trl").mkdir(parents=True)
    (folder / "trl" / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write('shadow imported\\n')\n")
    return folder


@pytest.mark.slow  # runs the trainer's module (verified_script) in the training interpreter
def test_the_trainer_refuses_a_package_from_outside_the_recorded_interpreter(workspace, tmp_path):
    """The trainer (verified_script, the launchers' entry) checks where trl, transformers, torch, datasets, peft and
    accelerate would be imported from before any of them runs: a shadow `trl` first on the path (outside or inside
    the workspace), or a recorded set that does not hold this interpreter's site-packages, is refused naming the
    module and where it came from, and the shadow never runs; the recorded set of this interpreter passes."""
    run = _run(workspace)
    (run.dir / "train" / "train.py").write_text("print('trained')\n")
    recorded = os.pathsep.join(interpreter_paths(training_python_pin(sys.executable)))
    marker = tmp_path / "shadow-ran"

    def trainer(pythonpath: str, paths: str = recorded) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": pythonpath, TRAINING_PATHS_ENV: paths,
               "LLM_FINETUNING_WORKSPACE": str(workspace)}
        return subprocess.run([sys.executable, "-m", "mcp_server.training.trainer.verified_script",
                               "train/train.py"], cwd=run.dir, env=env, capture_output=True, text=True, timeout=120)

    package = str(Path(__file__).resolve().parents[1])
    ran = trainer(package)
    assert ran.returncode == 0 and "trained" in ran.stdout, ran.stderr
    for where in (tmp_path / "evil", workspace / "shadow", run.dir / "cache" / "py"):
        refused = trainer(os.pathsep.join([str(_shadow(where, marker)), package]))
        assert refused.returncode == 3 and f"trl ({where}" in refused.stderr, (where, refused.stderr)
        assert not marker.exists(), marker.read_text()
    import sysconfig

    refused = trainer(package, os.path.realpath(sysconfig.get_paths()["stdlib"]))  # a set without site-packages
    assert refused.returncode == 3 and "trl (" in refused.stderr, refused.stderr
    assert set(TRAINER_PACKAGES) >= {"trl", "transformers", "torch", "datasets", "peft", "accelerate"}
    # a venv inside the workspace (make demo's .venv, a project's own) is its recorded set: it trains
    venv = _shadow(workspace / ".venv" / "site-packages", tmp_path / "venv-trl-ran")
    ran = trainer(os.pathsep.join([str(venv), package]), os.pathsep.join([recorded, str(venv)]))
    assert ran.returncode == 0 and "trained" in ran.stdout, ran.stderr


@pytest.mark.slow  # runs the written launch script in bash
def test_the_launch_script_refuses_a_loader_environment_changed_after_the_gate(workspace, tmp_path, monkeypatch):
    """train/launch.sh (as the local launcher writes it) checks the loader's variables against the verdict's pin
    before it first runs the interpreter: one added or edited after the gate is refused (exit 3) naming the
    variable; as recorded, it runs. train/launch.slurm carries the same check (with_python_check)."""
    from mcp_server.training.launchers.base import LaunchPlan
    from mcp_server.training.launchers.local.launcher import LocalLauncher
    from mcp_server.training.launchers.local.shell import render_launch_sh

    run = _run(workspace)
    lib = _outside(tmp_path, "LD_LIBRARY_PATH")
    monkeypatch.setenv("LD_LIBRARY_PATH", lib)
    _record(run)
    command = [sys.executable, "-c", "print('trained')"]
    plan = LaunchPlan(launcher="local", strategy="single", num_processes=1, num_nodes=1, train_command=command,
                      script=render_launch_sh("g1", sys.executable, command, True, None),
                      verdict=run.verdict.read_text())  # as the launch read it
    LocalLauncher().write(run, plan)
    assert "check_loader ||" in run.launch_script.read_text()

    def launch(**env: str) -> subprocess.CompletedProcess:
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("LD_", "GCONV", "GLIBC", "LOCPATH", "ACCELERATE_", "FSDP_"))}
        return subprocess.run(["bash", str(run.launch_script)], capture_output=True, text=True, timeout=120,
                              env={**base, **env})

    ran = launch(LD_LIBRARY_PATH=lib)
    assert ran.returncode == 0 and "trained" in ran.stdout, (ran.stdout, ran.stderr)
    for env, said in (({"LD_LIBRARY_PATH": "/tmp/round7/evil/lib"}, "LD_LIBRARY_PATH is /tmp/round7/evil/lib"),
                      ({}, "LD_LIBRARY_PATH is unset"),
                      ({"LD_LIBRARY_PATH": lib, "GCONV_PATH": "/tmp/g"}, "GCONV_PATH is set (/tmp/g)"),
                      ({"LD_LIBRARY_PATH": lib, "ACCELERATE_MIXED_PRECISION": "bf16"},  # round 8, G3
                       "ACCELERATE_MIXED_PRECISION is set (bf16)")):
        refused = launch(**env)
        assert refused.returncode == 3 and "trained" not in refused.stdout, (env, refused.stdout, refused.stderr)
        assert f"refusing to train: {said}" in refused.stderr, (env, refused.stderr)
        assert (run.logs / "exit-code").read_text().strip() == "3"
    # the content of a file a pinned variable names (a deepspeed json), checked as well: edited after the gate
    ds = tmp_path / "ds.json"
    ds.write_text('{"zero_optimization": {"stage": 2}}')
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", str(ds))
    _record(run)
    plan = dataclasses.replace(plan, verdict=run.verdict.read_text())  # a new launch reads the new verdict
    LocalLauncher().write(run, plan)
    shell = {"LD_LIBRARY_PATH": lib, "ACCELERATE_DEEPSPEED_CONFIG_FILE": str(ds)}
    ran = launch(**shell)
    assert ran.returncode == 0 and "trained" in ran.stdout, (ran.stdout, ran.stderr)
    ds.write_text('{"zero_optimization": {"stage": 3}}')
    refused = launch(**shell)
    assert refused.returncode == 3 and "trained" not in refused.stdout, (refused.stdout, refused.stderr)
    assert f"refusing to train: the file ACCELERATE_DEEPSPEED_CONFIG_FILE names ({ds}) is " in refused.stderr, \
        refused.stderr


@pytest.mark.slow  # samples the tiny model, then one real launch
def test_a_launch_from_another_loader_environment_never_starts(workspace, tmp_path, monkeypatch):
    """Round 7's probe through launch_training: LD_LIBRARY_PATH set after the verdict to a folder holding a
    stand-in libpython; refused before anything runs the interpreter (no run.json), naming the variable, what was
    reviewed and what it is now. Put back, the same run launches and trains (the normal CPU path)."""

    from support import emit_run, pass_inspection
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest
    from support import wait_for

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    data = workspace / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n"
                            for i in range(16)))
    run_dir = emit_run("ld", dataset=str(data), base={
        "max_steps": 1, "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 12,
        "logging_steps": 1, "save_steps": 1, "gradient_accumulation_steps": 1, "report_to": "none"})
    pass_inspection(run_dir, max_samples=None, reviewer="ana")
    verdict = json.loads((run_dir / "inspection" / "verdict.json").read_text())
    assert verdict["pins"]["loader_env"] == {} and verdict["training_paths"], verdict.get("training_paths")
    evil = tmp_path / "evil" / "lib"
    evil.mkdir(parents=True)
    (evil / "libpython3.11.so.1.0").write_bytes(b"not a library")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(evil))
    result = launch_training(LaunchRequest(run=str(run_dir)))
    said = " ".join(f"{r.message} {r.how_to_clear}" for r in result.refusals)
    assert not result.launched and not (run_dir / "run.json").exists(), result.message
    assert f"LD_LIBRARY_PATH was unset when the verdict was recorded, now {str(evil)!r}" in said, said
    monkeypatch.delenv("LD_LIBRARY_PATH")
    result = launch_training(LaunchRequest(run=str(run_dir)))
    assert result.launched, result.message
    status = wait_for(run_dir, lambda s: s.state not in ("starting", "running"), timeout=400)
    assert status.state == "succeeded", (status.state, (run_dir / "train" / "logs" / "stdout.log").read_text()[-3000:])


# Round 8: the launch itself. G3: transformers and accelerate read the launching shell's ACCELERATE_* (and FSDP_*)
# variables, pinned above with the loader's. G1: bash found on PATH (a fake one set BASH_ENV after the launcher
# stripped it). G4: the package's folder on the trainer's PYTHONPATH (a hashlib.py dropped there shadowed the stdlib
# before any check).
def test_every_training_variable_transformers_and_accelerate_read_is_pinned():
    """Each ACCELERATE_* / FSDP_* name the installed transformers' TrainingArguments and accelerate's state read
    from the environment (their source, not a list of ours) is one the verdict pins."""
    import importlib.util
    import re

    from mcp_server.inspection.loader_env import is_loader_variable

    names = set()
    for module in ("transformers.training_args", "accelerate.state", "accelerate.utils.dataclasses"):
        source = Path(importlib.util.find_spec(module).origin).read_text()
        names |= set(re.findall(r'"((?:ACCELERATE|FSDP)_[A-Z0-9_]+)"', source))
    assert "ACCELERATE_MIXED_PRECISION" in names and len(names) > 10, sorted(names)
    assert [n for n in sorted(names) if not is_loader_variable(n)] == []


def test_bash_is_run_by_absolute_path_never_from_path():
    """launch_training starts train/launch.sh with bash by its absolute path, resolved once (/bin/bash or
    /usr/bin/bash), and both launch scripts name it in their first line: no `bash` on PATH is ever looked up."""
    import shutil

    from mcp_server.training.launchers.local.shell import render_launch_sh
    from mcp_server.training.launchers.slurm.script import SlurmLayout, render_sbatch
    from mcp_server.training.processes import LAUNCHER

    bash = LAUNCHER[0]
    assert bash in ("/bin/bash", "/usr/bin/bash") and LAUNCHER[1:] == ["train/launch.sh"], LAUNCHER
    assert os.path.isabs(bash) and os.access(bash, os.X_OK) and shutil.which("bash")  # a real one, not PATH's
    sh = render_launch_sh("g1", sys.executable, [sys.executable, "-c", "pass"], True, None)
    sbatch = render_sbatch(SlurmLayout(run_dir="/r", job_name="g1", comment="c", python=sys.executable, nodes=1,
                                       train_nodes=1, processes_per_node=1, gpus_per_node=0, strategy="ddp",
                                       output_dir="checkpoints"), "tiny", [])
    assert sh.splitlines()[0] == f"#!{bash}" and sbatch.splitlines()[0] == f"#!{bash}", (sh[:40], sbatch[:40])


@pytest.mark.slow  # starts bash
def test_a_bash_first_on_path_never_starts_the_launch_script(tmp_path, monkeypatch):
    """Round 8's G1: a `bash` first on the launching shell's PATH that sets BASH_ENV and execs the real one. The
    launcher's command (processes.LAUNCHER, as launch_training's spawn runs it) never runs it."""
    from mcp_server.interpreter import without_shell_hooks
    from mcp_server.training.processes import LAUNCHER

    fake = tmp_path / "bin"
    fake.mkdir()
    marker = tmp_path / "fake-bash-ran"
    (fake / "bash").write_text(f"#!/bin/sh\necho ran >> {marker}\nexport BASH_ENV={tmp_path}/hook.sh\n"
                               'exec /bin/bash "$@"\n')
    (fake / "bash").chmod(0o755)
    run = tmp_path / "run"
    (run / "train").mkdir(parents=True)
    (run / "train" / "launch.sh").write_text('echo "launched BASH_ENV=${BASH_ENV-unset}"\n')
    env = without_shell_hooks({**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"})
    ran = subprocess.run(LAUNCHER, cwd=run, env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0 and "launched BASH_ENV=unset" in ran.stdout, (ran.stdout, ran.stderr)
    assert not marker.exists()


# Round 8, left (issue 48): every other command the launch scripts run (readlink, sha256sum: the interpreter's check;
# mkdir, rm, mv, date, grep, srun, scontrol, ...) came from the launching shell's PATH, where a `sha256sum` could answer
# the digest the check expects. Each is now written by absolute path (launchers.commands, the scheduler's resolved).
BUILTINS = {"[", "cd", "compgen", "echo", "eval", "exit", "export", "kill", "local", "printf", "pwd", "return", "set",
            "trap", "unset", "until", "if", "then", "fi", "do", "done", "for", "case", "esac", "in", "while", "!"}
_COMMAND_WORD = re.compile(r"(?:^|[;&|({]|\$\(|\bthen\b|\bdo\b|\buntil\b|\bif\b|!)\s*([^\s;&|()<>\"'$]+)")


def _rendered_scripts() -> dict[str, str]:
    """Each shape of train/launch.sh and train/launch.slurm the launchers write, with the interpreter's check in."""
    from mcp_server.training.launchers.base import REFUSED_EXIT, with_python_check
    from mcp_server.training.launchers.local.shell import VllmServer, render_launch_sh
    from mcp_server.training.launchers.slurm.script import SlurmLayout, render_sbatch

    command = [sys.executable, "-m", "accelerate.commands.launch", "train/train.py"]
    server = {"model": "m", "port": 8000, "tensor_parallel_size": 1, "data_parallel_size": 1,
              "gpu_memory_utilization": 0.5}
    scripts = {"launch.sh, CPU": render_launch_sh("s", sys.executable, command, True, None),
               "launch.sh, vLLM server on the CPU": render_launch_sh(
                   "s", sys.executable, command, True, VllmServer(first_gpu=0, gpus=0, cpu=True, **server)),
               "launch.sh, vLLM server on GPUs": render_launch_sh(
                   "s", sys.executable, command, False, VllmServer(first_gpu=1, gpus=1, **server))}
    for name, fields in {"CPU": {"gpus_per_node": 0, "train_nodes": 2},
                         "vLLM server node": {"gpus_per_node": 8, "train_nodes": 1, "vllm_port": 8000}}.items():
        layout = SlurmLayout(run_dir="/r", job_name="s", comment="c", python=sys.executable, nodes=2,
                             processes_per_node=1, strategy="ddp", output_dir="checkpoints", **fields)
        scripts[f"launch.slurm, {name}"] = render_sbatch(layout, "m", ["--resume_from_checkpoint", "c"])
    rendered = {name: with_python_check(text, sys.executable, training_python_pin(), REFUSED_EXIT, {})
                for name, text in scripts.items()}
    # a file a pinned variable names adds check_loader's own digest helper (loader_file_sum)
    from mcp_server.inspection.loader_env import FILE_PIN
    pin = {"ACCELERATE_DEEPSPEED_CONFIG_FILE": "/r/ds.json", "ACCELERATE_DEEPSPEED_CONFIG_FILE" + FILE_PIN: "0" * 64}
    rendered["launch.sh, CPU, a pinned loader file"] = with_python_check(
        scripts["launch.sh, CPU"], sys.executable, training_python_pin(), REFUSED_EXIT, pin)
    return rendered


def _commands_from_path(script: str) -> list[str]:
    """The words in command position that a shell would look up on PATH: neither a builtin, nor a function the
    script defines, nor an absolute path (what is not an executable on this PATH is no command: case patterns)."""
    import shutil

    defined = set(re.findall(r"^\s*([A-Za-z_][\w]*)\(\)", script, re.M))
    found = []
    for line in script.splitlines():
        line = re.sub(r'-c "[^"]*"', "", re.sub(r"\s+#\s.*$", "", line))  # inline Python, comments
        if line.lstrip().startswith("#"):
            continue
        found += [word for word in _COMMAND_WORD.findall(line) if "=" not in word and not word.startswith("/")
                  and word not in BUILTINS | defined and shutil.which(word)]
    return found


SCRIPT_SHAPES = ("launch.sh, CPU", "launch.sh, vLLM server on the CPU", "launch.sh, vLLM server on GPUs",
                 "launch.slurm, CPU", "launch.slurm, vLLM server node", "launch.sh, CPU, a pinned loader file")


def test_every_shape_of_the_launch_scripts_has_a_row():
    assert sorted(_rendered_scripts()) == sorted(SCRIPT_SHAPES)


@pytest.mark.parametrize("shape", SCRIPT_SHAPES)
def test_every_command_the_launch_scripts_run_is_named_by_absolute_path(shape):
    """Every external command of each rendered launch script is written by absolute path: none is looked up on the
    PATH of the shell that runs it (the launching shell's, or the job's on a node)."""
    from mcp_server.training.launchers.commands import SYSTEM_FOLDERS, TOOLS

    script = _rendered_scripts()[shape]
    assert _commands_from_path(script) == [], shape
    used = [name for name in TOOLS if re.search(rf"(?<![\w/-])/\S*/{name}\b", script)]
    assert used and all(f"{folder}/{name}" in script for name in used for folder in SYSTEM_FOLDERS[:1]
                        if os.path.exists(f"{folder}/{name}")), (shape, used)


def test_the_scheduler_commands_are_resolved_once_and_written_absolute(monkeypatch, tmp_path):
    """srun and scontrol in train/launch.slurm, and the sbatch a launch submits with, are the ones resolved when the
    job is planned (scheduler.commands, recorded in run.json's slurm.commands): a folder put first on PATH after
    that changes none of them."""
    from mcp_server.training.launchers.slurm.scheduler import COMMANDS
    from mcp_server.training.launchers.slurm.script import SlurmLayout, render_sbatch

    fake = tmp_path / "bin"
    fake.mkdir()
    for name in COMMANDS:
        (fake / name).write_text("#!/bin/sh\nexit 0\n")
        (fake / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    layout = SlurmLayout(run_dir="/r", job_name="s", comment="c", python=sys.executable, nodes=1, train_nodes=1,
                         processes_per_node=1, gpus_per_node=0, strategy="ddp", output_dir="checkpoints")
    assert layout.scheduler == {name: str(fake / name) for name in COMMANDS}  # resolved, absolute, at planning
    monkeypatch.setenv("PATH", f"{tmp_path / 'other'}:/usr/bin:/bin")
    script = render_sbatch(layout, "m", [])
    assert f"{fake}/srun --kill-on-bad-exit=1" in script and f"$({fake}/scontrol show hostnames" in script


@pytest.mark.parametrize("missing", ["sha256sum", "readlink", "mkdir"])
def test_a_command_missing_from_the_system_folders_is_a_clear_error_before_anything_is_written(
        tmp_path, monkeypatch, missing):
    """The launch scripts' commands come from /usr/bin or /bin (launchers.commands): one missing there is the
    launch's error naming it, the field and where it was looked for, never a script that breaks when it runs."""
    from mcp_server.errors import UserInputError
    from mcp_server.training.launchers import commands
    from mcp_server.training.launchers.local.shell import render_launch_sh
    from mcp_server.training.launchers.slurm.script import SlurmLayout, render_sbatch

    folder = tmp_path / "usr-bin"
    folder.mkdir()
    for name in commands.TOOLS:
        if name != missing:
            (folder / name).symlink_to(commands.tool(name))
    monkeypatch.setattr(commands, "SYSTEM_FOLDERS", (str(folder),))
    layout = SlurmLayout(run_dir="/r", job_name="s", comment="c", python=sys.executable, nodes=1, train_nodes=1,
                         processes_per_node=1, gpus_per_node=0, strategy="ddp", output_dir="checkpoints")
    for render in (lambda: render_launch_sh("s", sys.executable, [sys.executable], True, None),
                   lambda: render_sbatch(layout, "m", [])):
        with pytest.raises(UserInputError) as refused:
            render()
        assert refused.value.field == "launcher" and f"{missing} is in none of {folder}" in str(refused.value)
        assert "never from PATH" in str(refused.value)


@pytest.mark.slow  # runs the written launch script in bash
def test_a_command_first_on_path_never_answers_the_interpreters_check(workspace, tmp_path):
    """A `sha256sum` (and every other command the script runs) first on the launching shell's PATH, the fake
    answering the digest the verdict pinned: train/launch.sh still refuses an interpreter whose bytes changed after
    the gate (exit 3), and no fake ever runs; unchanged, it trains with the fakes still first on PATH."""
    from mcp_server.training.launchers.base import LaunchPlan
    from mcp_server.training.launchers.commands import TOOLS
    from mcp_server.training.launchers.local.launcher import LocalLauncher
    from mcp_server.training.launchers.local.shell import render_launch_sh

    run = _run(workspace)
    wrapper = tmp_path / "venv" / "python"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    pin = training_python_pin(str(wrapper))
    run.verdict.parent.mkdir(parents=True, exist_ok=True)
    run.verdict.write_text(json.dumps({"pins": {"training_python": pin, "loader_env": {}}}))
    marker, fakes = tmp_path / "fake-ran", tmp_path / "fakes"
    fakes.mkdir()
    for name in (*TOOLS, "id"):
        answer = f"echo {pin['sha256']}  {pin['realpath']}" if name == "sha256sum" else f'exec /usr/bin/{name} "$@"'
        (fakes / name).write_text(f"#!/bin/sh\necho {name} >> {marker}\n{answer}\n")
        (fakes / name).chmod(0o755)
    command = [str(wrapper), "-c", "print('trained')"]
    plan = LaunchPlan(launcher="local", strategy="single", num_processes=1, num_nodes=1, train_command=command,
                      script=render_launch_sh("g", str(wrapper), command, True, None),
                      verdict=run.verdict.read_text())  # as the launch read it
    LocalLauncher().write(run, plan)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LD_", "ACCELERATE_", "FSDP_"))}

    def launch() -> subprocess.CompletedProcess:
        return subprocess.run(["/bin/bash", str(run.launch_script)], capture_output=True, text=True, timeout=120,
                              env={**env, "PATH": f"{fakes}:{os.environ['PATH']}"})

    ran = launch()
    assert ran.returncode == 0 and "trained" in ran.stdout and not marker.exists(), (ran.stdout, ran.stderr)
    wrapper.write_text(wrapper.read_text().replace("exec ", "echo unreviewed\nexec ", 1))
    refused = launch()
    assert refused.returncode == 3 and "trained" not in refused.stdout, (refused.stdout, refused.stderr)
    assert "refusing to train: LLM_FINETUNING_PYTHON names" in refused.stderr and not marker.exists(), (
        refused.stderr, marker.read_text() if marker.exists() else "")


def _trainer_path(script: str) -> str | None:
    """The PYTHONPATH a rendered launch script gives the trainer (None: none, the package is installed)."""
    import shlex

    for line in script.splitlines():
        if line.startswith("export PYTHONPATH="):
            return shlex.split(line.removeprefix("export PYTHONPATH="))[0]
    return None


def test_the_trainers_path_holds_this_package_alone():
    """Round 8's G4: train/launch.sh and train/launch.slurm put on the trainer's PYTHONPATH a folder outside the
    workspace (beside the evidence key) holding one entry, `mcp_server`, which is this package: no other name of
    the plugin folder (a hashlib.py dropped beside the package) is importable from it."""
    from mcp_server.evidence import key_path
    from mcp_server.interpreter import package_path
    from mcp_server.training.launchers.local.shell import render_launch_sh
    from mcp_server.training.launchers.base import python_env, trainer_pythonpath

    import mcp_server
    from conftest import skip_unless_ci

    if package_path() is None:
        skip_unless_ci("this package is installed: the trainer's path names no folder")

    folder = _trainer_path(render_launch_sh("g4", sys.executable, [sys.executable, "-c", "pass"], True, None))
    assert folder is not None and os.listdir(folder) == ["mcp_server"], (folder, os.listdir(folder or "."))
    assert os.path.realpath(os.path.join(folder, "mcp_server")) == os.path.dirname(os.path.realpath(
        mcp_server.__file__))
    assert Path(folder).resolve().is_relative_to(key_path().parent.resolve()), (folder, key_path())
    assert f"export LLM_FINETUNING_PACKAGE={folder}" in python_env(trainer_pythonpath())


@pytest.mark.slow  # runs the trainer's module (verified_script) in the training interpreter
def test_the_trainer_refuses_a_module_imported_from_outside_before_its_checks(workspace, tmp_path):
    """A `hashlib.py` first on the trainer's path (as G4 dropped it beside the package) is imported by the
    interpreter and by verified_script before any check runs: the trainer refuses (exit 3) naming the module and
    its file, before train.py runs; the launch script's own path (this package alone) trains."""
    from mcp_server.training.launchers.base import trainer_pythonpath
    from mcp_server.training.trainer.verified_script import PACKAGE_ENV

    run = _run(workspace)
    (run.dir / "train" / "train.py").write_text("print('trained')\n")
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "hashlib.py").write_text(
        "import importlib.util, os, sysconfig\n"
        "spec = importlib.util.spec_from_file_location('_stdlib_hashlib', os.path.join("
        "sysconfig.get_paths()['stdlib'], 'hashlib.py'))\n"
        "real = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(real)\n"
        "globals().update({k: v for k, v in vars(real).items() if not k.startswith('__')})\n")
    path = trainer_pythonpath() or ""

    def trainer(*first: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env.update({"PYTHONPATH": os.pathsep.join([*first, path]), PACKAGE_ENV: path or "installed",
                    "PYTHONSAFEPATH": "1", "PYTHONNOUSERSITE": "1", "LLM_FINETUNING_WORKSPACE": str(workspace)})
        return subprocess.run([sys.executable, "-m", "mcp_server.training.trainer.verified_script",
                               "train/train.py"], cwd=run.dir, env=env, capture_output=True, text=True, timeout=120)

    ran = trainer()
    assert ran.returncode == 0 and "trained" in ran.stdout, ran.stderr
    refused = trainer(str(shadow))
    assert refused.returncode == 3 and f"hashlib ({shadow / 'hashlib.py'})" in refused.stderr, refused.stderr
    assert "trained" not in refused.stdout
    # Round 8's known gap: a shadow that puts the real module in its place in sys.modules after running (and one
    # that takes its folder off sys.path too) left no trace there; the folder the import system searched for it
    # is named (sys.path, sys.path_importer_cache)
    for leaves, hide in (("sys.modules", ""), ("sys.modules and sys.path", f"sys.path.remove({str(shadow)!r})\n")):
        marker = tmp_path / "shadow-ran"
        (shadow / "hashlib.py").write_text(_SELF_REMOVING.format(marker=str(marker), hide=hide))
        refused = trainer(str(shadow))
        assert marker.exists(), (leaves, refused.stderr)  # it did run, at the interpreter's start
        assert refused.returncode == 3 and f"the import system searched {shadow}" in refused.stderr, \
            (leaves, refused.stderr)
        assert "trained" not in refused.stdout
        marker.unlink()


def test_the_folders_the_import_system_searched_are_judged_not_only_sys_modules(tmp_path, monkeypatch):
    """verified_script.foreign_path_entries, on constructed paths: a folder on sys.path outside the allowed roots,
    and one taken off sys.path again but still a key of sys.path_importer_cache (where a self-removing shadow was
    found), are named; a folder a .pth file of the recorded site-packages adds (an old-style editable install's
    source) and a folder inside the recorded roots are not."""
    import importlib.machinery

    from mcp_server.training.trainer.verified_script import foreign_path_entries

    site, shadow, hidden, pth = (tmp_path / n for n in ("site-packages", "shadow", "hidden", "src"))
    for folder in (site, shadow, hidden, pth, site / "pkg"):
        folder.mkdir()
    (site / "old-editable.pth").write_text(f"# a comment\nimport os\n{pth}\n")
    monkeypatch.setenv(TRAINING_PATHS_ENV, str(site))
    monkeypatch.setattr(sys, "path", [str(shadow), str(pth), str(site), str(site / "pkg"), *sys.path])
    monkeypatch.setitem(sys.path_importer_cache, str(hidden), importlib.machinery.FileFinder(str(hidden)))
    found = foreign_path_entries()
    assert str(shadow) in found and str(hidden) in found, found
    assert not {str(pth), str(site), str(site / "pkg")} & set(found), found


# A shadow hashlib that runs, then puts the stdlib's own in sys.modules in its place (and may hide its folder).
_SELF_REMOVING = """\
import importlib.util, os, sys, sysconfig
spec = importlib.util.spec_from_file_location("hashlib", os.path.join(sysconfig.get_paths()["stdlib"], "hashlib.py"))
real = importlib.util.module_from_spec(spec)
spec.loader.exec_module(real)
sys.modules["hashlib"] = real
open({marker!r}, "a").write("shadow ran\\n")
{hide}"""


def test_validating_a_config_never_changes_the_pinned_launch_environment():
    """transformers' TrainingArguments exports FSDP_CPU_RAM_EFFICIENT_LOADING for fsdp: the validation that
    builds one (in this process when it is the training interpreter) puts the environment back, so a launch after
    it is not refused for a variable no shell set, nor a verdict recorded after it pins one."""
    from mcp_server.recipe.trl_fields import instantiate_grpo_config

    def training_variables() -> list[str]:
        return sorted(k for k in os.environ if k.startswith(("ACCELERATE_", "FSDP_")))

    before = training_variables()
    assert instantiate_grpo_config({"fsdp": "full_shard auto_wrap", "bf16": False}, 2, "9.0") is None
    assert training_variables() == before and loader_env_pin() == {}

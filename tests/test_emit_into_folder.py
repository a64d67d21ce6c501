"""emit-config --run-dir into a folder that holds something emission did not write (issue 48, fifth round, break 8:
a person's own data/train.jsonl, in a folder with no train/, was replaced with no copy kept). The table: every
file an emission writes (found by emitting into empty folders, so a new file emission writes gets its rows) x
every way the folder can already hold that path without an emission having written it (a person's own file, a
pipe, a directory, a link to nothing) x what `emit-config --run-dir` must do: refuse before writing anything,
naming the file and what to do, and leave the path as it was. Nothing trains; the emissions run in this process.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import checkout_env, cli_here, run_cli
from support import HOLDING_REWARD, sign_samples

EMISSIONS = {  # each request's CLI arguments: together they write every file emission writes
    "grpo": ("--model", "tiny", "--dataset", "tiny", "--gpu", "cpu"),
    "dapo": ("--model", "tiny", "--dataset", "tiny", "--gpu", "cpu", "--variant", "dapo"),
}
MINE = b"my own bytes, kept nowhere else\n"
KINDS = {
    "own-file": lambda path: path.write_bytes(MINE),
    "fifo": os.mkfifo,
    "directory": lambda path: path.mkdir(),
    "dangling-link": lambda path: path.symlink_to(path.parent / "nothing-here"),
}


@pytest.fixture(scope="module")
def written(tmp_path_factory, tiny_model):
    """{emission: the files it writes into an empty folder, relative to it}."""
    root = tmp_path_factory.mktemp("emit-into-ws")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLM_FINETUNING_WORKSPACE", str(root))
        for name, args in EMISSIONS.items():
            folder = root / f"empty-{name}"
            folder.mkdir()
            proc = cli_here("emit-config", *args, "--run-dir", str(folder))
            assert proc.returncode == 0, proc.stderr
            out[name] = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    return out


ROWS = [(name, rel) for name in EMISSIONS for rel in (
    "data/train.jsonl", "train/config.yaml", "train/train.py", "train/rewards.json", "train/request.json",
    "train/request.schema.json", "train/dynamic_sampling.json")]


CELLS = [(name, rel) for name, rel in ROWS if rel != "train/dynamic_sampling.json" or name == "dapo"]


def test_the_table_has_a_row_for_every_file_emission_writes(written):
    for name, files in written.items():
        assert set(files) == {rel for n, rel in CELLS if n == name}, (name, files)


def _state(path: Path):
    st = os.lstat(path)
    return stat.S_IFMT(st.st_mode), path.read_bytes() if stat.S_ISREG(st.st_mode) else os.readlink(path) if (
        stat.S_ISLNK(st.st_mode)) else None


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize(("emission", "rel"), CELLS, ids=[f"{e}:{r}" for e, r in CELLS])
def test_emission_never_replaces_what_it_did_not_write(emission, rel, kind, workspace, written):
    folder = workspace / "mine"
    path = folder / rel
    path.parent.mkdir(parents=True)
    KINDS[kind](path)
    before = _state(path)
    proc = cli_here("emit-config", *EMISSIONS[emission], "--run-dir", str(folder))
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert str(path) in proc.stderr and "nothing was written" in proc.stderr, proc.stderr
    assert "Move those files aside" in proc.stderr, proc.stderr
    assert _state(path) == before
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == sorted(
        [Path(rel), *(Path(*Path(rel).parts[:i]) for i in range(1, len(Path(rel).parts)))]), "something was written"
    shutil.rmtree(folder)


def test_emission_rewrites_its_own_files_and_the_tiny_prompts(workspace, written):
    folder = workspace / "again"
    folder.mkdir()
    args = (*EMISSIONS["dapo"], "--run-dir", str(folder))
    assert cli_here("emit-config", *args).returncode == 0
    proc = cli_here("emit-config", *args)  # over its own files, the tiny task's prompts included: fine
    assert proc.returncode == 0, proc.stderr


def test_emitting_again_leaves_no_sidecar_of_the_earlier_emission(workspace, written):
    """DAPO emitted into a folder, then GRPO into the same one: the DAPO run's train/dynamic_sampling.json stayed,
    and the trainer (which runs dynamic sampling whenever that file is there) would have run DAPO's dynamic
    sampling on the GRPO config."""
    folder = workspace / "switched"
    folder.mkdir()
    assert cli_here("emit-config", *EMISSIONS["dapo"], "--run-dir", str(folder)).returncode == 0
    assert (folder / "train" / "dynamic_sampling.json").is_file()
    proc = cli_here("emit-config", *EMISSIONS["grpo"], "--run-dir", str(folder))
    assert proc.returncode == 0, proc.stderr
    assert not (folder / "train" / "dynamic_sampling.json").exists()


# ---------------------------------------------------------------- round 8 (issue 48): a person's review.md
# emit-config --run-dir accepted a folder holding a person's own inspection/review.md ("my notes"), and
# inspect_rewards then replaced it with the generated sheet, no copy kept. Emission refuses the files of
# inspection/ and eval/ in a folder it did not emit into (the run's tools would replace them), and the review
# writers (sample_completions clears the review, inspect_rewards writes it) never replace one they did not write.
OTHER = [rel for rel in ("inspection/review.md", "inspection/notes.txt", "eval/baseline.json")]


@pytest.mark.parametrize("kind", ["own-file", "fifo", "dangling-link"])
@pytest.mark.parametrize("rel", OTHER)
def test_emission_refuses_a_persons_inspection_and_eval_files(rel, kind, workspace, written):
    folder = workspace / "mine"
    path = folder / rel
    path.parent.mkdir(parents=True)
    KINDS[kind](path)
    before = _state(path)
    proc = cli_here("emit-config", *EMISSIONS["grpo"], "--run-dir", str(folder))
    assert proc.returncode == 2 and str(path) in proc.stderr and "nothing was written" in proc.stderr, proc.stderr
    assert _state(path) == before
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == [Path(rel).parent, Path(rel)]


def _samples(run_dir: Path) -> None:
    """samples.jsonl and samples.meta.json as sample_completions writes them (13 prompts of 4), constructed."""
    import json

    rows = [{"id": 4 * p + k, "prompt_index": p, "sample_index": k, "row_index": p, "prompt": "What is 3 + 4?",
             "completion": "<reasoning>3 + 4 = 7</reasoning><answer>7</answer>" if k else "8", "completion_ids": [],
             "columns": {"answer": "7"}, "truncated": False, "finish_reason": "stop"} for p in range(13)
            for k in range(4)]
    (run_dir / "inspection").mkdir(exist_ok=True)
    (run_dir / "inspection" / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    sign_samples(run_dir, {"dataset_rows": 13, "num_prompts": 13, "n": 4})  # as the sampler signs them


def test_the_review_writers_never_replace_a_review_file_they_did_not_write(workspace, written):
    from mcp_server.errors import UserInputError
    from mcp_server.inspection.models import InspectRequest, SampleRequest
    from mcp_server.inspection.review import inspect_rewards
    from mcp_server.inspection.sampling import sample_completions

    folder = workspace / "emitted"
    folder.mkdir()
    assert cli_here("emit-config", *EMISSIONS["grpo"], "--run-dir", str(folder)).returncode == 0
    _samples(folder)
    notes = folder / "inspection" / "review.md"
    notes.write_bytes(MINE)
    for doing, call in (("inspect_rewards", lambda: inspect_rewards(InspectRequest(run=str(folder)))),
                        ("sample_completions", lambda: sample_completions(SampleRequest(run=str(folder))))):
        with pytest.raises(UserInputError, match=f"{doing} would replace {notes}"):
            call()
        assert notes.read_bytes() == MINE, doing
    proc = cli_here("emit-config", *EMISSIONS["grpo"], "--run-dir", str(folder))  # nor does emission accept it
    assert proc.returncode == 2 and f"{notes} (not the sheet inspect_rewards writes" in proc.stderr, proc.stderr
    assert notes.read_bytes() == MINE
    # its own sheet, even edited (the gate then says "run inspect_rewards again"), it replaces
    notes.unlink()
    sheet = Path(inspect_rewards(InspectRequest(run=str(folder))).review_md_path)
    sheet.write_text(sheet.read_text() + "\nmy note on sample 3\n")
    assert "my note" not in Path(inspect_rewards(InspectRequest(run=str(folder))).review_md_path).read_text()


# Round 12 (D3): `emit-config --run-dir /tmp/x` wrote train/ and data/ outside the workspace, and `--run-dir .`
# made the workspace's root a run. Every form of a run_dir that is not a folder inside the workspace x refused
# naming run_dir and what is accepted, nothing written there; a folder of the workspace (under runs/ or beside it)
# is still emitted into.
LEADING_OUT = {
    "absolute-outside": lambda ws, out: str(out),
    "relative-up": lambda ws, out: os.path.relpath(out, ws),
    "workspace-dot": lambda ws, out: ".",
    "workspace-absolute": lambda ws, out: str(ws),
    "runs-itself": lambda ws, out: "runs",
    "eval-itself": lambda ws, out: str(ws / "eval"),
    "link-in-workspace-to-outside": lambda ws, out: (ws / "mine").symlink_to(out) or "mine",
    "link-under-runs-to-outside": lambda ws, out: (ws / "runs" / "mine").symlink_to(out) or "runs/mine",
}


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("form", sorted(LEADING_OUT))
def test_a_run_dir_that_is_no_folder_inside_the_workspace_is_refused(form, workspace, tmp_path, tiny_model):
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "runs").mkdir()
    (workspace / "eval").mkdir()
    given = LEADING_OUT[form](workspace, outside)
    before = {"ws": _listing(workspace), "out": _listing(outside)}
    proc = cli_here("emit-config", *EMISSIONS["grpo"], "--run-dir", given, "--json", cwd=workspace)
    assert proc.returncode == 2, (form, proc.stdout, proc.stderr)
    assert "run_dir" in proc.stderr and "a run directory is a folder inside the workspace" in proc.stderr, proc.stderr
    assert {"ws": _listing(workspace), "out": _listing(outside)} == before


@pytest.mark.parametrize("where", ["runs/mine", "mine", "runs/linked-inside"])
def test_a_run_dir_inside_the_workspace_is_still_emitted_into(where, workspace, tiny_model):
    (workspace / "runs" / "real").mkdir(parents=True)
    (workspace / "runs" / "linked-inside").symlink_to(workspace / "runs" / "real")
    (workspace / where).mkdir(exist_ok=True)
    proc = cli_here("emit-config", *EMISSIONS["grpo"], "--run-dir", where, "--json", cwd=workspace)
    assert proc.returncode == 0, proc.stderr
    assert (workspace / where / "train" / "config.yaml").is_file()


# ---------------------------------------------------------------- round 16 (issue 48): D1 and D5
def test_emission_refuses_a_config_edited_by_hand_its_header_kept(workspace, written):
    """Round 16, D1: train/config.yaml was judged by its header only: a config edited by hand (a comment and a
    tuned value added, the emitted header kept) was replaced by the next emission, while an edited train.py was
    refused. Now both are refused, nothing written; the same config unedited is emitted over."""
    folder = workspace / "tuned"
    folder.mkdir()
    args = (*EMISSIONS["grpo"], "--run-dir", str(folder))
    assert cli_here("emit-config", *args).returncode == 0
    config = folder / "train" / "config.yaml"
    assert cli_here("emit-config", *args).returncode == 0, "an emitted config is emission's to replace"
    edited = config.read_text().replace("learning_rate:", "# PERSON: tuned over 3 days of sweeps\nlearning_rate:")
    retuned = config.read_text().replace("learning_rate: ", "learning_rate: 0.5 # ")
    for text in (edited, config.read_text() + "my_note: 1\n", retuned):
        config.write_text(text)
        before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        proc = cli_here("emit-config", *args, "--override", "max_steps=2")
        assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
        assert f"{config} (edited since emit_grpo_config wrote it" in proc.stderr and "nothing was written" in (
            proc.stderr), proc.stderr
        assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_a_second_emission_into_a_folder_is_refused_while_one_is_under_way(workspace, written):
    """Round 16, D5: emission B (NOT VALID: an unknown field) snapshots the folder, then emission A (valid) writes
    and reports success, then B puts its snapshot back: A's reported emission was undone. B is held at the
    import of its reward module (it signals, then waits for the test's go) so the order is the test's, not the
    scheduler's. Now A is refused while B is under way, nothing written by it, and B leaves the folder as it was;
    an emission after B ends goes through."""
    folder = workspace / "busy"
    folder.mkdir()
    base = (*EMISSIONS["grpo"], "--run-dir", str(folder))
    assert cli_here("emit-config", *base, "--override", "max_steps=3").returncode == 0
    (workspace / "blocker.py").write_text(HOLDING_REWARD)
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    b = subprocess.Popen([sys.executable, "-m", "mcp_server.cli", "emit-config", *base, "--rewards",
                          '[{"name": "blocker.wait"}]', "--override", "bogus_field=1"], cwd=workspace,
                         env=checkout_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (workspace / "started").exists():
            assert b.poll() is None and time.monotonic() < deadline, b.communicate()
            time.sleep(0.05)
        a = cli_here("emit-config", *base, "--override", "max_steps=7")
    finally:
        (workspace / "go").touch()
        out, err = b.communicate(timeout=300)
    assert b.returncode == 1 and "NOT VALID" in out + err, (b.returncode, out, err)
    config = (folder / "train" / "config.yaml").read_text()
    assert a.returncode != 0 or "max_steps: 7" in config, "A reported success and its emission was undone"
    assert a.returncode == 2 and f"another emission into {folder} is under way" in a.stderr, (a.returncode, a.stderr)
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    assert run_cli("emit-config", *base, "--override", "max_steps=7").returncode == 0  # the lock went with B
    assert "max_steps: 7" in (folder / "train" / "config.yaml").read_text()

"""Forged results and lost work around a run (issue 48, "Forged results" and "Data loss and escapes"; issue 49, a NOT
VALID emission), each replayed through the door it went through: the trainer's own (write_outcome, the progress
callback's records, as the emitted train.py calls them), training_status, export_model, resume's patch, and
emit-config; and round 12's run folders swapped for links (checkpoints/, cache/). Nothing here trains or starts a
process but the rows marked slow: the runs are constructed or emitted in this process.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import yaml

from conftest import cli_here
from support import append_signed, record_launch, write_exit, write_signed


def dead_run(workspace: Path, name: str, launch_id: str) -> Path:
    """runs/<name>/: launched once (run.json with its launch id), its process dead without an outcome."""
    run_dir = workspace / "runs" / name
    (run_dir / "train" / "logs").mkdir(parents=True)
    (run_dir / "train" / "config.yaml").write_text(yaml.safe_dump({"model_name_or_path": "tiny"}))
    (run_dir / "train" / "logs" / "stdout.log").write_text("==== llm-finetuning launch\n")
    (run_dir / "run.json").write_text(json.dumps({
        "state": "running", "pid": 2**31 - 2, "create_time": 1.0, "started_ts": 1.0, "cwd": str(run_dir),
        "launcher": ["bash", "train/launch.sh"], "launch_id": launch_id}))
    return run_dir


def test_a_logs_folder_redirected_mid_training_never_makes_another_run_succeed(workspace, monkeypatch):
    """Run A's train/logs replaced by a link to dead run B's logs while A trained: A's trainer wrote its outcome
    through it, and B read "succeeded" (and A wrote outside its own directory). The trainer's records are written
    only inside its run, and a record of another launch is never read as this one's."""
    from mcp_server.errors import UserInputError
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import training_status
    from mcp_server.training.trainer.progress import write_outcome

    a, b = dead_run(workspace, "a", "a" * 32), dead_run(workspace, "b", "b" * 32)
    assert training_status(StatusRequest(run=str(b))).state == "failed"
    shutil.rmtree(a / "train" / "logs")
    (a / "train" / "logs").symlink_to(b / "train" / "logs")
    monkeypatch.setenv("LLM_FINETUNING_LAUNCH_ID", "a" * 32)  # as launch_training exports it to A's trainer
    with pytest.raises(UserInputError, match="leads outside the run directory"):
        write_outcome(a, "succeeded", global_step=4)
    assert not (b / "train" / "logs" / "outcome.json").exists()
    assert training_status(StatusRequest(run=str(b))).state == "failed"
    # an outcome of another launch, however it got there (copied by hand), is not B's either
    (b / "train" / "logs" / "outcome.json").write_text(json.dumps({"state": "succeeded", "launch_id": "a" * 32}))
    assert training_status(StatusRequest(run=str(b))).state == "failed"
    # and A, whose logs are a link, reads nothing through it
    seen = training_status(StatusRequest(run=str(a)))
    assert seen.state == "failed" and "symbolic link" in seen.note, seen


def promoted_run(workspace: Path, tiny_model: Path, baseline: Path | None) -> Path:
    """A never-launched run whose output_dir holds the tiny model, and a hand-written promotion.json naming it (its
    content hash right) with a PROMOTE: no measurement behind it."""
    from mcp_server.workspace import sha256_file, sha256_tree

    run_dir = workspace / "runs" / "forged"
    (run_dir / "train").mkdir(parents=True)
    (run_dir / "train" / "config.yaml").write_text(yaml.safe_dump({"model_name_or_path": str(tiny_model),
                                                                     "output_dir": "checkpoints"}))
    shutil.copytree(tiny_model, run_dir / "checkpoints")
    forged = {"verdict": "PROMOTE", "checkpoint": str(run_dir / "checkpoints"),
              "checkpoint_sha256": sha256_tree(run_dir / "checkpoints"), "checkpoint_pass_rate": 0.9,
              "baseline_pass_rate": 0.1, "goldens_sha256": "0" * 64, "reasons": ["trust me"],
              "baseline_path": str(baseline or workspace / "eval" / "baseline-never.json"),
              "baseline_sha256": sha256_file(baseline) if baseline else "0" * 64, "goldens": "goldens.jsonl"}
    (run_dir / "promotion.json").write_text(json.dumps(forged))
    return run_dir


@pytest.mark.parametrize("baseline", ["never-existed", "real-but-unmeasured"])
def test_a_hand_written_promotion_is_never_exported_as_promoted(workspace, tiny_model, baseline):
    """A hand-written promotion.json (or one naming a baseline that never existed) PROMOTEd with no measurement:
    export_model took its verdict. Its evidence is re-derived: refused, nothing exported."""
    from mcp_server.errors import UserInputError
    from mcp_server.evaluation.export import export_model
    from mcp_server.evaluation.models import ExportRequest

    path = None
    if baseline == "real-but-unmeasured":
        path = workspace / "eval" / "baseline-tiny.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"pass_rate": 0.1, "goldens_sha256": "0" * 64, "items": [], "ci_low": 0.0,
                                    "ci_high": 0.2}))
    run_dir = promoted_run(workspace, tiny_model, path)
    with pytest.raises(UserInputError) as refused:
        export_model(ExportRequest(run=str(run_dir), smoke_items=1))
    assert "is not a promotion promote_checkpoint measured" in str(refused.value), refused.value
    assert not (run_dir / "export").exists()


def test_a_hand_written_guard_stop_moves_no_pin(workspace, tiny_model):
    """A stopped.json written by hand with `"by": "guard"` made a patched resume move the verdict's pins for what
    the patch changed (a sampling setting the review never saw). Only the guard's own record of the same stop, of
    the run's last launch, moves a pin."""
    from mcp_server.inspection.pins import config_pins
    from mcp_server.recipe.runspec import RunSpec
    from mcp_server.runs import Run
    from mcp_server.training.resume_patch import apply_patch
    from support import emit_run

    run = Run(emit_run("guarded"))
    pins = config_pins(run)
    run.inspection.mkdir(exist_ok=True)
    run.verdict.write_text(json.dumps({"verdict": "pass", "pins": pins}))
    run.logs.mkdir(parents=True, exist_ok=True)
    run.stopped.write_text(json.dumps({"step": 2, "by": "guard", "code": "entropy_collapse"}))
    refusals, _, _ = apply_patch(run, RunSpec.of_run(run), {"max_completion_length": 16})
    assert not refusals, refusals
    assert json.loads(run.verdict.read_text())["pins"] == pins  # nothing moved: the gate still refuses the change
    assert "pin_updates" not in json.loads(run.verdict.read_text())


def test_emission_never_overwrites_a_persons_train_py_and_says_what_a_not_valid_one_kept(workspace, tiny_model):
    """emit-config --run-dir into a folder overwrote the person's own train/train.py; a NOT VALID emission left a
    run directory behind (issue 49: "the run directory ... were kept")."""
    env = {"LLM_FINETUNING_WORKSPACE": str(workspace)}
    emit = ("emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu")
    proc = cli_here(*emit, "--run-name", "mine", "--json", env=env)
    run_dir = Path(json.loads(proc.stdout)["run_dir"])
    assert cli_here(*emit, "--run-dir", str(run_dir), env=env).returncode == 0  # over its own files: fine
    script = run_dir / "train" / "train.py"
    script.write_text(script.read_text() + "\n# my own change\n")
    config = (run_dir / "train" / "config.yaml").read_bytes()
    proc = cli_here(*emit, "--run-dir", str(run_dir), env=env)
    assert proc.returncode == 2 and "train.py" in proc.stderr and "nothing was written" in proc.stderr, proc.stderr
    assert script.read_text().endswith("# my own change\n")
    assert (run_dir / "train" / "config.yaml").read_bytes() == config

    own = workspace / "own"  # a folder of the person's, with their own script and config
    (own / "train").mkdir(parents=True)
    (own / "train" / "train.py").write_text("print('mine')\n")
    (own / "train" / "config.yaml").write_text("learning_rate: 1.0e-6\n")
    proc = cli_here(*emit, "--run-dir", str(own), env=env)
    assert proc.returncode == 2 and "train.py (not the script emission writes" in proc.stderr, proc.stderr
    assert "config.yaml (edited since emit_grpo_config wrote it, or not written by it)" in proc.stderr, proc.stderr
    assert (own / "train" / "train.py").read_text() == "print('mine')\n"

    # a refused emission leaves nothing it created (issue 49: fntypo and fntypo-2 left behind), and keeps what the
    # person had
    runs = sorted(p.name for p in (workspace / "runs").iterdir())
    proc = cli_here(*emit, "--run-name", "bad", "--override", "loss_type=foo", env=env)
    assert proc.returncode == 1 and "NOT VALID" in proc.stdout, proc.stdout
    assert "nothing was written (no run directory was created" in proc.stdout and "were kept" not in proc.stdout
    assert sorted(p.name for p in (workspace / "runs").iterdir()) == runs
    before = {p: p.read_bytes() for p in own.rglob("*") if p.is_file()}
    proc = cli_here(*emit, "--run-dir", str(own), "--override", "loss_type=foo", env=env)
    assert proc.returncode == 2, proc.stdout  # the person's own config: refused before anything is written
    fresh = workspace / "fresh"  # an empty folder of the person's: the refused emission's files and folders go
    fresh.mkdir()
    (fresh / "notes.txt").write_text("mine\n")
    proc = cli_here(*emit, "--run-dir", str(fresh), "--override", "loss_type=foo", env=env)
    assert proc.returncode == 1 and f"nothing was written ({fresh} is as it was)" in proc.stdout, proc.stdout
    assert sorted(p.name for p in fresh.iterdir()) == ["notes.txt"]
    assert {p: p.read_bytes() for p in own.rglob("*") if p.is_file()} == before
    # over an emission's own files (allowed): a refused one puts them back as they were
    config = (run_dir / "train" / "config.yaml").read_bytes()
    script.write_text(cli_text := script.read_text().replace("\n# my own change\n", ""))
    proc = cli_here(*emit, "--run-dir", str(run_dir), "--override", "loss_type=foo", env=env)
    assert proc.returncode == 1 and "is as it was" in proc.stdout, proc.stdout + proc.stderr
    assert (run_dir / "train" / "config.yaml").read_bytes() == config and script.read_text() == cli_text


def ended_run(workspace: Path, tiny_model: Path, name: str, state: str) -> Path:
    """A launched run whose process ended `state`, with what its trainer leaves (issue 48, fifth round): it began,
    logged steps 1 to 4, saved and recorded checkpoint-2 (digest.record_save, as the progress callback does), then
    - succeeded: saved and recorded the final model in output_dir, its outcome, exit code 0;
    - stopped: stopped at step 2 on request, its outcome, exit code 0;
    - failed: exit code 1 (a crash), no outcome."""
    from mcp_server.runs import Run
    from mcp_server.training.trainer.digest import record_save

    launch_id = name[0] * 32
    run = Run(dead_run(workspace, name, launch_id))
    run.config.write_text(yaml.safe_dump({"model_name_or_path": "tiny", "output_dir": "checkpoints", "max_steps": 4}))
    write_signed(run.train_begin, {"max_steps": 4, "global_step": 0, "launch_id": launch_id})
    for step in range(1, 5):
        append_signed(run.progress, {"step": step, "loss": 0.1, "launch_id": launch_id})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLM_FINETUNING_LAUNCH_ID", launch_id)
        shutil.copytree(tiny_model, run.checkpoints / "checkpoint-2")
        (run.checkpoints / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
        record_save(run, run.checkpoints / "checkpoint-2", 2)
        if state == "succeeded":
            for item in tiny_model.iterdir():
                shutil.copy(item, run.checkpoints / item.name)
            record_save(run, run.checkpoints, 4, final=True)
    if state in ("succeeded", "stopped"):
        if state == "stopped":
            write_signed(run.stopped, {"step": 2, "launch_id": launch_id})
        write_signed(run.outcome, {"state": state, "launch_id": launch_id})
    write_exit(run.dir, 0 if state != "failed" else 1, launch_id)
    return run.dir


@pytest.mark.parametrize("state, checkpoint, field, says", [
    ("failed", "elsewhere", "run", "is failed, not succeeded"),  # the fifth round's probe
    ("failed", "checkpoint-2", "run", "is failed, not succeeded"),
    ("succeeded", "elsewhere", "checkpoint", "is not a checkpoint of"),
    ("succeeded", "rewritten", "checkpoint", "is not the model the run's trainer saved"),
    ("succeeded", "final-rewritten", "checkpoint", "is not the model the run's trainer saved"),
    ("succeeded", "checkpoint-2", "goldens", "no baseline"),  # past every check: judged (no baseline here)
    ("succeeded", None, "goldens", "no baseline"),
    ("stopped", "checkpoint-2", "goldens", "no baseline"),  # a stopped run's own recorded save may be judged
])
def test_promote_judges_only_the_runs_own_recorded_model_of_a_run_that_ended_well(workspace, tiny_model, state,
                                                                                  checkpoint, field, says):
    """`promote-checkpoint RUN --checkpoint /elsewhere` on a failed run PROMOTEd (the state check was skipped when a
    checkpoint was given), and weights overwritten with the checkpoint's digest rewritten were judged as the run's.
    A checkpoint must be a checkpoint-N of the run's output_dir, of a run that succeeded or stopped, as the run's
    trainer recorded it (train/logs/saves.jsonl); the output_dir only of a succeeded run, as its final save."""
    from mcp_server.errors import UserInputError
    from mcp_server.evaluation.models import PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint
    from mcp_server.training.trainer.digest import write_checkpoint_digest

    run_dir = ended_run(workspace, tiny_model, "e" + state, state)
    given = {"elsewhere": str(tiny_model), "rewritten": "checkpoints/checkpoint-2",
             "checkpoint-2": "checkpoints/checkpoint-2"}.get(checkpoint)
    weights = {"rewritten": run_dir / "checkpoints" / "checkpoint-2",
               "final-rewritten": run_dir / "checkpoints"}.get(checkpoint)
    if weights is not None:  # other weights of the same size; the checkpoint's own digest rewritten to match
        target = next(p for p in sorted(weights.iterdir()) if p.suffix == ".safetensors")
        target.write_bytes(bytes(b ^ 1 for b in target.read_bytes()))
        write_checkpoint_digest(weights)
    with pytest.raises(UserInputError) as refused:
        promote_checkpoint(PromoteRequest(run=str(run_dir), checkpoint=given))
    assert (refused.value.field, says in str(refused.value)) == (field, True), str(refused.value)


def test_a_hand_written_baseline_never_decides_a_promotion(workspace, tiny_model):
    """A second baseline written by hand, with an earlier written_at and a pass rate of 0, made the base model
    PROMOTE over itself (the earliest baseline won). The baseline that counts is one evaluate_model recorded by name
    and hash (eval/baselines.jsonl): any other is refused, named, before anything is judged."""
    from mcp_server.errors import UserInputError
    from mcp_server.evaluation.models import PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint

    run_dir, forged = _base_as_trained_beside_a_forged_baseline(workspace, tiny_model)
    with pytest.raises(UserInputError) as refused:
        promote_checkpoint(PromoteRequest(run=str(run_dir), goldens="tiny"))
    assert refused.value.field == "baseline" and forged.name in str(refused.value), str(refused.value)
    assert "is not a baseline evaluate_model wrote" in str(refused.value)
    assert not (run_dir / "promotion.json").exists()


def test_a_run_folder_whose_only_trace_is_a_promotion_is_never_emitted_over(workspace):
    """A folder holding only promotion.json (a run's judgement, moved or kept) is a run that produced something:
    emission into it is refused, naming it, and writes nothing."""
    folder = workspace / "runs" / "judged"
    folder.mkdir(parents=True)
    (folder / "promotion.json").write_text(json.dumps({"verdict": "REJECT"}))
    proc = cli_here("emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu", "--run-dir", str(folder),
                    env={"LLM_FINETUNING_WORKSPACE": str(workspace)})
    assert proc.returncode == 2 and "promotion.json" in proc.stderr, proc.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["promotion.json"]


# ---------------------------------------------------------------- the keyed record (issue 48, a blind hostile round)
def forge_save(run, folder: Path, step: int, final: bool, launch_id: str, mac: str | None = None) -> None:
    """A saves.jsonl line as record_save writes it, computed by hand from the files there (what a forger who can
    write the workspace can do), with `mac` when given (the key is not theirs)."""
    from mcp_server.training.trainer.digest import _checkpoint_files, save_key
    from mcp_server.workspace import sha256_file

    files = {p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
             for p in _checkpoint_files(folder, final)}
    line = {"save": save_key(run, folder), "step": step, "final": final, "files": files, "launch_id": launch_id,
            **({"mac": mac} if mac else {})}
    with open(run.saves, "a") as handle:
        handle.write(json.dumps(line) + "\n")


def forge_success(run_dir: Path, tiny_model: Path, mac: str | None = None) -> None:
    """F1: a run whose trainer was killed, made to read "succeeded" by writing every evidence file by hand with the
    launch id read from run.json: exit code (both files), outcome.json, train-begin.json, progress lines, a
    checkpoint folder and the final model, with their saves.jsonl lines."""
    from mcp_server.runs import Run

    run = Run(run_dir)
    launch_id = json.loads(run.run_json.read_text())["launch_id"]
    tag = {"launch_id": launch_id, **({"mac": mac} if mac else {})}
    run.config.write_text(yaml.safe_dump({"model_name_or_path": "tiny", "output_dir": "checkpoints", "max_steps": 4}))
    shutil.copytree(tiny_model, run.checkpoints / "checkpoint-4")
    (run.checkpoints / "checkpoint-4" / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    forge_save(run, run.checkpoints / "checkpoint-4", 4, False, launch_id, mac)
    for item in tiny_model.iterdir():
        shutil.copy(item, run.checkpoints / item.name)
    forge_save(run, run.checkpoints, 4, True, launch_id, mac)
    run.train_begin.write_text(json.dumps({"max_steps": 4, "global_step": 0, **tag}))
    run.progress.write_text("".join(json.dumps({"step": s, "loss": 0.1, **tag}) + "\n" for s in range(1, 5)))
    run.outcome.write_text(json.dumps({"state": "succeeded", "global_step": 4, **tag}))
    run.exit_code.write_text("0\n")
    (run.logs / "exit.json").write_text(json.dumps({"exit_code": 0, **tag}))  # the launcher's signed record's place


def assert_not_succeeded(run_dir: Path, says: str = "not recorded by llm-finetuning on this machine") -> None:
    from mcp_server.errors import UserInputError
    from mcp_server.evaluation.models import PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import list_runs, training_status

    status = training_status(StatusRequest(run=str(run_dir)))
    assert status.state == "failed" and says in (status.note or ""), (status.state, status.note)
    assert {Path(r.run_dir).name: r.state for r in list_runs().runs}[run_dir.name] == "failed"
    with pytest.raises(UserInputError) as refused:
        promote_checkpoint(PromoteRequest(run=str(run_dir)))
    assert refused.value.field == "run" and "is failed, not succeeded" in str(refused.value), str(refused.value)


@pytest.mark.parametrize("mac", [None, "0" * 64, "another record's"])
def test_f1_a_killed_run_whose_every_record_was_written_by_hand_reads_failed(workspace, tiny_model, mac):
    """F1: launched, its trainer killed, then every evidence file of a success written by hand with the launch id
    from run.json (unsigned, a made-up mac, or the mac of a record llm-finetuning signed for another run). None of
    them was signed for this run with the key outside the workspace: the run is failed, saying why."""
    if mac == "another record's":
        other = ended_run(workspace, tiny_model, "other", "succeeded")
        mac = json.loads((other / "train" / "logs" / "outcome.json").read_text()).get("mac", "f" * 64)
    run_dir = dead_run(workspace, "killed", "k" * 32)
    forge_success(run_dir, tiny_model, mac)
    assert_not_succeeded(run_dir)


def test_records_signed_for_another_run_copied_over_are_not_this_runs(workspace, tiny_model):
    """Run A succeeded (every record signed); run B, launched with the same launch id, died. A's records and models
    copied into B (run.json's launch id agrees) were B's success: a record is signed for the folder and file it was
    written to, so a copy reads as absent."""
    a = ended_run(workspace, tiny_model, "asource", "succeeded")
    b = dead_run(workspace, "bcopy", "a" * 32)
    shutil.copy(a / "train" / "config.yaml", b / "train" / "config.yaml")
    for item in (a / "train" / "logs").iterdir():
        if item.name != "stdout.log":
            shutil.copy(item, b / "train" / "logs" / item.name)
    shutil.copytree(a / "checkpoints", b / "checkpoints")
    assert_not_succeeded(b)


def test_f3_swapped_weights_with_a_matching_ledger_line_are_never_loaded(workspace, tiny_model):
    """F3: a stopped run's checkpoint-2 weights swapped for others of the same size and a saves.jsonl line with
    their sha256 appended by hand: promote judged them as the run's. The line has no valid signature: only the
    trainer's own line counts, and the swapped weights are refused."""
    from mcp_server.errors import UserInputError
    from mcp_server.evaluation.models import PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint
    from mcp_server.runs import Run
    from mcp_server.training.trainer.digest import write_checkpoint_digest

    run = Run(ended_run(workspace, tiny_model, "swapped", "stopped"))
    folder = run.checkpoints / "checkpoint-2"
    target = next(p for p in sorted(folder.iterdir()) if p.suffix == ".safetensors")
    target.write_bytes(bytes(b ^ 1 for b in target.read_bytes()))
    write_checkpoint_digest(folder, 2)  # the checkpoint's own copy of the digest agrees with the swap
    forge_save(run, folder, 2, False, "s" * 32)
    with pytest.raises(UserInputError) as refused:
        promote_checkpoint(PromoteRequest(run=str(run.dir), checkpoint="checkpoints/checkpoint-2"))
    assert refused.value.field == "checkpoint" and "is not the model the run's trainer saved" in str(refused.value)


def test_f2_a_baseline_line_appended_by_hand_never_decides_a_promotion(workspace, tiny_model):
    """F2: a baseline never measured, filed with a line appended to eval/baselines.jsonl as evaluate_model writes
    it (name, sha256, written_at): promote compared against it. The line has no valid signature: refused, named."""
    from mcp_server.errors import UserInputError
    from mcp_server.evaluation.evaluate import baseline_ledger
    from mcp_server.evaluation.models import PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint
    from mcp_server.workspace import sha256_file

    run_dir, forged = _base_as_trained_beside_a_forged_baseline(workspace, tiny_model)
    with open(baseline_ledger(), "a") as handle:
        handle.write(json.dumps({"name": forged.name, "sha256": sha256_file(forged),
                                 "written_at": "2000-01-01T00:00:00Z"}) + "\n")
    with pytest.raises(UserInputError) as refused:
        promote_checkpoint(PromoteRequest(run=str(run_dir), goldens="tiny"))
    assert refused.value.field == "baseline" and forged.name in str(refused.value), str(refused.value)
    assert "baselines.jsonl line 1 has no valid signature" in str(refused.value), str(refused.value)
    assert not (run_dir / "promotion.json").exists()


def test_without_the_key_nothing_reads_as_recorded_and_the_trainer_refuses_to_start(workspace, tiny_model,
                                                                                    monkeypatch, tmp_path, capsys):
    """The key missing where the readers look (another LLM_FINETUNING_STATE_DIR): a run that succeeded cannot be
    told from a forged one, so it reads failed with a note naming the key's path and the variable (no crash), and
    a trainer refuses to start, naming them, before train.py runs."""
    run_dir = ended_run(workspace, tiny_model, "keyless", "succeeded")
    monkeypatch.setenv("LLM_FINETUNING_STATE_DIR", str(tmp_path / "no-key-here"))
    assert_not_succeeded(run_dir, says=f"no evidence key at {tmp_path / 'no-key-here' / 'evidence.key'}")
    from mcp_server.training.trainer.verified_script import main

    script = tmp_path / "train.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    with pytest.raises(SystemExit) as refused:
        main([str(script)])
    err = capsys.readouterr().err
    assert refused.value.code == 3 and "LLM_FINETUNING_STATE_DIR" in err and "no-key-here" in err, err
    assert not (tmp_path / "ran").exists()
    monkeypatch.setenv("LLM_FINETUNING_STATE_DIR", str(workspace / "state"))  # a key inside the workspace: refused
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import training_status

    seen = training_status(StatusRequest(run=str(run_dir)))
    assert seen.state == "failed" and "inside the workspace" in seen.note, seen.note


@pytest.mark.parametrize("copied", [("train/logs", "checkpoints"), ("train/logs", "checkpoints", "run.json")])
def test_round12_f1_a_run_emitted_again_where_a_launched_run_was_reads_not_launched(workspace, tiny_model, tmp_path,
                                                                                   copied):
    """Round 12 F1: a launched run's folder saved aside and deleted, another recipe emitted at the same path, the
    saved train/logs and checkpoints (and run.json) copied back: training_status and list_runs said "succeeded,
    step 4/4", since the launcher's record is keyed by the path and outlived the folder. The emission supersedes
    it: no launch's records are the new run's, which reads not launched and says why; a trainer started by hand
    in it (`python train/train.py`, as its config's header says; no launch id) is still read as its own."""
    from support import emit_run
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import list_runs, training_status
    from mcp_server.workspace import unique_run_name

    run_dir = ended_run(workspace, tiny_model, unique_run_name("again"), "succeeded")
    record_launch(run_dir, run_dir.name[0] * 32)  # as launch_training recorded it
    assert training_status(StatusRequest(run=str(run_dir))).state == "succeeded"
    shutil.copytree(run_dir, tmp_path / "saved")
    shutil.rmtree(run_dir)
    assert emit_run("again") == run_dir  # another recipe, never launched, at the same path
    for name in copied:
        (shutil.copytree if (tmp_path / "saved" / name).is_dir() else shutil.copy)(tmp_path / "saved" / name,
                                                                                  run_dir / name)
    status = training_status(StatusRequest(run=str(run_dir)))
    assert status.state == "not_launched" and "has not been launched" in status.message, status.message
    assert "earlier run at this path" in status.note and "train/logs/outcome.json" in status.note, status.note
    assert ("run.json," in status.note) == ("run.json" in copied), status.note
    assert status.step is None and status.latest == {}, status
    listed = {r.run: r for r in list_runs().runs}[run_dir.name]
    assert listed.state == "not_launched" and listed.step is None, listed
    for name in copied:  # now trained by hand: its own untagged records
        (shutil.rmtree if (run_dir / name).is_dir() else Path.unlink)(run_dir / name)
    (run_dir / "train" / "logs").mkdir()
    append_signed(run_dir / "train" / "logs" / "progress.jsonl", {"step": 1, "loss": 0.1})
    write_signed(run_dir / "train" / "logs" / "outcome.json", {"state": "stopped"})
    status = training_status(StatusRequest(run=str(run_dir)))
    assert status.state == "stopped" and status.step == 1 and not status.note, status


@pytest.mark.parametrize("how", ["launch_id-rewritten", "launch_id-removed", "run.json-removed"])
def test_f1_an_earlier_launchs_signed_records_put_back_never_make_a_killed_launch_succeed(workspace, tiny_model,
                                                                                          how):
    """F1, seventh round: launch 1 succeeded (every record signed); launch 2 (archive_previous) was killed. Launch
    1's signed logs and checkpoints copied back from archive/attempt-1 and launch 1's id written into run.json (or
    the id, or run.json, removed: "any launch") made launch 2 read succeeded: run.json is the forger's to write.
    The launch id that counts is the launcher's record outside the workspace: the run reads failed."""
    run_dir = ended_run(workspace, tiny_model, "replay", "succeeded")
    first, second = "r" * 32, "s" * 32
    record_launch(run_dir, first)
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import training_status

    assert training_status(StatusRequest(run=str(run_dir))).state == "succeeded"  # the launcher's own: read
    archive = run_dir / "archive" / "attempt-1"  # what --archive-previous moves, then launch 2
    archive.mkdir(parents=True)
    for name in ("run.json", "checkpoints"):
        (run_dir / name).rename(archive / name)
    (run_dir / "train" / "logs").rename(archive / "logs")
    dead_run(workspace, "replay-2", second)  # launch 2's run.json, as launch_training writes it
    shutil.move(workspace / "runs" / "replay-2" / "run.json", run_dir / "run.json")
    record = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**record, "cwd": str(run_dir)}))
    record_launch(run_dir, second)
    (run_dir / "train" / "logs").mkdir()
    write_exit(run_dir, 137, second)  # killed
    assert training_status(StatusRequest(run=str(run_dir))).state == "failed"
    shutil.rmtree(run_dir / "train" / "logs")  # the forger: launch 1's records and models put back
    shutil.copytree(archive / "logs", run_dir / "train" / "logs")
    shutil.copytree(archive / "checkpoints", run_dir / "checkpoints")
    record = json.loads((run_dir / "run.json").read_text())
    if how == "run.json-removed":
        (run_dir / "run.json").unlink()
    else:
        record = {**record, "state": "succeeded", "launch_id": first}
        if how == "launch_id-removed":
            del record["launch_id"]
        (run_dir / "run.json").write_text(json.dumps(record))
    if how != "run.json-removed":
        assert_not_succeeded(run_dir, says="outcome.json is of another launch")
        return
    from mcp_server.errors import UserInputError
    from mcp_server.evaluation.models import PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint

    status = training_status(StatusRequest(run=str(run_dir)))  # its logs, no end of this launch: not succeeded
    assert status.state == "unknown" and "outcome.json is of another launch" in status.note, status
    with pytest.raises(UserInputError) as refused:
        promote_checkpoint(PromoteRequest(run=str(run_dir)))
    assert refused.value.field == "run" and "not succeeded" in str(refused.value), str(refused.value)


@pytest.mark.slow
def test_f1_a_real_training_killed_then_forged_reads_failed(workspace, tiny_model, monkeypatch):
    """F1 end to end: a tiny training launched through launch_training, its trainer SIGKILLed at its first
    progress line, then every evidence file of a success written by hand with the launch id from run.json. The
    launcher's signed exit record (killed: 137) and the trainer's unsigned-by-hand records leave it failed."""
    import os
    import signal
    import time

    import psutil

    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest
    from support import emit_run, pass_inspection, wait_for

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    run_dir = emit_run("killed-e2e", max_steps=50)
    pass_inspection(run_dir)
    launched = launch_training(LaunchRequest(run=str(run_dir)))
    assert launched.launched, launched.message
    progress, deadline = run_dir / "train" / "logs" / "progress.jsonl", time.time() + 420
    while not (progress.exists() and progress.read_text().strip()) and time.time() < deadline:
        time.sleep(0.5)
    trainers = [p for p in psutil.Process(launched.pid).children(recursive=True) if "python" in p.name()]
    assert trainers, "no trainer process under the launcher"
    for proc in trainers:
        os.kill(proc.pid, signal.SIGKILL)
    status = wait_for(run_dir, lambda s: not s.alive, timeout=120)
    assert status.state == "failed", status
    exit_record = json.loads((run_dir / "train" / "logs" / "exit.json").read_text())
    assert exit_record["exit_code"] != 0 and "mac" in exit_record, exit_record
    for stale in ("exit.json", "outcome.json"):
        (run_dir / "train" / "logs" / stale).unlink(missing_ok=True)
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    (run_dir / "train" / "logs" / "saves.jsonl").unlink(missing_ok=True)
    (run_dir / "train" / "logs" / "progress.jsonl").unlink()
    forge_success(run_dir, tiny_model)
    assert_not_succeeded(run_dir)


PRE_COMMIT = """#!/bin/sh
touch "$MARKS/pre-commit"
for s in runs/*/train/launch.sh; do sed -i "s|-m mcp_server.training.trainer.verified_script|-c 'exit 0' #|" "$s"; done
"""


@pytest.mark.slow
def test_the_launch_script_bash_runs_is_the_one_the_launch_wrote(workspace, tiny_model, monkeypatch, tmp_path):
    """Round 9, G4 and F1 end to end through launch_training. G4: the workspace is a git repository whose
    pre-commit hook (run by the launch's commit, between the gates and bash) pointed train/launch.sh at another
    trainer. F1: train/launch.sh's tail after the trainer rewritten in place (same inode) while training ran, then
    the trainer SIGKILLed: bash read the new tail, which wrote a signed exit 0. Now git runs no hook, and bash runs
    the launch's own copy, outside the workspace (gone once bash has it open): the kill reads failed, exit 137."""
    import os
    import signal
    import subprocess

    import psutil

    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest
    from support import emit_run, pass_inspection, wait_for

    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("MARKS", str(marks))
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    hook = workspace / ".git" / "hooks" / "pre-commit"
    hook.write_text(PRE_COMMIT)
    hook.chmod(0o755)
    run_dir = emit_run("r9-launch", max_steps=50)
    pass_inspection(run_dir)
    launched = launch_training(LaunchRequest(run=str(run_dir)))
    assert launched.launched and launched.git_commit, launched.message
    assert not list(marks.iterdir())  # the workspace's hook never ran
    script = run_dir / "train" / "launch.sh"
    text = script.read_text()
    assert "verified_script" in text
    tail = text.index("\nrc=$?\n") + 1
    with open(script, "r+") as f:  # F1: the tail rewritten in place while the trainer runs
        f.seek(tail)
        f.write(f"touch {marks}/tail; rc=0; {launched.command[0]} -m mcp_server.evidence exit 0; exit 0\n")
        f.truncate()
    bash = psutil.Process(launched.pid).cmdline()
    progress, deadline = run_dir / "train" / "logs" / "progress.jsonl", time.time() + 420
    while not (progress.exists() and progress.read_text().strip()) and time.time() < deadline:
        time.sleep(0.5)
    for proc in psutil.Process(launched.pid).children(recursive=True):
        if "python" in proc.name():
            os.kill(proc.pid, signal.SIGKILL)
    status = wait_for(run_dir, lambda s: not s.alive, timeout=120)
    assert not list(marks.iterdir())  # the rewritten tail never ran
    assert status.state == "failed", status
    assert json.loads((run_dir / "train" / "logs" / "exit.json").read_text())["exit_code"] == 137
    assert bash[1] != "train/launch.sh" and not Path(bash[1]).is_relative_to(workspace), bash
    assert not Path(bash[1]).exists()  # the copy removed itself once bash had it open


# ---------------------------------------------------------------- the m4 audit (issue 48): run.json lost at the end
from test_run_states import OLD, Event, _cell, _status, lineage  # noqa: E402  (the run-state table's cells)


ENDED_THEN_RECORD_LOST = {  # run.json removed after the run ended: its signed end records still tell how
    "stopped": (lineage("stopped"), "stopped"),
    "stopped-without-outcome": ([*lineage("stopping"), Event("stopped", OLD, step=2), Event("exit_code", 0)],
                                "stopped"),
    "failed-exit-1": ([*lineage("running"), Event("exit_code", 1)], "failed"),
    "exit-0-without-outcome": ([*lineage("running"), Event("exit_code", 0)], "unknown"),
    "succeeded": (lineage("succeeded"), "succeeded"),
    "forged-outcome-never-trained": ([*lineage("launching"), Event("outcome", (OLD, "succeeded")),
                                      Event("exit_code", 0)], "failed"),
}


@pytest.mark.parametrize("case", list(ENDED_THEN_RECORD_LOST))
def test_an_ended_run_whose_run_json_was_removed_reads_from_its_end_records(tmp_path, monkeypatch, case):
    """No run.json and no live process: the run's signed end records (outcome, stopped.json, the exit record)
    say how it ended, an outcome of success only where its evidence bears it out; neither: unknown."""
    from mcp_server.training.status import list_runs

    events, want = ENDED_THEN_RECORD_LOST[case]
    run_dir = _cell(tmp_path, monkeypatch, want, events, tweak=lambda run: run.run_json.unlink())
    status = _status(run_dir)
    assert (status.state, status.alive) == (want, False), status.message
    assert {Path(r.run_dir).name: r.state for r in list_runs().runs}[run_dir.name] == want


def _base_as_trained_beside_a_forged_baseline(workspace: Path, tiny_model: Path) -> tuple[Path, Path]:
    """A run whose "trained" checkpoint is the base model itself, and a baseline file of 0% that evaluate_model never
    measured (eval/baseline-tiny-000000000000.json): (the run folder, the forged file)."""
    from mcp_server.evaluation.evaluate import baseline_path, resolve_goldens
    from mcp_server.workspace import sha256_file

    run_dir = workspace / "runs" / "base-again"
    (run_dir / "train").mkdir(parents=True)
    (run_dir / "train" / "config.yaml").write_text(yaml.safe_dump({"model_name_or_path": "tiny",
                                                                     "output_dir": "checkpoints"}))
    shutil.copytree(tiny_model, run_dir / "checkpoints")  # the base model itself, placed as the "trained" one
    goldens = resolve_goldens("tiny")
    forged = baseline_path("tiny", "000000000000")
    forged.write_text(json.dumps({
        "kind": "baseline", "written_at": "2000-01-01T00:00:00Z", "model": "tiny", "goldens": str(goldens),
        "goldens_sha256": sha256_file(goldens), "graders": [{"name": "format_reward"}], "max_new_tokens": 8,
        "seed": 3407, "n": 0, "passed": 0, "pass_rate": 0.0, "ci_low": 0.0, "ci_high": 0.0, "items": []}))
    return run_dir, forged


# ---------------------------------------------------------------- SLURM launches and the guard's record (issue 48)
def slurm_launch(run_dir: Path, launch_id: str, job_id: str, started_ts: float = 1.0) -> None:
    """run.json of a SLURM launch as job.submit writes it, and the launcher's record of it beside the key (the
    launch id exported to the job, the job id sbatch answered bound into it)."""
    record = {"backend": "slurm", "state": "pending", "pid": None, "job_id": job_id, "cwd": str(run_dir),
              "started_ts": started_ts, "launch_id": launch_id,
              "slurm": {"job_id": job_id, "nodes": 2, "comment": f"llm-finetuning:{job_id * 4}",
                        "job_name": run_dir.name}}
    (run_dir / "run.json").write_text(json.dumps(record))
    record_launch(run_dir, launch_id, job_id)


def no_scheduler(monkeypatch, tmp_path: Path) -> None:
    """Where the scheduler cannot be asked (or no longer knows the job): the state is read from the records."""
    empty = tmp_path / "no-slurm-here"
    empty.mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", str(empty))


@pytest.mark.parametrize("first", ["succeeded", "stopped"])
@pytest.mark.parametrize("how", ["as-is", "run.json-rewritten"])
def test_f1_an_earlier_slurm_jobs_signed_records_put_back_never_end_a_killed_launch_well(workspace, tiny_model,
                                                                                         monkeypatch, tmp_path,
                                                                                         first, how):
    """F1 on SLURM (issue 48, seventh round's replay): job 41 of launch 1 ended `first` (every record signed and
    tagged with its launch id); launch 2 (job 42) was killed; launch 1's signed logs and checkpoints copied back
    (fresh times: `cp`), run.json left or rewritten to launch 1's job and id, where the scheduler no longer knows
    the jobs. The SLURM reader took any signed marker newer than the launch: launch 2 read "stopped". The launch
    id and job that count are the launcher's record outside the workspace: neither succeeded nor stopped, and
    what was not read is named."""
    from mcp_server.errors import UserInputError
    from mcp_server.evaluation.models import PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import training_status

    no_scheduler(monkeypatch, tmp_path)
    run_dir = ended_run(workspace, tiny_model, "job" + first, first)
    one, two = "j" * 32, "t" * 32  # ended_run tags launch 1's records with its name's first letter
    slurm_launch(run_dir, one, "41")
    assert training_status(StatusRequest(run=str(run_dir))).state == first  # launch 1's own records: read
    archive = run_dir / "archive" / "attempt-1"  # what --archive-previous moves before launch 2
    archive.mkdir(parents=True)
    for name in ("run.json", "checkpoints"):
        (run_dir / name).rename(archive / name)
    (run_dir / "train" / "logs").rename(archive / "logs")
    (run_dir / "train" / "logs").mkdir()
    slurm_launch(run_dir, two, "42", started_ts=time.time() - 5)
    write_exit(run_dir, 137, two)  # the job script's signed exit record: killed
    assert training_status(StatusRequest(run=str(run_dir))).state == "failed"
    shutil.rmtree(run_dir / "train" / "logs")  # the forger: launch 1's records and models put back, fresh times
    shutil.copytree(archive / "logs", run_dir / "train" / "logs", copy_function=shutil.copy)
    shutil.copytree(archive / "checkpoints", run_dir / "checkpoints", copy_function=shutil.copy)
    if how == "run.json-rewritten":
        record = json.loads((run_dir / "run.json").read_text())
        (run_dir / "run.json").write_text(json.dumps({**record, "launch_id": one, "job_id": "41", "state": first}))
    status = training_status(StatusRequest(run=str(run_dir)))
    assert status.state not in ("succeeded", "stopped"), (status.state, status.note)
    assert "outcome.json is of another launch" in status.note, status.note
    with pytest.raises(UserInputError) as refused:
        promote_checkpoint(PromoteRequest(run=str(run_dir), checkpoint="checkpoints/checkpoint-2"))
    assert refused.value.field == "run" and "not succeeded" in str(refused.value), str(refused.value)


GUARD_STOP = {"mode": "stop", "step": 2, "time": 1.0, "stopped": {"code": "entropy_collapse", "step": 2, "save": True},
              "findings": [{"code": "entropy_collapse", "severity": "error", "explanation": "forged",
                            "patch": {"learning_rate": 0.5}}]}


@pytest.mark.parametrize("guard", ["hand-written", "another launch's", "this launch's"])
def test_the_guards_record_is_read_only_as_the_trainer_signed_it_for_this_launch(workspace, tiny_model, guard):
    """train/logs/guard.json was unsigned: one written by hand made training_status say the guard stopped the run
    and show its patch (learning_rate 0.5) to apply before resuming. Read only when the trainer signed it for this
    launch; otherwise named in the note and shown as nothing."""
    from mcp_server.runs import Run
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import training_status

    run = Run(ended_run(workspace, tiny_model, "gstop", "stopped"))
    record_launch(run.dir, "g" * 32)
    if guard == "hand-written":
        run.guard.write_text(json.dumps({**GUARD_STOP, "launch_id": "g" * 32}))
    else:
        write_signed(run.guard, {**GUARD_STOP, "launch_id": "g" * 32 if guard == "this launch's" else "x" * 32})
    status = training_status(StatusRequest(run=str(run.dir)))
    assert status.state == "stopped", (status.state, status.note)
    if guard == "this launch's":
        assert status.guard_stop["code"] == "entropy_collapse" and status.live_findings[0].patch == {
            "learning_rate": 0.5} and "stopped by the guard" in status.message, status.message
        return
    assert status.guard_stop is None and status.live_findings == [], status
    assert "stopped by the guard" not in status.message
    says = ("train/logs/guard.json has no valid signature" if guard == "hand-written"
            else "train/logs/guard.json is of another launch")
    assert says in (status.note or ""), status.note


@pytest.mark.parametrize("forged", ["guard.json", "stopped.json", "train-begin.json"])
def test_a_hand_written_record_never_changes_the_outcome_the_trainer_records(workspace, forged, monkeypatch):
    """The trainer's own door (write_outcome, as the emitted train.py calls it when the Trainer returns) read
    guard.json, stopped.json and train-begin.json unsigned: one written by hand in train/logs/ during training
    turned a run that trained well into "failed" (a guard stop on a lost signal; zero steps trained) or "stopped".
    Only the trainer's own signed records of this launch decide it."""
    from mcp_server.training.trainer.progress import write_outcome

    monkeypatch.setenv("LLM_FINETUNING_LAUNCH_ID", "w" * 32)  # as the launcher exports it to its trainer
    logs = workspace / "runs" / "outcome" / "train" / "logs"
    logs.mkdir(parents=True)
    hand = {"guard.json": {"mode": "stop", "step": 7, "findings": [], "stopped": {"code": "signal_lost", "step": 7}},
            "stopped.json": {"step": 7, "by": "request"},
            "train-begin.json": {"global_step": 9, "max_steps": 9}}[forged]
    (logs / forged).write_text(json.dumps({**hand, "launch_id": "w" * 32}))
    write_outcome(logs.parents[1], "succeeded", global_step=7)
    assert json.loads((logs / "outcome.json").read_text())["state"] == "succeeded"
    write_signed(logs / forged, {**hand, "launch_id": "w" * 32})  # the trainer's own: it decides
    write_outcome(logs.parents[1], "succeeded", global_step=7)
    assert json.loads((logs / "outcome.json").read_text())["state"] == ("stopped" if forged == "stopped.json"
                                                                         else "failed")


# ---------------------------------------------------------------- what a signature binds (issue 48, round 7)
SIGNED_FILES = ("train/logs/train-begin.json", "train/logs/progress.jsonl", "train/logs/saves.jsonl",
                "train/logs/stop-request.json", "train/logs/stopped.json", "train/logs/guard.json",
                "train/logs/outcome.json", "train/logs/exit.json", "train/logs-attempt-1/outcome.json",
                "train/logs-attempt-1/exit.json")


def signed_records(run_dir: Path) -> dict[str, dict]:
    """Every record a stopped run's trainer and launcher signed, by the file it was written to (a line of a ledger:
    its last), one earlier attempt's logs beside them (resume_training keeps them as train/logs-attempt-1/)."""
    from mcp_server.runs import Run

    run = Run(run_dir)
    write_signed(run.stop_request, {"time": 1.0, "launch_id": "s" * 32})
    write_signed(run.guard, {**GUARD_STOP, "launch_id": "s" * 32})
    attempt = run.attempt_logs(1)
    attempt.mkdir()
    for name in ("outcome.json", "exit.json"):
        write_signed(attempt / name, json.loads((run.logs / name).read_text()))
    return {name: json.loads((run_dir / name).read_text().splitlines()[-1] if name.endswith(".jsonl")
                             else (run_dir / name).read_text()) for name in SIGNED_FILES}


def test_a_signed_record_is_valid_only_in_the_file_it_was_written_to(workspace, tiny_model):
    """The whole table: every signed evidence file of a run x copied onto every other one (another kind, or the
    same kind of another attempt). A record's signature binds the file it was written for: the copy reads as no
    record there, and the original still reads as its own."""
    from mcp_server.evidence import valid_run
    from mcp_server.runs import Run

    run = Run(ended_run(workspace, tiny_model, "stopped", "stopped"))
    records = signed_records(run.dir)
    assert set(records) == set(SIGNED_FILES)
    read_where_written = [name for name, record in records.items() if not valid_run(run, run.dir / name, record)]
    assert read_where_written == []
    copies = [(src, dst) for src, record in records.items() for dst in SIGNED_FILES
              if dst != src and valid_run(run, run.dir / dst, record)]
    assert copies == [], f"{len(copies)} copies read as recorded where copied, e.g. {copies[:3]}"


def test_a_stop_request_copied_over_stopped_json_never_makes_a_run_stopped(workspace, monkeypatch):
    """A row of the table above through the trainer's own door: the launcher's signed stop-request.json (the same
    launch, a {time, launch_id} record) copied onto stopped.json while the run trained. write_outcome reads
    stopped.json to tell a stop from a success: the copy is no record there, and the run that trained well
    succeeds."""
    from mcp_server.runs import Run
    from mcp_server.training.trainer.progress import write_outcome

    monkeypatch.setenv("LLM_FINETUNING_LAUNCH_ID", "c" * 32)
    run = Run(workspace / "runs" / "copied")
    run.logs.mkdir(parents=True)
    write_signed(run.stop_request, {"time": 1.0, "launch_id": "c" * 32})
    shutil.copy(run.stop_request, run.stopped)
    write_outcome(run.dir, "succeeded", global_step=4)
    assert json.loads(run.outcome.read_text())["state"] == "succeeded"
    write_signed(run.stopped, json.loads(run.stop_request.read_text()))  # the trainer's own stop: it decides
    write_outcome(run.dir, "succeeded", global_step=4)
    assert json.loads(run.outcome.read_text())["state"] == "stopped"


# ---------------------------------------------------------------- where the key may live (issue 48, round 7)
STATE_DIR_FORMS = ("direct", "link", "link-to-link", "relative", "dot-dot")


def state_dir_in(form: str, target: Path, beside: Path, monkeypatch) -> None:
    """LLM_FINETUNING_STATE_DIR naming `target` in `form`, every link and detour outside the workspace (in
    `beside`)."""
    import os

    if form in ("link", "link-to-link"):
        (beside / "link").symlink_to(target, target_is_directory=True)
        named = beside / "link"
        if form == "link-to-link":
            (beside / "link2").symlink_to(named, target_is_directory=True)
            named = beside / "link2"
    elif form == "relative":
        monkeypatch.chdir(beside)
        named = Path(os.path.relpath(target, beside))
    elif form == "dot-dot":
        (beside / "elsewhere").mkdir()
        named = beside / "elsewhere" / ".." / os.path.relpath(target, beside)
    else:
        named = target
    monkeypatch.setenv("LLM_FINETUNING_STATE_DIR", str(named))


@pytest.mark.parametrize("where", ["inside", "workspace-itself", "outside"])
@pytest.mark.parametrize("form", STATE_DIR_FORMS)
def test_the_evidence_key_is_never_kept_inside_the_workspace_however_its_folder_is_named(workspace, tmp_path,
                                                                                        monkeypatch, form, where):
    """The whole table: the state folder named directly, through a link, a link to a link, a relative path or a
    path with .. x a folder inside the workspace, the workspace itself, or outside it. Inside is refused in every
    form, before any key is made there (anything that writes the workspace could read it and sign a run's
    records); outside, the key is made and read."""
    from mcp_server.errors import UserInputError
    from mcp_server.evidence import key, state_dir

    beside = tmp_path / "beside"
    beside.mkdir()
    target = {"inside": workspace / "state", "workspace-itself": workspace, "outside": tmp_path / "keys"}[where]
    target.mkdir(exist_ok=True)
    state_dir_in(form, target, beside, monkeypatch)
    if where == "outside":
        assert len(key(create=True)) == 32 and state_dir().resolve() == target.resolve()
        assert (target / "evidence.key").is_file()
        return
    for call in (lambda: key(create=True), state_dir):
        with pytest.raises(UserInputError) as refused:
            call()
        assert "inside the workspace" in str(refused.value), (form, str(refused.value))
    assert not (target / "evidence.key").exists()


@pytest.mark.parametrize("door", ["training_status", "diagnose_run", "list_runs", "stop_wait"])
def test_progress_lines_edited_or_appended_by_hand_are_never_shown_or_judged(workspace, door):
    """Issue 48, round 9 (F3): the last signed progress line's values changed (its mac no longer matches) and an
    unsigned line appended: training_status showed reward 99 and kl 777, and diagnose_run raised kl_explosion with
    patches. Every reader of a run's own progress log reads the trainer's signed lines alone, and names the rest."""
    from support import healthy_rows

    from mcp_server.diagnosis.diagnose import diagnose_run
    from mcp_server.runs import Run
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import list_runs, training_status
    from mcp_server.training.stopping import step_time

    run_dir = dead_run(workspace, "forged-metrics", "f" * 32)
    run = Run(run_dir)
    rows = [{**r, "step": i + 1, "time": 100.0 + i, "step_time": 1.0} for i, r in enumerate(healthy_rows(12))]
    for row in rows:
        append_signed(run.progress, row)
    lines = run.progress.read_text().splitlines()
    edited = {**json.loads(lines[-1]), "reward": 99.0, "kl": 777.0}  # its mac kept: now wrong
    added = {**{k: v for k, v in edited.items() if k != "mac"}, "step": 13, "entropy": 5.5, "grad_norm": 4242.0,
             "step_time": 9999.0}
    run.progress.write_text("\n".join([*lines[:-1], json.dumps(edited), json.dumps(added)]) + "\n")
    said = "2 progress lines unsigned or altered: not used"
    if door == "training_status":
        status = training_status(StatusRequest(run=str(run_dir)))
        assert status.step == 11 and status.latest["reward"] == rows[10]["reward"], status.latest
        assert said in status.note and not {f.code for f in status.health} & {"kl_explosion", "grad_explosion"}
    elif door == "diagnose_run":
        diagnosis = diagnose_run(str(run_dir))
        assert diagnosis.last_step == 11 and said in diagnosis.summary, diagnosis.summary
        assert not {f.code for f in diagnosis.findings} & {"kl_explosion", "grad_explosion", "entropy_collapse"}
    elif door == "list_runs":
        listed = {Path(r.run_dir).name: r for r in list_runs().runs}["forged-metrics"]
        assert listed.step == 11, listed
    else:
        assert step_time(run) == 1.0  # the stop's wait reads the signed lines' step times, not 9999 s


# ---------------------------------------------------------------- round 12: a run's folders swapped for links
# D1: checkpoints/ moved away and a link to a folder elsewhere put in its place after checkpoint-1: the trainer,
# which checked output_dir only when it started, saved the next checkpoints, the final model and TRL's model card
# (README.md) through it, overwriting files there, and the run read "succeeded". Every point before or at a save x
# every way the save's folder can lead out of the run: refused (exit 3) naming the link, nothing written there, no
# ledger line (what "succeeded" needs).
SAVE_LEADS_OUT = {
    "checkpoints-linked-outside": lambda run, out: (run.checkpoints.rename(run.dir / "checkpoints.real"),
                                                    run.checkpoints.symlink_to(out)),
    "checkpoints-linked-to-another-run": lambda run, out: (
        run.checkpoints.rename(run.dir / "checkpoints.real"),
        (run.dir.parent / "other" / "checkpoints").mkdir(parents=True),
        run.checkpoints.symlink_to(run.dir.parent / "other" / "checkpoints")),
    "next-checkpoint-linked-outside": lambda run, out: (run.checkpoints / "checkpoint-2").symlink_to(out),
}
SAVE_POINTS = ("step-end", "log", "checkpoint-saved", "final-saved")
SAVE_CELLS = [(how, point) for how in SAVE_LEADS_OUT for point in SAVE_POINTS
              if not (how == "next-checkpoint-linked-outside" and point == "final-saved")]  # the final model is not
#                                                                                               in checkpoint-2


def _save_point(run, point: str, step: int):
    """What the trainer does at `point` of step `step`, as the Trainer drives it: the progress callback at the
    step's end and its log (both before the step's save), after a checkpoint's last file (on_save), and the final
    model's record (train_and_save)."""
    import signal
    from types import SimpleNamespace

    from mcp_server.training.trainer.digest import record_save
    from mcp_server.training.trainer.progress import ProgressCallback

    args = SimpleNamespace(output_dir=str(run.checkpoints), device=None)
    state = SimpleNamespace(is_world_process_zero=True, global_step=step, max_steps=4, epoch=0.0)
    control = SimpleNamespace(should_save=True, should_training_stop=False)
    before = signal.getsignal(signal.SIGUSR1)
    try:
        callback = ProgressCallback(run.dir, guard="off")
        if point == "step-end":
            callback.on_step_end(args, state, control)
        elif point == "log":
            callback.on_log(args, state, control, logs={"loss": 0.1})
        elif point == "checkpoint-saved":
            callback.on_save(args, state, control)
        else:
            record_save(run, run.checkpoints, step, final=True)
    finally:
        signal.signal(signal.SIGUSR1, before)


def _saved_files(folder: Path, step: int) -> None:
    """What a save of step `step` left in `folder` (as the Trainer writes a checkpoint, or the final model)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(b"weights %d" % step)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))


@pytest.mark.parametrize("how, point", SAVE_CELLS)
def test_d1_a_save_whose_folder_leads_out_of_the_run_is_refused_at_every_save_point(workspace, tmp_path,
                                                                                     monkeypatch, capsys, how, point):
    from mcp_server.runs import Run
    from mcp_server.training.trainer.digest import read_saves

    run = Run(dead_run(workspace, "d1", "d" * 32))
    monkeypatch.setenv("LLM_FINETUNING_LAUNCH_ID", "d" * 32)
    _saved_files(run.checkpoints / "checkpoint-1", 1)
    _save_point(run, "checkpoint-saved", 1)  # the first save, inside the run: recorded
    assert [s["save"] for s in read_saves(run)] == ["checkpoints/checkpoint-1"]
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "README.md").write_text("someone's own file\n")
    SAVE_LEADS_OUT[how](run, outside)
    if point == "checkpoint-saved":  # the Trainer wrote checkpoint-2 through the link before its record
        _saved_files(run.checkpoints / "checkpoint-2", 2)
    elif point == "final-saved":
        _saved_files(run.checkpoints, 4)
    written = {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()}
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        _save_point(run, point, 2 if point != "final-saved" else 4)
    err = capsys.readouterr().err
    assert refused.value.code == 3 and "refusing to save" in err and "leads outside the run directory" in err, err
    link = run.checkpoints / "checkpoint-2" if how.startswith("next-") else run.checkpoints
    assert f"through the link {link}" in err, err
    assert [s["save"] for s in read_saves(run)] == ["checkpoints/checkpoint-1"]  # no line: never "succeeded"
    assert {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()} == written  # no digest written there


# D2: <run>/cache put in place as a link right after the launch gate: the trainer's train_dataset made its datasets
# cache through it (mkdir, mkdtemp), outside the workspace. Each way cache/ can be a link or no folder x the emitted
# train.py's build_trainer: refused (exit 3) naming cache/, nothing written through it.
CACHE_FORMS = {
    "link-outside": lambda run, out: (run.dir / "cache").symlink_to(out),
    "link-inside-the-run": lambda run, out: ((run.dir / "elsewhere").mkdir(),
                                            (run.dir / "cache").symlink_to(run.dir / "elsewhere")),
    "dangling-link": lambda run, out: (run.dir / "cache").symlink_to(out / "gone"),
    "file": lambda run, out: (run.dir / "cache").write_text("not a folder\n"),
}


@pytest.mark.parametrize("form", sorted(CACHE_FORMS))
def test_d2_a_cache_folder_that_is_a_link_or_no_folder_is_refused_by_the_trainer(workspace, tmp_path, capsys,
                                                                                  form):
    import shutil as _shutil

    from support import emit_run, trainer_or_refusal

    from mcp_server.runs import Run

    run = Run(emit_run("d2"))
    outside = tmp_path / "outside"
    outside.mkdir()
    if (run.dir / "cache").exists():
        _shutil.rmtree(run.dir / "cache")
    CACHE_FORMS[form](run, outside)
    trainer, refusal = trainer_or_refusal(run.dir, capsys)
    assert trainer is None and f"the run's cache folder {run.dir.resolve() / 'cache'} is" in refusal, refusal
    assert not any(outside.rglob("*")) and not any((run.dir / "elsewhere").rglob("*"))


@pytest.mark.slow
def test_d1_checkpoints_swapped_for_a_link_while_a_real_trainer_trains_end_the_run_unsaved(workspace, tmp_path,
                                                                                          capsys):
    """The round's replay on a real tiny training in this process (the emitted train.py's build_trainer and
    train_and_save): checkpoints/ swapped for a link outside once checkpoint-1 is saved. The trainer exits 3 at the
    next step's end naming the link; nothing lands outside (no checkpoint, no model card), no final save, no
    outcome."""
    import contextlib

    from transformers import TrainerCallback

    from mcp_server.runs import Run
    from mcp_server.training.trainer.digest import read_saves
    from mcp_server.training.trainer.script_support import train_and_save
    from support import emit_run, pass_inspection, trainer_or_refusal

    run = Run(emit_run("d1-live", max_steps=3))
    pass_inspection(run.dir)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "README.md").write_text("someone's own file\n")
    (outside / "completions").mkdir()  # as the round had it: TRL's completions/ is made when the trainer is built

    class SwapAfterFirstSave(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if state.global_step == 1:
                run.checkpoints.rename(run.dir / "checkpoints.real")
                run.checkpoints.symlink_to(outside)

    trainer, refusal = trainer_or_refusal(run.dir, capsys)
    assert refusal is None, refusal
    trainer.add_callback(SwapAfterFirstSave())
    with contextlib.chdir(run.dir), pytest.raises(SystemExit) as refused:
        train_and_save(trainer, run.dir)
    err = capsys.readouterr().err
    assert refused.value.code == 3 and f"through the link {run.checkpoints}" in err, err[-2000:]
    assert sorted(p.relative_to(outside).as_posix() for p in outside.rglob("*")) == ["README.md", "completions"]
    assert (outside / "README.md").read_text() == "someone's own file\n"
    assert [s["save"] for s in read_saves(run)] == ["checkpoints/checkpoint-1"] and not run.outcome.exists()

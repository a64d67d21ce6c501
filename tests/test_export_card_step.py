"""Which model of its run an export is (walk 12): checkpoint-3 of a run stopped at step 3 of 8 was exported with a
card that named neither the step nor the stop, and said "Reproduce: `python train/train.py --config
train/config.yaml`", which trains all 8 steps; and export_model's refusal of a stopped run's output_dir said
"give checkpoint ... to judge that checkpoint", promote_checkpoint's words (export does not judge). Constructed
runs with the trainer's own signed records (tests/support.py); nothing trains, no model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import cli_here
from support import append_signed, write_signed

from mcp_server.evaluation.card_step import card_step
from mcp_server.evaluation.export import model_card
from mcp_server.evaluation.provenance import Provenance
from mcp_server.runs import Run
from mcp_server.training.trainer.progress import write_outcome
from mcp_server.workspace import sha256_file


def stopped_run(workspace: Path, schedule: dict, at: int = 3, steps: int = 8, stop: bool = True) -> tuple[Run, Path]:
    """A run of max_steps `steps` stopped by request at step `at` (else ended there), its checkpoint-`at` saved
    (signed save line)."""
    run = Run(workspace / "runs" / "2026-12-07-plural")
    ckpt = run.dir / "checkpoints" / f"checkpoint-{at}"
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text("{}")
    run.logs.mkdir(parents=True)
    run.config.write_text(yaml.safe_dump({"model_name_or_path": "tiny", "output_dir": "checkpoints",
                                          "max_steps": steps, "save_steps": 4, **schedule}))
    saved(run, ckpt, at, final=False)
    if stop:
        write_signed(run.stopped, {"step": at, "by": "request"})
    write_outcome(run.dir, "succeeded", global_step=at)  # the trainer's own door: stopped.json makes it "stopped"
    return run, ckpt


def saved(run: Run, folder: Path, step: int, final: bool) -> None:
    """The trainer's signed save line for `folder` at `step`."""
    files = {"config.json": {"bytes": 2, "sha256": sha256_file(folder / "config.json")}}
    append_signed(run.saves, {"save": folder.relative_to(run.dir).as_posix(), "step": step, "final": final,
                              "files": files})


def card(run: Run, ckpt: Path, given: bool = True) -> str:
    at = card_step(run, yaml.safe_load(run.config.read_text()), ckpt, given)
    return model_card(run, "tiny", Provenance(recorded=False), None, False, "c" * 64, at)


@pytest.mark.parametrize("schedule, reproduce", [
    ({"lr_scheduler_type": "constant_with_warmup", "warmup_steps": 1},
     "Reproduce: set `max_steps: 3` in train/config.yaml"),
    ({"lr_scheduler_type": "linear"},
     "Reproduce: not by one command: lr_scheduler_type linear changes the rate with max_steps"),
    ({"lr_scheduler_type": "constant_with_warmup", "warmup_steps": 0.1},
     "Reproduce: not by one command: warmup_steps 0.1 is a fraction of max_steps"),
])
def test_a_stopped_run_s_checkpoint_card_names_its_step_the_stop_and_how_to_train_it(workspace, schedule, reproduce):
    run, ckpt = stopped_run(workspace, schedule)
    text = card(run, ckpt)
    assert "| Training step | step 3 of 8 (checkpoint-3) |" in text, text
    assert "| Run state at export | stopped at step 3 of 8 |" in text, text
    assert "**This is checkpoint-3 of a run stopped at step 3 of 8 steps" in text, text
    assert reproduce in text, text
    # the whole run's command is never offered as this model's reproduction
    assert "Reproduce: `python train/train.py --config train/config.yaml`" not in text, text


def test_a_succeeded_run_s_final_model_card_keeps_the_one_command(workspace):
    run, _ = stopped_run(workspace, {"lr_scheduler_type": "linear"}, at=8, steps=8, stop=False)
    out = run.dir / "checkpoints"
    (out / "config.json").write_text("{}")
    saved(run, out, 8, final=True)
    write_signed(run.train_begin, {"global_step": 0, "max_steps": 8})  # the trainer's evidence of a success
    append_signed(run.progress, {"step": 8})
    text = card(run, out, given=False)
    assert "| Training step | step 8 of 8 (its output_dir) |" in text, text
    assert "| Run state at export | succeeded: trained 8 of 8 steps |" in text, text
    assert "Reproduce: `python train/train.py --config train/config.yaml` in the run directory (max_steps 8)." in text


def test_export_of_a_stopped_run_s_output_dir_says_what_export_does(workspace):
    """export-model's refusal names export's own act (promote_checkpoint's stays its own)."""
    run, _ = stopped_run(workspace, {"lr_scheduler_type": "linear"})
    exported = cli_here("export-model", str(run.dir))
    assert exported.returncode != 0 and "is stopped, not succeeded" in exported.stderr, exported.stderr
    assert "to judge that checkpoint" not in exported.stderr, exported.stderr
    assert "to export that checkpoint as it is (export_model does not judge it" in exported.stderr, exported.stderr
    promoted = cli_here("promote-checkpoint", str(run.dir), "--goldens", "tiny")
    assert "to judge that checkpoint" in promoted.stderr, promoted.stderr
    assert json.loads(run.stopped.read_text())["step"] == 3

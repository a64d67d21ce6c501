"""Round 20 (b04, b04b; issue 48): a save never writes through a link. Planted while a real tiny trainer trains (a
callback the run executes at checkpoint-1's save, so the plant is in place before the next save, never a sleep
race): the next checkpoint's folder made as a real folder holding links (or a hard link) to files outside the
workspace, or output_dir's README.md (TRL's model card, written at each checkpoint) and config.json as links. The
trainer exits 3 naming the entry; the outside files are untouched and no later save is recorded."""

from __future__ import annotations

import contextlib
import os

import pytest


def _plant(kind: str, run, outside):
    target = outside / "bashrc"
    if kind == "checkpoint file link":
        folder = run.checkpoints / "checkpoint-2"
        folder.mkdir()
        (folder / "trainer_state.json").symlink_to(target)
        return folder / "trainer_state.json"
    if kind == "checkpoint hard link":
        folder = run.checkpoints / "checkpoint-2"
        folder.mkdir()
        os.link(target, folder / "config.json")
        return folder / "config.json"
    if kind == "checkpoint FIFO":
        folder = run.checkpoints / "checkpoint-2"
        folder.mkdir()
        os.mkfifo(folder / "optimizer.pt")
        return folder / "optimizer.pt"
    (run.checkpoints / "README.md").unlink(missing_ok=True)  # TRL's card from checkpoint-1
    (run.checkpoints / "README.md").symlink_to(target)
    return run.checkpoints / "README.md"


@pytest.mark.slow  # a real tiny training
@pytest.mark.parametrize("kind", ["checkpoint file link", "checkpoint hard link", "checkpoint FIFO",
                                  "output_dir card link"])
def test_a_save_never_writes_through_an_entry_planted_while_training(workspace, tmp_path, capsys, kind):
    from transformers import TrainerCallback

    from mcp_server.runs import Run
    from mcp_server.training.trainer.digest import read_saves
    from mcp_server.training.trainer.script_support import train_and_save
    from support import emit_run, pass_inspection, trainer_or_refusal

    run = Run(emit_run("r20-b04", max_steps=3))
    pass_inspection(run.dir)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "bashrc").write_text("someone's own file\n")
    planted = []

    class PlantAfterFirstSave(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if state.global_step == 1:
                planted.append(_plant(kind, run, outside))

    trainer, refusal = trainer_or_refusal(run.dir, capsys)
    assert refusal is None, refusal
    trainer.add_callback(PlantAfterFirstSave())
    with contextlib.chdir(run.dir), pytest.raises(SystemExit) as refused:
        train_and_save(trainer, run.dir)
    err = capsys.readouterr().err
    assert refused.value.code == 3 and "refusing to save" in err and str(planted[0]) in err, err[-2000:]
    assert (outside / "bashrc").read_text() == "someone's own file\n"
    assert [s["save"] for s in read_saves(run)] == ["checkpoints/checkpoint-1"] and not run.outcome.exists()

"""Round 20 (issue 48): what a resumed trainer loads by path after confirm_resume_checkpoint hashed the checkpoint
besides the weights, optimizer and scheduler: trainer_state.json (b03: a state with global_step max_steps - 1
renamed in for transformers' reads and put back after trained one step and read "succeeded") and rng_state.pth.
Each row runs transformers' own load with the file renamed over at that exact point (a wrapper around the load,
never a sleep race) and put back after: ResumedWeights refuses (exit 3) naming the file, before a step trains.
Constructed with the tiny model, no training."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from mcp_server.inspection import trained
from mcp_server.inspection.trained import InputsChanged
from test_loaded_is_what_was_checked import _rename_over, _saved_with_state, _stepped_trainer, _swapped_during


def _saved_with_trainer_state(workspace: Path, tiny_model: Path):
    """checkpoint-1 with the weights, optimizer, scheduler, a trainer_state.json and an rng_state.pth as
    transformers writes them, in the ledger."""
    from transformers import TrainerState

    from mcp_server.training.trainer.digest import record_save

    run, folder = _saved_with_state(workspace, tiny_model)
    state = TrainerState(global_step=1, max_steps=4, epoch=0.25, train_batch_size=8,
                         log_history=[{"loss": 0.5, "step": 1}])
    state.save_to_json(str(folder / "trainer_state.json"))
    trainer = _stepped_trainer(run, tiny_model)
    trainer._save_rng_state(str(folder))
    record_save(run, folder, 1)
    return run, folder


def _forged_state(path: Path) -> bytes:
    state = json.loads(path.read_text())
    state["global_step"] = 3  # max_steps - 1: one step left to train
    return json.dumps(state).encode()


def _forged_rng(path: Path) -> bytes:
    import torch
    from transformers.trainer_pt_utils import safe_globals

    with safe_globals():
        state = torch.load(path, weights_only=True)
    state["cpu"] = torch.random.manual_seed(1234).get_state()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def _resumed(run, folder, tiny_model):
    from mcp_server.training.trainer import script_support

    trainer = _stepped_trainer(run, tiny_model)
    assert script_support.confirm_resume_checkpoint(run.dir, trainer.args) == folder
    return trainer


def _load_state(trainer, folder):
    """What Trainer.train(resume_from_checkpoint=...) runs before on_train_begin."""
    trainer._load_from_checkpoint(str(folder))
    trainer._init_training_state(4, 4, 1, str(folder), None)
    trainer._load_optimizer_and_scheduler(str(folder))


@pytest.mark.parametrize("swapped", ["no", "during the load", "after the check, kept"])
def test_a_resume_starts_only_from_the_trainer_state_the_run_saved(workspace, tiny_model, monkeypatch, capsys,
                                                                   swapped):
    from transformers import Trainer

    from mcp_server.training.trainer import script_support

    run, folder = _saved_with_trainer_state(workspace, tiny_model)
    monkeypatch.setattr(trained, "VERIFIED", {"run": str(run.dir), "model": {}})
    trainer = _resumed(run, folder, tiny_model)
    evil = _forged_state(folder / "trainer_state.json")
    if swapped == "during the load":
        _swapped_during(folder / "trainer_state.json", evil, Trainer, "_init_training_state", monkeypatch)
    elif swapped == "after the check, kept":
        _rename_over(folder / "trainer_state.json", evil)
    _load_state(trainer, folder)
    trainer.add_callback(script_support.ResumedWeights(run.dir, folder, trainer))
    if swapped == "no":
        trainer.callback_handler.on_train_begin(trainer.args, trainer.state, trainer.control)
        assert trainer.state.global_step == 1
        return
    with pytest.raises(InputsChanged) as refused:
        trainer.callback_handler.on_train_begin(trainer.args, trainer.state, trainer.control)
    err = capsys.readouterr().err
    named = ("trainer_state.json: the state loaded is not the state saved (global_step" if swapped ==
             "during the load" else "trainer_state.json is not the file saved")
    assert refused.value.code == 3 and "not the checkpoint this run saved" in err and named in err, err


@pytest.mark.parametrize("swapped", ["no", "during the load", "after the check, kept"])
def test_a_resume_restores_only_the_rng_state_the_run_saved(workspace, tiny_model, monkeypatch, capsys, swapped):
    """rng_state.pth is read by transformers in the first epoch, after on_train_begin: a file renamed over for
    that read is refused right after it, naming the file; one replaced and kept is refused at on_train_begin."""
    from transformers import Trainer

    from mcp_server.training.trainer import script_support

    run, folder = _saved_with_trainer_state(workspace, tiny_model)
    monkeypatch.setattr(trained, "VERIFIED", {"run": str(run.dir), "model": {}})
    trainer = _resumed(run, folder, tiny_model)
    evil = _forged_rng(folder / "rng_state.pth")
    if swapped == "during the load":
        _swapped_during(folder / "rng_state.pth", evil, Trainer, "_load_rng_state", monkeypatch)
    elif swapped == "after the check, kept":
        _rename_over(folder / "rng_state.pth", evil)
    _load_state(trainer, folder)
    trainer.add_callback(script_support.ResumedWeights(run.dir, folder, trainer))
    with pytest.raises(InputsChanged) if swapped != "no" else _nothing() as refused:
        trainer.callback_handler.on_train_begin(trainer.args, trainer.state, trainer.control)
        trainer._load_rng_state(str(folder))  # what _run_epoch runs in the resumed epoch
    if swapped == "no":
        return
    err = capsys.readouterr().err
    named = ("rng_state.pth: the RNG state loaded is not the state saved" if swapped == "during the load"
             else "rng_state.pth is not the file saved")
    assert refused.value.code == 3 and named in err, err


def _nothing():
    import contextlib

    return contextlib.nullcontext()

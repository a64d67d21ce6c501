"""What the run's signed saves ledger vouches for is what the trainer held in memory when it saved (round 18, b09/b10).

The round's racer replaced checkpoint-N/model.safetensors as the Trainer wrote it: the save record hashed the file
from disk and signed the foreign weights, promote_checkpoint judged them and a resume trained on from them. Here the
racer runs at its exact point, deterministically: a hook on the Trainer's own next save step
(_save_optimizer_and_scheduler, right after the weights; _save_rng_state, right after optimizer.pt and
scheduler.pt; the progress callback's on_save for trainer_state.json) renames another file over the one just
written, and the Trainer's callback handler then runs the real progress callback's on_save (digest.record_save).
The model's config files and the tokenizer's (round 18's next step: hashed from disk until then) are swapped at the
same point, and a chat template and a special tokens map are planted there. The save must be refused (exit 3,
naming the file) with no ledger line; unswapped, the line's sha256 are the files'
and it names them as checked against memory. The promotion door: a weight file renamed over a recorded checkpoint
after promote_checkpoint's ledger check (checkpoint_refusal) is refused, naming it, not judged.
Constructed with the tiny model, no training."""

from __future__ import annotations

import hashlib
import json

import pytest

from mcp_server.runs import Run

from test_loaded_is_what_was_checked import MARKED, _evil_state, _evil_weights, _rename_over

HOOKS = {"model.safetensors": "_save_optimizer_and_scheduler", "optimizer.pt": "_save_rng_state",
         "scheduler.pt": "_save_rng_state", "trainer_state.json": None,
         # the model's config and the tokenizer's files, written with the weights (round 18, still hashed from disk)
         "config.json": "_save_optimizer_and_scheduler", "generation_config.json": "_save_optimizer_and_scheduler",
         "tokenizer_config.json": "_save_optimizer_and_scheduler", "tokenizer.json": "_save_optimizer_and_scheduler",
         "chat_template.jinja": "_save_optimizer_and_scheduler"}
PLANTED = {"additional_chat_templates/default.jinja": "_save_optimizer_and_scheduler",
           "special_tokens_map.json": "_save_optimizer_and_scheduler"}  # files the save never wrote, planted


def _trainer(run: Run, tiny_model):
    """A Trainer on the tiny model, one optimizer step and one schedule step taken, with the run's real progress
    callback."""
    import torch
    from transformers import AutoModelForCausalLM, AutoProcessor, Trainer, TrainingArguments

    from mcp_server.training.trainer.progress import ProgressCallback

    args = TrainingArguments(output_dir=str(run.dir / "checkpoints"), use_cpu=True, report_to="none", max_steps=4)
    tokenizer = AutoProcessor.from_pretrained(tiny_model, truncation_side="left", padding_side="left")  # as trained
    trainer = Trainer(model=AutoModelForCausalLM.from_pretrained(tiny_model), args=args, processing_class=tokenizer)
    trainer.create_optimizer_and_scheduler(num_training_steps=4)
    for param in trainer.model.parameters():
        param.grad = torch.full_like(param, 0.01)
    trainer.optimizer.step()
    trainer.lr_scheduler.step()
    trainer.state.global_step = 1
    callback = ProgressCallback(run.dir, guard="off")
    callback.trainer = trainer  # as train_and_save gives it: transformers' on_save omits an optimizer it built
    trainer.add_callback(callback)
    return trainer


def _evil(path) -> bytes:
    if path.name == "model.safetensors":
        return _evil_weights(path)
    if path.name in ("config.json", "generation_config.json", "tokenizer_config.json"):  # one field more or other
        value = json.loads(path.read_text())
        value.update({"config.json": {"rope_theta": 1.0}, "generation_config.json": {"temperature": 9.0},
                      "tokenizer_config.json": {"padding_side": "right"}}[path.name])
        return json.dumps(value, indent=2).encode()
    if path.name == "tokenizer.json":
        value = json.loads(path.read_text())
        value["added_tokens"][0]["content"] = "<|evil|>"
        return json.dumps(value).encode()
    if path.name == "default.jinja" or path.name == "chat_template.jinja":
        return b"{% for m in messages %}EVIL {{ m['content'] }}{% endfor %}"
    if path.name == "special_tokens_map.json":
        return json.dumps({"eos_token": "<|evil|>"}).encode()
    if path.name == "trainer_state.json":
        state = json.loads(path.read_text())
        state["global_step"] = 3
        return (json.dumps(state, indent=2, sort_keys=True) + "\n").encode()
    return _evil_state(path)


@pytest.mark.parametrize("swapped", ["none", *HOOKS, *PLANTED])
def test_a_save_is_recorded_only_as_the_trainer_held_it_in_memory(workspace, tiny_model, monkeypatch, capsys,
                                                                  swapped):
    from transformers import Trainer

    from mcp_server.training.trainer.digest import read_saves
    from mcp_server.training.trainer.progress import ProgressCallback

    run = Run(workspace / "runs" / "saved")
    (run.dir / "train").mkdir(parents=True)
    trainer = _trainer(run, tiny_model)
    folder = run.dir / "checkpoints" / "checkpoint-1"
    if swapped != "none":  # the racer, at the save step right after the file was written
        hook = HOOKS.get(swapped) or PLANTED.get(swapped)
        owner, name = (Trainer, hook) if hook else (ProgressCallback, "on_save")
        real = getattr(owner, name)

        def then_swap(self, *args, **kwargs):
            if (folder / swapped).is_file() or (swapped in PLANTED and folder.is_dir()):
                if swapped in PLANTED:
                    (folder / swapped).parent.mkdir(exist_ok=True)
                    (folder / swapped).write_bytes(_evil(folder / swapped))
                else:
                    _rename_over(folder / swapped, _evil(folder / swapped))
            return real(self, *args, **kwargs)
        monkeypatch.setattr(owner, name, then_swap)
    trainer._save_checkpoint(trainer.model, None)  # what the Trainer's loop runs at a save, then on_save
    if swapped == "none":
        trainer.callback_handler.on_save(trainer.args, trainer.state, trainer.control)
        (line,) = read_saves(run)
        for name in HOOKS:
            assert line["files"][name]["sha256"] == hashlib.sha256((folder / name).read_bytes()).hexdigest()
        assert set(HOOKS) <= set(line["from_memory"]), line
        return
    with pytest.raises(SystemExit) as refused:
        trainer.callback_handler.on_save(trainer.args, trainer.state, trainer.control)
    err = capsys.readouterr().err
    assert refused.value.code == 3 and f"refusing to record the save {folder}" in err, err
    assert swapped in err or (swapped in PLANTED and "tokenizer files" in err), err
    if swapped == "model.safetensors":
        assert MARKED in err, err
    assert read_saves(run) == [], "the ledger vouches for a file the trainer did not hold"


def test_a_promotion_judges_only_the_weights_the_ledger_recorded(workspace, tiny_model, monkeypatch):
    """A weight file renamed over a recorded checkpoint right after promote_checkpoint checked it against the ledger
    (checkpoint_refusal) and kept there: what it hashes and loads next is not the ledger's file, refused, naming it,
    before anything is judged or written."""
    from mcp_server.errors import UserInputError
    from mcp_server.evaluation import promote
    from mcp_server.evaluation.evaluate import evaluate_model
    from mcp_server.evaluation.models import EvaluateRequest, PromoteRequest
    from mcp_server.tiny import make_task, write_jsonl

    from test_run_forgery import ended_run

    goldens = workspace / "goldens.jsonl"
    write_jsonl([{k: r[k] for k in ("prompt", "question", "answer")} for r in make_task(n=4, max_operand=3)], goldens)
    evaluate_model(EvaluateRequest(model="tiny", goldens=str(goldens), max_new_tokens=4))  # the baseline
    run = ended_run(workspace, tiny_model, "stopped", "stopped")
    target = run / "checkpoints" / "checkpoint-2" / "model.safetensors"
    real = promote.checkpoint_refusal

    def checked_then_swapped(*args, **kwargs):
        refusal = real(*args, **kwargs)
        _rename_over(target, _evil_weights(target))
        return refusal
    monkeypatch.setattr(promote, "checkpoint_refusal", checked_then_swapped)
    with pytest.raises(UserInputError, match="model.safetensors is not the file saved"):
        promote.promote_checkpoint(PromoteRequest(run=str(run), checkpoint=str(target.parent)))
    assert not (run / "promotion.json").exists()


STAGED = {"none": None, "model.safetensors": "swapped", "chat_template.jinja": "swapped",
          "config.json": "swapped", "additional_chat_templates/default.jinja": "planted"}


@pytest.mark.parametrize("staged", list(STAGED))
def test_an_export_writes_only_what_was_promoted_from_its_staging_folder(workspace, tiny_model, monkeypatch,
                                                                         staged):
    """export_model's own staging folder (save_pretrained's, then swapped in as export/): a file renamed over, or
    planted, right after the save wrote it (the hook: export's next step, modes_as_umask) is refused naming it,
    nothing exported; untouched, every staged file is what export wrote from the checked checkpoint's memory."""
    from mcp_server.errors import UserInputError
    from mcp_server.evaluation import export
    from mcp_server.evaluation.models import ExportRequest

    from test_run_forgery import ended_run

    run = ended_run(workspace, tiny_model, "stopped", "stopped")
    real = export.modes_as_umask

    def saved_then_swapped(folder):
        path = folder / staged
        if STAGED[staged] == "planted":
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(_evil(path))
        elif STAGED[staged]:
            _rename_over(path, _evil(path))
        return real(folder)
    monkeypatch.setattr(export, "modes_as_umask", saved_then_swapped)
    request = ExportRequest(run=str(run), checkpoint="checkpoints/checkpoint-2", allow_unpromoted=True,
                            smoke_items=1)
    if staged == "none":
        assert export.export_model(request).smoke_identical
        return
    with pytest.raises(UserInputError, match="staging folder .* changed as it was written") as refused:
        export.export_model(request)
    assert staged in str(refused.value) or "tokenizer files" in str(refused.value), refused.value
    assert not (run / "export").exists() and not list(run.glob(".export-*"))

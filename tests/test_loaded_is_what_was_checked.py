"""What loaded is what was checked, for the files round 10 swapped between a check and the load that followed it
(issue 48): G1 the trainer's tokenizer and chat template, F2 the checkpoint a resume loads, F4 the checkpoint an
export loads. Each row runs the door's own load with a file renamed over the checked one at a deterministic point
(a hook around the load, never a sleep race) and put back after it: the check passed, the load read the swapped
file, the file is the checked one again. The door must refuse (naming the file) or have loaded the checked bytes.
Constructed with the tiny model, no training."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from mcp_server.inspection import trained
from mcp_server.inspection.trained import InputsChanged
from mcp_server.inspection.training_inputs import trained_model
from mcp_server.runs import Run

EVIL_TEMPLATE = "{% for m in messages %}EVIL {{ m['content'] }}{% endfor %}"
MARKED = "model.layers.0.input_layernorm.weight"


def _rename_over(path: Path, data: bytes) -> None:
    staged = path.with_name(".staged")
    staged.write_bytes(data)
    os.replace(staged, path)


def _evil_weights(path: Path) -> bytes:
    """The same safetensors file with MARKED set to 7.0: same names, shapes and size."""
    import torch
    from safetensors.torch import load_file, save

    tensors = load_file(str(path))
    tensors[MARKED] = torch.full_like(tensors[MARKED], 7.0)
    return save(tensors, metadata={"format": "pt"})


def _swapped_during(target: Path, evil: bytes, owner, name: str, monkeypatch) -> list:
    """Wrap `owner.name` (a load): the first call runs with `evil` renamed over `target`, which is put back after
    it (the round's racer at its exact point). Returns the log of swaps."""
    real, log = getattr(owner, name), []

    def swapped(*args, **kwargs):
        if log:
            return real(*args, **kwargs)
        good = target.read_bytes()
        _rename_over(target, evil)
        log.append(str(target))
        try:
            return real(*args, **kwargs)
        finally:
            _rename_over(target, good)
    monkeypatch.setattr(owner, name, swapped)
    return log


# ---------------------------------------------------------------- G1: the trainer's tokenizer and chat template
def _verified(tmp_path: Path, tiny_model: Path, monkeypatch) -> Path:
    folder = shutil.copytree(tiny_model, tmp_path / "model")
    pin = trained_model(str(folder), None, Run(tmp_path))  # what the point-of-use check hashed (VERIFIED)
    monkeypatch.setattr(trained, "VERIFIED", {"run": str(tmp_path), "model": pin, "loads": str(folder),
                                              "name": str(folder), "revision": None})
    return folder


def _grpo_trainer(tmp_path: Path, folder: Path):
    """GRPOTrainer built as train/train.py builds it (script_support.trainer_kwargs): no step trained."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer, ModelConfig

    from mcp_server.training.trainer.script_support import trainer_kwargs

    args = GRPOConfig(output_dir=str(tmp_path / "checkpoints"), use_cpu=True, report_to="none",
                      per_device_train_batch_size=2, num_generations=2, max_completion_length=4)
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": "hi"}]}] * 2)
    kwargs = trainer_kwargs(tmp_path, args, ModelConfig(model_name_or_path=str(folder)), data)
    return GRPOTrainer(reward_funcs=[lambda completions, **_: [0.0] * len(completions)], **kwargs)


def test_a_chat_template_swapped_while_the_trainer_loads_it_is_not_the_one_that_trains(tmp_path, tiny_model,
                                                                                      monkeypatch):
    """The racer renamed an unreviewed chat_template.jinja in after the weights loaded and put the reviewed one
    back after the tokenizer read it: the tokenizer that trains is loaded from the verified bytes instead."""
    from transformers import AutoProcessor

    folder = _verified(tmp_path, tiny_model, monkeypatch)
    reviewed = (folder / "chat_template.jinja").read_text()
    log = _swapped_during(folder / "chat_template.jinja", EVIL_TEMPLATE.encode(), AutoProcessor, "from_pretrained",
                          monkeypatch)
    trainer = _grpo_trainer(tmp_path, folder)
    assert log and (folder / "chat_template.jinja").read_text() == reviewed  # swapped during the load, put back
    assert trainer.processing_class.chat_template == reviewed
    assert "EVIL" not in trainer.processing_class.apply_chat_template([{"role": "user", "content": "x"}],
                                                                      tokenize=False)


@pytest.mark.parametrize("name", ["chat_template.jinja", "tokenizer_config.json", "config.json"])
def test_a_tokenizer_file_changed_after_the_check_is_refused(tmp_path, tiny_model, monkeypatch, capsys, name):
    from mcp_server.training.trainer.script_support import verified_processing_class

    folder = _verified(tmp_path, tiny_model, monkeypatch)
    _rename_over(folder / name, (folder / name).read_bytes() + b"\n")
    with pytest.raises(InputsChanged) as refused:
        verified_processing_class(SimpleNamespace(trust_remote_code=False))
    assert refused.value.code == 3 and "changed since the check" in capsys.readouterr().err


@pytest.mark.parametrize("name,field,value", [("config.json", "rms_norm_eps", 0.5),
                                               ("config.json", "architectures", ["LlamaForCausalLM"]),
                                               ("generation_config.json", "eos_token_id", 7)])
def test_a_config_swapped_while_the_model_loads_is_refused(tmp_path, tiny_model, monkeypatch, capsys, name, field,
                                                           value):
    """The same tensors under another config (an epsilon, another architecture class) or generation config (the
    token that ends a completion): the weights compare equal, the config as loaded must be the verified file's."""
    from transformers import AutoModelForCausalLM

    from mcp_server.inspection.trained import confirm_loaded_model

    folder = _verified(tmp_path, tiny_model, monkeypatch)
    good = (folder / name).read_bytes()
    _rename_over(folder / name, json.dumps({**json.loads(good), field: value}).encode())
    model = AutoModelForCausalLM.from_pretrained(folder)
    _rename_over(folder / name, good)
    with pytest.raises(InputsChanged) as refused:
        confirm_loaded_model(SimpleNamespace(model=model, ref_model=None))
    err = capsys.readouterr().err
    assert refused.value.code == 3 and f"{name}: " in err and "verified" in err, err


# ---------------------------------------------------------------- the config as loaded, from each place a model loads
# Where the model's files sit in the verified folder (model_init_kwargs' subfolder, training_inputs.WEIGHT_KWARGS):
# at the top, at the top with another model's checkpoint in a subfolder, in a subfolder under another model (a
# repo's base model at its top, the trained checkpoint inside; a folder with no config.json at its top is no model
# to resolve_model, nor a cached snapshot to pins.hub_snapshot, so never reaches this check) x each file
# loaded_config compares with what loaded, swapped while the model loads and put back, field by field: every field
# of the verified file that chooses no tensor's shape (generated from the file: its floats, flags, strings, nested
# mappings and token ids; IGNORED left out), or the other folder's copy of the file swapped instead (not what
# loaded: no refusal), or nothing. Refused, naming the file, exactly when what loaded is not the verified file
# (m10: from a subfolder, the check read the top's file or none).
LAYOUTS = {"at the top": "", "at the top, a checkpoint beside": "", "in a subfolder under another model": "ckpt"}
OTHER = {"at the top, a checkpoint beside": "ckpt", "in a subfolder under another model": ""}


def _changed_value(key: str, value):
    """Another value for `key` that loads the same tensors; None where none is known (a shape, the model type)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, float):
        return value * 2 + 0.25
    if key.endswith("_token_id") and (value is None or isinstance(value, int)):
        return 1 if value in (None, 0) else value + 1
    if key == "hidden_act":
        return "gelu"
    if isinstance(value, dict) and any(isinstance(v, float) for v in value.values()):
        return {k: v * 2 if isinstance(v, float) else v for k, v in value.items()}
    return None


def _swaps() -> list[tuple[str, str, str | None]]:
    """(whose file: the folder's the model loads from, or the other's; which file; which field), generated from the
    tiny model's files; ("nothing", "", None) first."""
    from mcp_server.inspection.loaded_config import IGNORED
    from mcp_server.tiny import ensure_tiny_model

    rows = [("nothing", "", None)]
    for name in ("config.json", "generation_config.json"):
        verified = json.loads((ensure_tiny_model() / name).read_text())
        rows += [("its own", name, key) for key, value in verified.items()
                 if key not in IGNORED and _changed_value(key, value) is not None]
    return rows + [("the other folder's", "config.json", "rms_norm_eps"),
                   ("the other folder's", "generation_config.json", "eos_token_id")]


def _laid_out(tmp_path: Path, tiny_model: Path, layout: str) -> Path:
    """The verified folder: the tiny model where `layout` puts it, and (two layouts) another model in the other
    place (the same tensors, a different config)."""
    folder = tmp_path / "model"
    shutil.copytree(tiny_model, folder / LAYOUTS[layout])
    if layout in OTHER:
        other = folder / OTHER[layout]
        for name in os.listdir(tiny_model):
            if not (other / name).exists():
                other.mkdir(parents=True, exist_ok=True)
                shutil.copy2(tiny_model / name, other / name)
        config = json.loads((tiny_model / "config.json").read_text())
        (other / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 1e-5, "hidden_act": "gelu"}))
        generation = json.loads((tiny_model / "generation_config.json").read_text())
        (other / "generation_config.json").write_text(json.dumps({**generation, "eos_token_id": 3}))
    return folder


@pytest.mark.parametrize("swap", _swaps(), ids=lambda s: " ".join(str(p) for p in s if p))
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_config_as_loaded_is_the_verified_file_wherever_the_model_loads_from(tmp_path, tiny_model, monkeypatch,
                                                                                  capsys, layout, swap):
    """Refused exactly when a field of what loaded is no verified file's: the config is the folder's it loads from;
    the generation config that folder's or the top's (transformers 5 reads the top's generation_config.json when
    there is one: GenerationConfig.from_pretrained joins the subfolder before an absolute path), so a subfolder
    under another model whose generation config differs trains (it was refused as 'swapped while it loaded') and a
    swap reaches the model where transformers reads it."""
    from transformers import AutoModelForCausalLM

    from mcp_server.inspection.trained import confirm_loaded_model

    whose, name, key = swap
    folder = _laid_out(tmp_path, tiny_model, layout)
    sub = LAYOUTS[layout]
    loads = {"subfolder": sub} if sub else {}
    pin = trained_model(str(folder), None, Run(tmp_path), loads or None)
    assert pin.get("loads", {}) == loads, pin
    monkeypatch.setattr(trained, "VERIFIED", {"run": str(tmp_path), "model": pin, "loads": str(folder),
                                              "name": str(folder), "revision": None})
    target = folder / (sub if whose == "its own" else OTHER.get(layout, "ckpt")) / name
    original = target.read_bytes() if target.is_file() else None
    if key is not None:
        good = json.loads(original) if original else json.loads((tiny_model / name).read_text())
        target.parent.mkdir(exist_ok=True)
        _rename_over(target, json.dumps({**good, key: _changed_value(key, good[key])}).encode())
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, **loads)
    finally:
        if key is not None:
            _rename_over(target, original) if original is not None else target.unlink()
    if key is None:
        reached = False
    else:
        loaded = (model.config if name == "config.json" else model.generation_config).to_dict()
        read = [folder / sub] + ([folder] if sub and name == "generation_config.json" else [])
        verified = [json.loads((place / name).read_text()).get(key) for place in read]
        reached = json.dumps(loaded.get(key), sort_keys=True) not in [json.dumps(v, sort_keys=True) for v in verified]
        assert reached or whose != "its own" or name != "config.json", (layout, swap)  # a row that tests nothing
    if not reached:
        confirm_loaded_model(SimpleNamespace(model=model, ref_model=None))  # what loaded is the verified files
        return
    with pytest.raises(InputsChanged) as refused:
        confirm_loaded_model(SimpleNamespace(model=model, ref_model=None))
    err = capsys.readouterr().err
    assert refused.value.code == 3 and f"{name}: " in err and "verified" in err, (layout, swap, err)

# ---------------------------------------------------------------- F2: the checkpoint a resume loads
def _saved_run(workspace: Path, tiny_model: Path, kind: str) -> tuple[Run, Path, str]:
    """A run whose trainer saved checkpoint-1 (its signed ledger line) of the tiny model (full) or of a LoRA adapter
    on it; returns the run, the checkpoint and its weight file."""
    import torch
    from transformers import AutoModelForCausalLM

    from mcp_server.training.trainer.digest import record_save

    run = Run(workspace / "runs" / "resumed")
    (run.dir / "train").mkdir(parents=True)
    folder = run.dir / "checkpoints" / "checkpoint-1"
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    if kind == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.fill_(0.5)
    model.save_pretrained(folder)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 1}))
    record_save(run, folder, 1)
    return run, folder, "adapter_model.safetensors" if kind == "lora" else "model.safetensors"


def _evil_adapter(path: Path) -> bytes:
    from safetensors.torch import load_file, save

    tensors = {k: (v + 1 if "lora_B" in k else v) for k, v in load_file(str(path)).items()}
    return save(tensors, metadata={"format": "pt"})


@pytest.mark.parametrize("kind", ["full", "lora"])
@pytest.mark.parametrize("swapped", ["no", "during the load", "after the check, kept"])
def test_a_resume_trains_only_from_the_checkpoint_the_run_saved(workspace, tiny_model, monkeypatch, capsys, kind,
                                                                swapped):
    """confirm_resume_checkpoint hashes the checkpoint, then transformers' Trainer loads it (_load_from_checkpoint,
    before on_train_begin): a weight file renamed over it between the two and put back is refused before the first
    step, naming the file."""
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    from mcp_server.training.trainer import script_support

    run, folder, weights = _saved_run(workspace, tiny_model, kind)
    monkeypatch.setattr(trained, "VERIFIED", {"run": str(run.dir), "model": {}})
    args = TrainingArguments(output_dir=str(run.dir / "checkpoints"), use_cpu=True, report_to="none",
                             resume_from_checkpoint="checkpoints/checkpoint-1")
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    if kind == "lora":
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, folder, is_trainable=True)
        with __import__("torch").no_grad():
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.zero_()  # the load must put the checkpoint's values back
    trainer = Trainer(model=model, args=args)
    resumed = script_support.confirm_resume_checkpoint(run.dir, args)  # the ledger check, right before the load
    assert resumed == folder
    evil = (_evil_adapter if kind == "lora" else _evil_weights)(folder / weights)
    if swapped == "during the load":
        _swapped_during(folder / weights, evil, Trainer, "_load_from_checkpoint", monkeypatch)
    elif swapped == "after the check, kept":  # what loaded is the file there now: its hash is not the ledger's
        _rename_over(folder / weights, evil)
    trainer._load_from_checkpoint(str(folder))  # what Trainer.train(resume_from_checkpoint=...) runs
    check = script_support.ResumedWeights(run.dir, folder)
    if swapped == "no":
        check.on_train_begin(args, None, None, model=trainer.model)
        return
    with pytest.raises(InputsChanged) as refused:
        check.on_train_begin(args, None, None, model=trainer.model)
    err = capsys.readouterr().err
    named = f"{weights}: " if swapped == "during the load" else f"{weights} is not the file saved"
    assert refused.value.code == 3 and "not the checkpoint this run saved" in err and named in err, err


def _stepped_trainer(run: Run, tiny_model: Path):
    """A Trainer on the tiny model with its optimizer and schedule built from the arguments, resuming from the
    run's checkpoint-1."""
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    args = TrainingArguments(output_dir=str(run.dir / "checkpoints"), use_cpu=True, report_to="none",
                             resume_from_checkpoint="checkpoints/checkpoint-1", max_steps=4)
    trainer = Trainer(model=AutoModelForCausalLM.from_pretrained(tiny_model), args=args)
    trainer.create_optimizer_and_scheduler(num_training_steps=4)
    return trainer


def _saved_with_state(workspace: Path, tiny_model: Path) -> tuple[Run, Path]:
    """checkpoint-1 holding the weights, optimizer.pt (moments after one step) and scheduler.pt, in the ledger."""
    import torch

    from mcp_server.training.trainer.digest import record_save

    run, folder, _ = _saved_run(workspace, tiny_model, "full")
    trainer = _stepped_trainer(run, tiny_model)
    for param in trainer.model.parameters():
        param.grad = torch.full_like(param, 0.01)
    trainer.optimizer.step()
    trainer.lr_scheduler.step()
    torch.save(trainer.optimizer.state_dict(), folder / "optimizer.pt")
    torch.save(trainer.lr_scheduler.state_dict(), folder / "scheduler.pt")
    record_save(run, folder, 1)
    return run, folder


def _evil_state(path: Path) -> bytes:
    """The same state file with every moment (or the schedule's step) moved: what a resume must not train from."""
    import io

    import torch

    state = torch.load(path, weights_only=True)
    if "state" in state:
        for moments in state["state"].values():
            moments["exp_avg"] = moments["exp_avg"] + 1.0
    else:
        state["last_epoch"] += 2
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt"])
@pytest.mark.parametrize("swapped", ["no", "during the load", "after the check, kept"])
def test_a_resume_restores_only_the_optimizer_and_schedule_the_run_saved(workspace, tiny_model, monkeypatch, capsys,
                                                                         name, swapped):
    """Like the weights (above): optimizer.pt or scheduler.pt renamed over between confirm_resume_checkpoint and
    the Trainer's _load_optimizer_and_scheduler, put back after, is refused before the first step, naming it."""
    from transformers import Trainer

    from mcp_server.training.trainer import script_support

    run, folder = _saved_with_state(workspace, tiny_model)
    monkeypatch.setattr(trained, "VERIFIED", {"run": str(run.dir), "model": {}})
    trainer = _stepped_trainer(run, tiny_model)
    assert script_support.confirm_resume_checkpoint(run.dir, trainer.args) == folder
    evil = _evil_state(folder / name)
    if swapped == "during the load":
        _swapped_during(folder / name, evil, Trainer, "_load_optimizer_and_scheduler", monkeypatch)
    elif swapped == "after the check, kept":
        _rename_over(folder / name, evil)
    trainer._load_from_checkpoint(str(folder))
    trainer._load_optimizer_and_scheduler(str(folder))  # what _inner_training_loop runs before on_train_begin
    trainer.state = type(trainer.state).load_from_json(str(folder / "trainer_state.json"))  # and its state
    # as train_and_save adds it and the Trainer calls it: transformers passes optimizer=None for one it built
    trainer.add_callback(script_support.ResumedWeights(run.dir, folder, trainer))
    if swapped == "no":
        trainer.callback_handler.on_train_begin(trainer.args, trainer.state, trainer.control)
        return
    with pytest.raises(InputsChanged) as refused:
        trainer.callback_handler.on_train_begin(trainer.args, trainer.state, trainer.control)
    err = capsys.readouterr().err
    named = f"{name}: the state loaded" if swapped == "during the load" else f"{name} is not the file saved"
    assert refused.value.code == 3 and "not the checkpoint this run saved" in err and named in err, err


# ---------------------------------------------------------------- F4: the checkpoint an export (or a promotion) loads
def _placed_run(workspace: Path, tiny_model: Path, base: str | None = None) -> Path:
    """A run never launched with the tiny model placed as its output (exported unpromoted, judged as placed)."""
    import yaml

    run = workspace / "runs" / "2026-01-01-exported"
    (run / "train").mkdir(parents=True)
    shutil.copytree(tiny_model, run / "checkpoints")
    config = {"model_name_or_path": base or str(tiny_model), "output_dir": "checkpoints",
              "max_completion_length": 4}
    (run / "train" / "config.yaml").write_text(yaml.safe_dump(config))
    (run / "train" / "rewards.json").write_text(json.dumps([{"name": "correctness_reward", "params": {},
                                                             "weight": 1.0}]))
    return run


@pytest.mark.parametrize("name", ["model.safetensors", "chat_template.jinja"])
def test_an_export_holds_the_checkpoint_its_card_names(workspace, tiny_model, monkeypatch, name):
    """A checkpoint file renamed over after export_model hashed it (the hash the card names) and put back after the
    load: a weight file is refused, naming it, with nothing written; a tokenizer file does not reach the export."""
    from mcp_server.errors import UserInputError
    from mcp_server.evaluation import export
    from mcp_server.evaluation.models import ExportRequest

    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = _placed_run(workspace, tiny_model)
    target = run / "checkpoints" / name
    weights = name == "model.safetensors"
    evil = _evil_weights(target) if weights else EVIL_TEMPLATE.encode()
    log = _swapped_during(target, evil, AutoModelForCausalLM if weights else AutoTokenizer, "from_pretrained",
                          monkeypatch)
    request = ExportRequest(run=str(run), allow_unpromoted=True, smoke_items=1)
    if weights:
        with pytest.raises(UserInputError, match=f"changed while it loaded.*{name}: {MARKED}"):
            export.export_model.__wrapped__(request)
        assert log and not (run / "export").exists() and not list(run.glob(".export-*"))
        return
    result = export.export_model.__wrapped__(request)
    assert log and "EVIL" not in (Path(result.export_dir) / "chat_template.jinja").read_text()


def test_a_promotion_judges_the_checkpoint_whose_hash_it_records(workspace, tiny_model, monkeypatch):
    """promote_checkpoint records the checkpoint's content hash, then loads it to judge: a weight file swapped in
    for that load and put back is refused, naming it, and no promotion is written."""
    from transformers import AutoModelForCausalLM

    from mcp_server.errors import UserInputError
    from mcp_server.evaluation.evaluate import evaluate_model
    from mcp_server.evaluation.models import EvaluateRequest, PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint
    from mcp_server.tiny import make_task, write_jsonl

    goldens = workspace / "goldens.jsonl"
    write_jsonl([{k: r[k] for k in ("prompt", "question", "answer")} for r in make_task(n=4, max_operand=3)], goldens)
    evaluate_model(EvaluateRequest(model="tiny", goldens=str(goldens), max_new_tokens=4))  # the baseline
    run = _placed_run(workspace, tiny_model, base="tiny")
    target = run / "checkpoints" / "model.safetensors"
    log = _swapped_during(target, _evil_weights(target), AutoModelForCausalLM, "from_pretrained", monkeypatch)
    with pytest.raises(UserInputError, match=f"changed while it loaded.*model.safetensors: {MARKED}"):
        promote_checkpoint(PromoteRequest(run=str(run)))
    assert log and not (run / "promotion.json").exists()


# ---------------------------------------------------------------- G1 end to end: the round's racer on a real launch
def _template_racer(folder: Path, log: list, stop) -> None:
    """tokrace.py: once the model's weights loaded (a close of generation_config.json right after one of
    model.safetensors: only from_pretrained reads them in that order), rename the unreviewed template in; put the
    reviewed one back at the next close of chat_template.jinja (the round's tokenizer read)."""
    import ctypes
    import select
    import struct

    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = libc.inotify_init()
    libc.inotify_add_watch(fd, str(folder).encode(), 0x10)  # IN_CLOSE_NOWRITE
    good, last = (folder / "chat_template.jinja").read_bytes(), None
    try:
        while not stop.is_set() and len(log) < 2:
            if not select.select([fd], [], [], 0.5)[0]:
                continue
            buf, i = os.read(fd, 4096), 0
            while i < len(buf) and len(log) < 2:
                _, _, _, size = struct.unpack_from("iIII", buf, i)
                name = buf[i + 16:i + 16 + size].rstrip(b"\0").decode()
                i += 16 + size
                if not log and name == "generation_config.json" and last == "model.safetensors":
                    _rename_over(folder / "chat_template.jinja", EVIL_TEMPLATE.encode())
                    log.append("swapped")
                elif log and name == "chat_template.jinja":
                    _rename_over(folder / "chat_template.jinja", good)
                    log.append("restored")
                last = name
    finally:
        os.close(fd)


@pytest.mark.slow  # a real launch of the tiny model
def test_the_rounds_template_racer_never_trains_its_template(workspace, tiny_model, monkeypatch):
    import threading

    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest
    from support import emit_run, pass_inspection, wait_for

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    model = shutil.copytree(tiny_model, workspace / "warm")
    data = workspace / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {i} + {i}?"}) + "\n" for i in range(16)))
    run_dir = emit_run("tokrace", model=str(model), dataset=str(data), max_steps=1, per_device_train_batch_size=4,
                       num_generations=4, max_completion_length=8, save_steps=1, report_to="none")
    pass_inspection(run_dir, max_samples=None, reviewer="ana")
    reviewed, log, stop = (model / "chat_template.jinja").read_text(), [], threading.Event()
    assert launch_training(LaunchRequest(run=str(run_dir))).launched
    racer = threading.Thread(target=_template_racer, args=(model, log, stop), daemon=True)
    racer.start()
    try:
        status = wait_for(run_dir, lambda s: s.state not in ("starting", "running"), timeout=400)
    finally:
        stop.set()
        racer.join(5)
    assert log == ["swapped", "restored"], (log, status.log_tail)
    assert (model / "chat_template.jinja").read_text() == reviewed
    saved = [p.read_text() for p in (run_dir / "checkpoints").rglob("chat_template.jinja")]
    assert all("EVIL" not in text for text in saved), "a checkpoint carries the unreviewed template"
    # The tokenizer was read from the private copy before the weights loaded, so the racer's restore waited for the
    # next read of the folder: confirm_loaded_model's, which read the swapped template and refused.
    text = (run_dir / "train" / "logs" / "stdout.log").read_text()
    assert status.state == "failed" and "the model's files changed while it loaded" in text, status.log_tail
    assert not saved

"""The private copies the tools load from (round 18; issue 48): the trainer's tokenizer copy and promote's and
export's checkpoint copy are made in a mkdtemp folder any process of the user can write into. A racer planted there
a symbolic link the copy wrote through (b07: a file outside the workspace overwritten), extra tokenizer files the
load read (b01: another chat template and eos token trained), an adapter_config.json from_pretrained loaded as a
PEFT adapter over the checkpoint (b02: another model judged under the checkpoint's hash). Each row plants at the
racer's exact point, deterministically (right after the folder is made, or when the door's own load starts), through
the door itself; the door must refuse, naming what was planted, and never write through a link. Tiny model, no
training."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from mcp_server.errors import UserInputError
from mcp_server.inspection import trained
from mcp_server.inspection.trained import InputsChanged
from mcp_server.inspection.training_inputs import trained_model
from mcp_server.runs import Run

INJECTED = "{% for m in messages %}R18-INJECTED {{ m['content'] }}{% endfor %}"


def _plant_on_mkdtemp(monkeypatch, prefix: str, plant) -> list:
    """tempfile.mkdtemp wrapped: each folder whose name starts with `prefix` gets `plant(folder)` the moment it
    is made (the racer's inotify plant, with no race). Returns the folders planted."""
    real, planted = tempfile.mkdtemp, []

    def mkdtemp(*args, **kwargs):
        made = real(*args, **kwargs)
        if Path(made).name.startswith(prefix):
            plant(Path(made))
            planted.append(made)
        return made
    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    return planted


def _plant_template(folder: Path) -> None:
    (folder / "additional_chat_templates").mkdir(exist_ok=True)
    (folder / "additional_chat_templates" / "default.jinja").write_text(INJECTED)
    (folder / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))


def _verified(tmp_path: Path, tiny_model: Path, monkeypatch) -> Path:
    folder = shutil.copytree(tiny_model, tmp_path / "model")
    pin = trained_model(str(folder), None, Run(tmp_path))  # what the point-of-use check hashed (VERIFIED)
    monkeypatch.setattr(trained, "VERIFIED", {"run": str(tmp_path), "model": pin, "loads": str(folder),
                                              "name": str(folder), "revision": None})
    return folder


def _processing_class():
    from mcp_server.training.trainer.script_support import verified_processing_class

    return verified_processing_class(SimpleNamespace(trust_remote_code=False))


# ---------------------------------------------------------------- b07: a link planted where the copy writes
@pytest.mark.parametrize("name", ["tokenizer_config.json", "chat_template.jinja", "config.json"])
def test_a_link_planted_in_the_tokenizer_copy_is_never_written_through(tmp_path, tiny_model, monkeypatch, capsys,
                                                                     name):
    _verified(tmp_path, tiny_model, monkeypatch)
    outside = tmp_path / "outside" / "notes.txt"
    outside.parent.mkdir()
    outside.write_text("a file of the person, outside the workspace\n")
    planted = _plant_on_mkdtemp(monkeypatch, "llm-finetuning-tokenizer-",
                                lambda folder: (folder / name).symlink_to(outside))
    with pytest.raises(InputsChanged) as refused:
        _processing_class()
    err = capsys.readouterr().err
    assert planted and outside.read_text() == "a file of the person, outside the workspace\n"
    assert refused.value.code == 3 and name in err and "planted" in err, err


# ---------------------------------------------------------------- b01: tokenizer files planted in the copy
def test_tokenizer_files_planted_in_the_copy_before_it_loads_are_refused_naming_what_differs(tmp_path, tiny_model,
                                                                                            monkeypatch, capsys):
    """Planted after the copy was written, as the trainer's AutoProcessor starts reading it (no name collides with
    a verified file, so no create is refused): the tokenizer as loaded is compared with one loaded from the
    verified bytes held in memory."""
    from transformers import AutoProcessor

    _verified(tmp_path, tiny_model, monkeypatch)
    real, planted = AutoProcessor.from_pretrained, []

    def from_pretrained(folder, *args, **kwargs):
        if not planted and Path(str(folder)).name.startswith("llm-finetuning-tokenizer-"):
            _plant_template(Path(folder))
            planted.append(folder)
        return real(folder, *args, **kwargs)
    monkeypatch.setattr(AutoProcessor, "from_pretrained", from_pretrained)
    with pytest.raises(InputsChanged) as refused:
        _processing_class()
    err = capsys.readouterr().err
    assert planted and refused.value.code == 3, err
    assert "chat template" in err and "special tokens" in err and "not the verified files'" in err, err


def test_tokenizer_files_planted_in_every_private_folder_are_refused(tmp_path, tiny_model, monkeypatch, capsys):
    """The racer plants in every folder the trainer makes, the one the verified bytes load from included."""
    _verified(tmp_path, tiny_model, monkeypatch)
    planted = _plant_on_mkdtemp(monkeypatch, "llm-finetuning-", _plant_template)
    with pytest.raises(InputsChanged) as refused:
        _processing_class()
    err = capsys.readouterr().err
    assert len(planted) >= 2 and refused.value.code == 3, err
    assert "special_tokens_map.json (not a verified file)" in err, err


@pytest.mark.parametrize("change", ["a file planted, then removed", "a verified file rewritten, then put back"])
def test_a_change_undone_before_the_verified_bytes_finish_loading_is_refused(tmp_path, tiny_model, monkeypatch,
                                                                            capsys, change):
    """The racer changes the folder the verified bytes load from (held_load's) while they load, and undoes it
    before the load returns: the tree looks untouched after; the watch saw it."""
    from transformers import AutoProcessor

    _verified(tmp_path, tiny_model, monkeypatch)
    real, seen = AutoProcessor.from_pretrained, []

    def from_pretrained(folder, *args, **kwargs):
        if not str(folder).startswith("/proc/self/fd/") and "llm-finetuning-held-" not in str(folder):
            return real(folder, *args, **kwargs)
        seen.append(folder)
        target = Path(folder) / ("special_tokens_map.json" if change.startswith("a file") else "chat_template.jinja")
        before = target.read_bytes() if target.exists() else None
        target.unlink(missing_ok=True)
        target.write_bytes(b'{"eos_token": "<|endoftext|>"}' if before is None else INJECTED.encode())
        try:
            return real(folder, *args, **kwargs)
        finally:
            target.unlink()
            if before is not None:
                target.write_bytes(before)
    monkeypatch.setattr(AutoProcessor, "from_pretrained", from_pretrained)
    with pytest.raises(InputsChanged) as refused:
        _processing_class()
    err = capsys.readouterr().err
    assert seen and refused.value.code == 3 and "changed while it loaded" in err, err


def test_the_unplanted_copy_loads_the_verified_tokenizer(tmp_path, tiny_model, monkeypatch):
    _verified(tmp_path, tiny_model, monkeypatch)
    loaded = _processing_class()
    assert loaded.chat_template == (tiny_model / "chat_template.jinja").read_text()
    assert loaded.padding_side == "left" and loaded.truncation_side == "left"


# ---------------------------------------------------------------- b02: an adapter planted in the checkpoint copy
def _adapter(tiny_model: Path, base: Path, out: Path) -> Path:
    """A PEFT adapter over the tiny model (LoRA on q_proj, down_proj as modules_to_save), its base `base`."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model),
                           LoraConfig(r=2, target_modules=["q_proj"], modules_to_save=["down_proj"],
                                      init_lora_weights=False))
    model.save_pretrained(out)
    config = json.loads((out / "adapter_config.json").read_text())
    (out / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(base)}))
    return out


@pytest.mark.parametrize("plant", ["adapter", "tokenizer files"])
def test_a_file_planted_in_the_checkpoint_copy_is_refused_before_anything_is_judged(tmp_path, tiny_model,
                                                                                  monkeypatch, plant):
    """promote-checkpoint and export-model load through load_checked; the plant lands in its private copy the
    moment it is made (the weights the copy links, and every checked file, unchanged)."""
    from mcp_server.evaluation.checked_load import hashed_load

    ckpt = shutil.copytree(tiny_model, tmp_path / "checkpoint")
    adapter = _adapter(tiny_model, ckpt, tmp_path / "adapter") if plant == "adapter" else None

    def planting(folder: Path) -> None:
        if adapter is None:
            return _plant_template(folder)
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            shutil.copy(adapter / name, folder / name)
    planted = _plant_on_mkdtemp(monkeypatch, "llm-finetuning-checkpoint-", planting)
    with pytest.raises(UserInputError) as refused:
        hashed_load(ckpt)
    said = str(refused.value)
    assert planted and "nothing was judged or exported" in said, said
    if adapter is not None:
        assert "adapter" in said and "lora_" in said or "adapter loaded with it" in said, said
    else:
        assert "chat template" in said and "special tokens" in said, said


def test_the_unplanted_checkpoint_copy_loads_the_checkpoint(tmp_path, tiny_model):
    from mcp_server.evaluation.checked_load import hashed_load

    ckpt = shutil.copytree(tiny_model, tmp_path / "checkpoint")
    _, (model, tokenizer) = hashed_load(ckpt)
    assert not hasattr(model, "peft_config") and tokenizer.chat_template == (ckpt / "chat_template.jinja").read_text()


# ---------------------------------------------------------------- the reviewed reward code's staging copy
def test_a_link_planted_in_the_reviewed_code_staging_is_never_written_through(tmp_path, monkeypatch):
    """record-inspection-verdict copies the reward modules into a staging folder of the run (.reward_code-*),
    renamed to inspection/reward_code/: a link planted there is refused, never written through."""
    from mcp_server.inspection.trained import keep_reviewed_code

    module = f"r18rew{abs(hash(str(tmp_path)))}"
    code = tmp_path / "code"
    code.mkdir()
    (code / f"{module}.py").write_text("def nonempty_reward(completions, **kw):\n"
                                       "    return [1.0 for c in completions]\n")
    monkeypatch.syspath_prepend(str(code))
    run = Run(tmp_path / "run")
    (run.dir / "inspection").mkdir(parents=True)
    outside = tmp_path / "outside.py"
    outside.write_text("a file of the person\n")
    planted = _plant_on_mkdtemp(monkeypatch, ".reward_code-", lambda f: (f / f"{module}.py").symlink_to(outside))
    with pytest.raises(UserInputError) as refused:
        keep_reviewed_code(run, [{"name": f"{module}.nonempty_reward", "params": {}, "weight": 1.0}])
    assert planted and outside.read_text() == "a file of the person\n" and not run.reward_code.exists()
    assert "planted" in str(refused.value), refused.value


# ---------------------------------------------------------------- the trainer's model: an adapter planted as it loads
def test_an_adapter_planted_in_the_model_folder_while_the_trainer_loads_is_refused(tmp_path, tiny_model,
                                                                                 monkeypatch, capsys):
    """adapter_config.json planted in the verified model folder while the model loads (from_pretrained loads it as
    an adapter over the model) and removed after: the folder's pin is the verified one again, the base tensors
    are the files'; the adapter in memory is refused, named."""
    from transformers import AutoModelForCausalLM

    from mcp_server.inspection.trained import confirm_loaded_model

    folder = _verified(tmp_path, tiny_model, monkeypatch)
    adapter = _adapter(tiny_model, folder, tmp_path / "adapter")
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copy(adapter / name, folder / name)
    model = AutoModelForCausalLM.from_pretrained(folder)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        (folder / name).unlink()
    with pytest.raises(InputsChanged) as refused:
        confirm_loaded_model(SimpleNamespace(model=model, ref_model=None))
    err = capsys.readouterr().err
    assert refused.value.code == 3 and "adapter loaded with it" in err, err


def test_an_adapter_config_rewritten_in_the_checkpoint_copy_is_refused(tmp_path, tiny_model, monkeypatch):
    """A LoRA checkpoint: its adapter_config.json rewritten in the private copy as the load starts (lora_alpha
    four times over: the same tensors, another model); the adapter's config as loaded is compared with the checked
    bytes."""
    from peft import AutoPeftModelForCausalLM

    from mcp_server.evaluation.checked_load import hashed_load

    ckpt = _adapter(tiny_model, tiny_model, tmp_path / "checkpoint")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tiny_model / name, ckpt / name)
    real, rewritten = AutoPeftModelForCausalLM.from_pretrained, []

    def from_pretrained(folder, *args, **kwargs):
        config = Path(folder) / "adapter_config.json"
        if Path(str(folder)).name.startswith("llm-finetuning-checkpoint-") and not rewritten:
            data = json.loads(config.read_text())
            config.unlink()
            config.write_text(json.dumps({**data, "lora_alpha": data["lora_alpha"] * 4}))
            rewritten.append(folder)
        return real(folder, *args, **kwargs)
    monkeypatch.setattr(AutoPeftModelForCausalLM, "from_pretrained", from_pretrained)
    with pytest.raises(UserInputError) as refused:
        hashed_load(ckpt)
    assert rewritten and "adapter_config.json" in str(refused.value) and "lora_alpha" in str(refused.value)

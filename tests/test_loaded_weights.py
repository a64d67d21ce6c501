"""What is in memory is what was reviewed (round 9, G2; issue 48): after GRPOTrainer loaded the model,
confirm_loaded_model compares the tensors in memory with the verified files' bytes, read from one open descriptor
per file. A weight file renamed in after the check's hash and put back after the load (the round's racer), or
rewritten in place and restored, passes any re-hash of the files; it must not pass this.

The table: {single file, sharded} x {no change, swap after hash (kept), in-place rewrite after hash (kept), swap
during load and put back, in-place rewrite during load and restored} x {full (float32), LoRA (bfloat16 under
PEFT)}, constructed in-process with the tiny model (no training); each row that passes then rewrites the file in
place and the weights in memory must not follow (transformers keeps an uncast CPU load as a view of the file's
mapping). One end-to-end row replays the round's racer on a real launch."""

from __future__ import annotations

import ctypes
import json
import os
import select
import shutil
import struct
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from mcp_server import workspace as workspace_module
from mcp_server.inspection import loaded_weights, trained
from mcp_server.inspection.trained import InputsChanged, confirm_loaded_model
from mcp_server.inspection.training_inputs import trained_model
from mcp_server.runs import Run

MARKED = "model.layers.0.input_layernorm.weight"  # the round's mark: 7.0 where the reviewed model holds ~1
BASE = "model.layers.0.self_attn.q_proj.weight"  # a LoRA target: under PEFT its name gains `base_layer`


@pytest.fixture(scope="module")
def sharded(tiny_model, tmp_path_factory) -> Path:
    """The tiny model saved as shards and an index (built once; each cell copies it)."""
    from transformers import AutoModelForCausalLM

    folder = shutil.copytree(tiny_model, tmp_path_factory.mktemp("sharded") / "model")
    model = AutoModelForCausalLM.from_pretrained(folder)
    (folder / "model.safetensors").unlink()
    model.save_pretrained(folder, max_shard_size="100KB")
    assert len(set(json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"].values())) > 1
    return folder


def _folder(tmp_path: Path, source: Path) -> tuple[Path, str]:
    """A copy of `source` (one model.safetensors, or shards and an index) and the file holding MARKED."""
    folder = shutil.copytree(source, tmp_path / "model")
    index = folder / "model.safetensors.index.json"
    return folder, json.loads(index.read_text())["weight_map"][MARKED] if index.exists() else "model.safetensors"


def _evil(path: Path) -> bytes:
    """The same file with MARKED set to 7.0 and one q_proj weight moved: same names, shapes and size."""
    import torch
    from safetensors.torch import load_file, save

    tensors = load_file(str(path))
    for name, tensor in tensors.items():
        if name == MARKED:
            tensors[name] = torch.full_like(tensor, 7.0)
        elif name == BASE:
            tensors[name] = tensor + 1
    return save(tensors, metadata={"format": "pt"})


def _load(folder: Path, kind: str):
    import torch
    from transformers import AutoModelForCausalLM

    if kind == "full":
        return AutoModelForCausalLM.from_pretrained(folder)
    from peft import LoraConfig, get_peft_model

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    return get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))


def _rename_over(path: Path, data: bytes) -> None:
    staged = path.with_name(".staged")
    staged.write_bytes(data)
    os.replace(staged, path)


def _in_place(path: Path, data: bytes) -> None:
    with open(path, "r+b") as handle:
        handle.write(data)


def _swap(path: Path, evil: bytes, good: bytes, case: str, load):
    """The model loaded while `case` happens to `path` between the check's hash and after the load."""
    if case == "swap after hash":
        _rename_over(path, evil)
        return load()
    if case == "in-place rewrite after hash":
        _in_place(path, evil)
        return load()
    if case == "swap during load, put back":
        _rename_over(path, evil)
        model = load()
        _rename_over(path, good)
        return model
    if case == "in-place during load, restored":
        _in_place(path, evil)
        model = load()
        _in_place(path, good)
        return model
    return load()


# What each case must get: refused (with these words), or None: it passes, and what is in memory is the reviewed
# file's (an in-place write restored before the check leaves a float32 load, a view of the file's mapping until the
# check copies it, equal to the reviewed bytes; a bfloat16 load copied the marked values: refused).
CASES = {"no change": None, "swap after hash": "the model's files changed while it loaded",
         "in-place rewrite after hash": "the model's files changed while it loaded",
         "swap during load, put back": "not the verified files'",
         "in-place during load, restored": "not the verified files'"}


def _marked(model) -> float:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return float(base.model.layers[0].input_layernorm.weight.detach()[0])


@pytest.mark.parametrize("kind", ["full", "lora"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("layout", ["single", "sharded", "large"])
def test_the_weights_in_memory_are_the_verified_files(tmp_path, tiny_model, sharded, monkeypatch, capsys, layout, case,
                                                     kind):
    """`large`: the tiny model's file as a model's files over WHOLE_FILE_BYTES are pinned (by fstat, not content):
    read tensor by tensor from the fd; any rewrite or rename changes that pin (ctime, inode)."""
    if layout == "large":
        monkeypatch.setattr(workspace_module.files_digest, "__defaults__", (0,))
        monkeypatch.setattr(loaded_weights, "WHOLE_FILE_BYTES", 0)
    folder, holder = _folder(tmp_path, sharded if layout == "sharded" else tiny_model)
    path = folder / holder
    good, evil = path.read_bytes(), _evil(path)
    assert len(good) == len(evil)
    run = Run(tmp_path)
    pin = trained_model(str(folder), None, run)  # what the point-of-use check hashed and recorded (VERIFIED)
    monkeypatch.setattr(trained, "VERIFIED", {"run": str(run.dir), "model": pin, "loads": str(folder),
                                              "name": str(folder), "revision": None})
    model = _swap(path, evil, good, case, lambda: _load(folder, kind))
    assert path.read_bytes() == (evil if "after hash" in case else good)
    trainer = SimpleNamespace(model=model, ref_model=None)
    mmapped = case == "in-place during load, restored" and kind == "full" and layout != "large"
    if CASES[case] is None or mmapped:
        confirm_loaded_model(trainer)
        assert _marked(model) != 7.0
        _in_place(path, evil)  # after the check: what trains is the process's own copy, not the file's mapping
        assert _marked(model) != 7.0, "the weights in memory follow the file"
        return
    with pytest.raises(InputsChanged) as refused:
        confirm_loaded_model(trainer)
    err = capsys.readouterr().err
    expected = CASES["swap after hash"] if layout == "large" else CASES[case]  # large: a new inode or ctime
    assert refused.value.code == 3 and expected in err, err
    if "after hash" not in case and layout != "large":  # names the file and the tensor (q_proj: base_layer)
        assert f"{holder}: {MARKED}" in err, err
        assert layout != "single" or f"{holder}: {BASE}" in err, err


def test_a_reference_model_loaded_apart_is_compared_too(tmp_path, tiny_model, monkeypatch, capsys):
    """beta > 0 without PEFT: TRL loads a second model from the same folder (another read); its weights count."""
    folder, holder = _folder(tmp_path, tiny_model)
    path = folder / holder
    good, evil = path.read_bytes(), _evil(path)
    pin = trained_model(str(folder), None, Run(tmp_path))
    monkeypatch.setattr(trained, "VERIFIED", {"run": str(tmp_path), "model": pin, "loads": str(folder),
                                              "name": str(folder), "revision": None})
    policy = _load(folder, "full")
    reference = _swap(path, evil, good, "swap during load, put back", lambda: _load(folder, "full"))
    confirm_loaded_model(SimpleNamespace(model=policy, ref_model=None))
    with pytest.raises(InputsChanged):
        confirm_loaded_model(SimpleNamespace(model=policy, ref_model=reference))
    assert MARKED in capsys.readouterr().err


# ---------------------------------------------------------------- the round's racer, end to end
IN_CLOSE_NOWRITE = 0x10


def _racer(folder: Path, evil: bytes, good: bytes, log: list, stop: threading.Event) -> None:
    """racer2.py: after the second close of model.safetensors rename the marked copy in, after the third (the
    load) put the original back, both by rename. The first two are the check's hash and the read that copies the
    tokenizer's files (round 10: a swap after the first is refused by that read, before the model loads); the
    swap lands between the last read before the load and the load."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = libc.inotify_init()
    libc.inotify_add_watch(fd, str(folder).encode(), IN_CLOSE_NOWRITE)
    closes = 0
    try:
        while not stop.is_set() and closes < 3:
            if not select.select([fd], [], [], 0.5)[0]:
                continue
            buf, i = os.read(fd, 4096), 0
            while i < len(buf):
                _, mask, _, size = struct.unpack_from("iIII", buf, i)
                name = buf[i + 16:i + 16 + size].rstrip(b"\0").decode()
                i += 16 + size
                if name == "model.safetensors" and mask & IN_CLOSE_NOWRITE:
                    closes += 1
                    if closes > 1:
                        _rename_over(folder / name, evil if closes == 2 else good)
                        log.append(f"{time.time():.3f} close#{closes}")
    finally:
        os.close(fd)


@pytest.mark.slow  # a real launch of the tiny model
def test_the_rounds_racer_is_refused_before_the_first_step(workspace, tiny_model, monkeypatch):
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest
    from support import emit_run, pass_inspection, wait_for

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    model = shutil.copytree(tiny_model, workspace / "warm")
    data = workspace / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {i} + {i}?"}) + "\n" for i in range(16)))
    run_dir = emit_run("racer", model=str(model), dataset=str(data), max_steps=1, per_device_train_batch_size=4,
                       num_generations=4, max_completion_length=12, save_steps=1, report_to="none")
    pass_inspection(run_dir, max_samples=None, reviewer="ana")
    good = (model / "model.safetensors").read_bytes()
    evil, log, stop = _evil(model / "model.safetensors"), [], threading.Event()
    result = launch_training(LaunchRequest(run=str(run_dir)))
    assert result.launched, result.message
    racer = threading.Thread(target=_racer, args=(model, evil, good, log, stop), daemon=True)
    racer.start()
    try:
        status = wait_for(run_dir, lambda s: s.state not in ("starting", "running"), timeout=400)
    finally:
        stop.set()
        racer.join(5)
    text = (run_dir / "train" / "logs" / "stdout.log").read_text()
    assert len(log) == 2, (log, status.log_tail)  # the swap happened, and the original is back
    assert (model / "model.safetensors").read_bytes() == good
    assert status.state == "failed" and f"model.safetensors: {MARKED}" in text, status.log_tail
    assert not list((run_dir / "checkpoints").glob("checkpoint-*")), "a step trained on the swapped weights"

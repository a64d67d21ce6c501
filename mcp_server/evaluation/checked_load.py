"""A checkpoint loaded as it was when hashed (round 10, F4; issue 48): what promote_checkpoint judges and
export_model exports is the checkpoint whose content hash they record.

Both hash the checkpoint (workspace.tree_files: each file's sha256; the promotion and the model card name their
digest) and load it seconds later, by path: a weight file renamed over it between the two and put back after the
load was judged or exported under the hash of the file put back. `load_checked` loads from a private copy of the
checkpoint's non-weight files checked against those hashes (config, tokenizer, chat template, adapter config;
loaded_weights.verified_copy, its weight files linked, each file created there: a planted one is refused), then
reads each weight file once, hashes it and compares every tensor with the loaded one (loaded_weights.
saved_weight_problems: every loaded tensor, no module no file made, such as a PEFT adapter planted in the copy)
before an adapter is merged, and the config and tokenizer as loaded with those loaded from the checked bytes held in
memory (private_copy.held_load). A mismatch is refused naming the file, before anything is written.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server.model_ref import load_model
from mcp_server.workspace import tree_digest, tree_files


def load_checked(ckpt: Path, files: dict[str, str]):
    """(model, tokenizer) of `ckpt` as `files` ({relative: sha256}, tree_files) hashed it, an adapter merged;
    UserInputError (field "checkpoint") naming the file that changed."""
    from mcp_server.inspection.loaded_weights import saved_weight_problems, verified_copy

    private, held = tempfile.mkdtemp(prefix="llm-finetuning-checkpoint-"), {}
    try:
        problem = verified_copy(ckpt, files, None, private, held)
        model, tokenizer = (None, None) if problem else load_model(private, merge=False)
        problems = [problem] if problem else saved_weight_problems(model, ckpt, files)
        problems = problems or _adapter_config_problems(model, held) or _config_problems(model, held) \
            or _tokenizer_problems(tokenizer, held)
    finally:
        shutil.rmtree(private, ignore_errors=True)
    if problems:
        raise UserInputError("checkpoint", f"{ckpt} changed while it loaded, nothing was judged or exported: "
                             + "; ".join(problems[:4]) + ". Restore it as saved, then try again")
    merged = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    return merged.eval(), tokenizer


def _adapter_config_problems(model, held: dict[str, bytes]) -> list[str]:
    """The adapter's config as loaded against the checked adapter_config.json's bytes, field by field (one
    rewritten in the private copy while it loaded: other target modules, modules_to_save, another base)."""
    config = (getattr(model, "peft_config", None) or {}).get("default")
    if config is None or "adapter_config.json" not in held:
        return []

    def plain(value) -> str:
        value = sorted(value) if isinstance(value, (set, frozenset, list)) and all(
            isinstance(v, str) for v in value) else value
        return json.dumps(value, sort_keys=True, default=str)
    verified, loaded = json.loads(held["adapter_config.json"]), config.to_dict()
    differ = [k for k in verified if k != "inference_mode" and plain(loaded.get(k)) != plain(verified[k])]
    return [f"adapter_config.json: the loaded adapter's {', '.join(differ[:6])} differ from the checked file's "
            "(changed in its private copy while it loaded)"] if differ else []


def _config_problems(model, held: dict[str, bytes]) -> list[str]:
    """The config and generation config as loaded from the private copy against the checked bytes held in memory
    (loaded_config, through private_copy.held_load): a config.json rewritten in the copy while the model loaded
    from it by path builds another model from the same tensors (round 19: no load of a private folder by path is
    trusted without its effective state compared)."""
    from mcp_server.inspection.loaded_config import loaded_config_problems
    from mcp_server.inspection.private_copy import PlantedFile, held_load

    try:
        return held_load(held, lambda private: loaded_config_problems([model], private, None),
                         prefix="llm-finetuning-loaded-")
    except PlantedFile as exc:
        return [str(exc)]


def _tokenizer_problems(tokenizer, held: dict[str, bytes]) -> list[str]:
    """The tokenizer as loaded against one loaded from the checked bytes held in memory (private_copy.held_load):
    a chat template or special tokens map planted in the private copy while it loaded is named (round 18)."""
    from transformers import AutoTokenizer

    from mcp_server.inspection.private_copy import PlantedFile, held_load, tokenizer_problems

    try:
        return tokenizer_problems(tokenizer, held_load(held, AutoTokenizer.from_pretrained))
    except PlantedFile as exc:
        return [str(exc)]


def hashed_load(ckpt: Path, files: dict[str, str] | None = None) -> tuple[str, tuple]:
    """(the checkpoint's content hash, workspace.sha256_tree's; its load_checked model and tokenizer). `files`:
    tree_files(ckpt) when the caller already hashed them (and held them to its ledger)."""
    files = tree_files(ckpt) if files is None else files
    return tree_digest(files), load_checked(ckpt, files)

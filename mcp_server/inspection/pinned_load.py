"""A base model loaded as its recorded pin says (round 18, b05/b06; issue 48): what evaluate_model measures for a
baseline, what promote decodes of the base on the drift suite and what sample_completions samples for a review are
the model whose pin (pins.model_pin: its folder's files digest) they record.

Each pinned the folder, then loaded it by path: a folder renamed over it between the two and put back after the
load was measured, or reviewed, under the pin of the folder put back. `load_pinned` is the trainer's check
(loaded_weights), run where these load: the tokenizer (chat template included) from a private copy of the
folder's non-weight files made from one read whose digest is the pin (loaded_weights.verified_copy), the weights
by path, then what is in memory held to the pin (loaded_weights.loaded_weight_problems: one more read of every
file, its digest the pin, every weight tensor bitwise the loaded one, the config as loaded the copy's). A
mismatch is refused, naming the file that changed, before anything is decoded or recorded.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server.inspection.pins import hub_snapshot, model_content
from mcp_server.model_ref import load_model


def pinned_folder(model_ref, pin: dict | None) -> Path | None:
    """The folder `pin` hashed for `model_ref`: the directory itself, or a hub model's cached snapshot at the
    pin's revision (loaded from that folder, never by name: pins.hub_snapshot); None when the pin holds no files
    (a hub model no cache held when it was pinned)."""
    if model_content(pin) is None:
        return None
    if Path(str(model_ref)).is_dir():
        return Path(str(model_ref))
    revision = pin.get("revision")
    return hub_snapshot(str(pin.get("model") or model_ref), None if revision in (None, "main") else revision)


def load_pinned(model_ref, pin: dict | None, loads: dict | None = None, what: str = "measured", tokenizer=None):
    """(model, tokenizer) in eval mode of `model_ref` as `pin` (model_pin, trained_model) hashed it; `loads`:
    from_pretrained's file-choosing arguments (the pin's own "loads" when None); `tokenizer`: one pinned_tokenizer
    already took from this pin (not read again). UserInputError("model") naming what changed while it loaded;
    nothing was `what` then. A pin without files loads plainly (load_model)."""
    from transformers import AutoTokenizer

    from mcp_server.inspection.loaded_weights import loaded_weight_problems, verified_copy

    loads = dict((pin or {}).get("loads") or {}) if loads is None else dict(loads)
    folder = pinned_folder(model_ref, pin)
    if folder is None:
        return load_model(model_ref, **loads)
    private = tempfile.mkdtemp(prefix="llm-finetuning-pinned-")
    try:
        problems = [] if tokenizer is not None else [
            p for p in [verified_copy(folder, model_content(pin), loads, private)] if p]
        if not problems:
            model = load_model(folder, **loads)[0]
            tokenizer = AutoTokenizer.from_pretrained(private) if tokenizer is None else tokenizer
            problems = loaded_weight_problems([model], folder, model_content(pin), loads)
    finally:
        shutil.rmtree(private, ignore_errors=True)
    if problems:
        raise UserInputError("model", f"{folder} changed while it loaded: not the model its pin recorded (files "
                             f"{model_content(pin)[:12]}), so nothing was {what}: " + "; ".join(problems[:4])
                             + ". Put its files back as they were (nothing may replace them while it loads), then "
                             "try again")
    return model.eval(), tokenizer


def pinned_tokenizer(model_ref, pin: dict | None, loads: dict | None = None, verified: dict | None = None):
    """The tokenizer (chat template included) of `model_ref` from a private copy of its folder's non-weight files
    whose one read is `pin` (verified_copy), where another engine loads the weights (vLLM); UserInputError as
    load_pinned's. A pin without files: from `model_ref` itself. `verified`: given a dict, that read's non-weight
    files' bytes put in it as "files" and every file's pin as "pins" (what pinned_vllm loads vLLM's config from)."""
    from transformers import AutoTokenizer

    from mcp_server.inspection.loaded_weights import verified_copy

    folder = pinned_folder(model_ref, pin)
    if folder is None:
        return AutoTokenizer.from_pretrained(str(model_ref))
    loads = dict((pin or {}).get("loads") or {}) if loads is None else dict(loads)
    private = tempfile.mkdtemp(prefix="llm-finetuning-pinned-")
    try:
        verified = {} if verified is None else verified
        verified.update(files={}, pins={})
        problem = verified_copy(folder, model_content(pin), loads, private, verified["files"], verified["pins"])
        if problem is None:
            return AutoTokenizer.from_pretrained(private)
    finally:
        shutil.rmtree(private, ignore_errors=True)
    raise UserInputError("model", f"{folder}'s tokenizer is not the one its pin recorded: {problem}. Put its "
                         "files back as they were, then try again")

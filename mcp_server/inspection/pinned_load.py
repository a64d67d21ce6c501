"""A base model loaded as its recorded pin says (round 18, b05/b06; issue 48): what evaluate_model measures for a
baseline, what promote decodes of the base on the drift suite and what sample_completions samples for a review are
the model whose pin (pins.model_pin: its folder's files digest) they record.

Each pinned the folder, then loaded it by path: a folder renamed over it between the two and put back after the
load was measured, or reviewed, under the pin of the folder put back. `load_pinned` is the trainer's check
(loaded_weights), run where these load: the tokenizer (chat template included) from the bytes of one read of the
folder's non-weight files whose digest is the pin, held in memory and loaded by private_copy.held_load (round 19:
a private copy loaded by path took a chat template planted in it), the weights
by path, then what is in memory held to the pin (loaded_weights.loaded_weight_problems: one more read of every
file, its digest the pin, every weight tensor bitwise the loaded one, the config as loaded the copy's). A
mismatch is refused, naming the file that changed, before anything is decoded or recorded.
"""

from __future__ import annotations

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
    from mcp_server.inspection.loaded_weights import loaded_weight_problems

    loads = dict((pin or {}).get("loads") or {}) if loads is None else dict(loads)
    folder = pinned_folder(model_ref, pin)
    if folder is None:
        return load_model(model_ref, **loads)
    tokenizer = held_tokenizer(folder, pin, loads, what=what) if tokenizer is None else tokenizer
    model = load_model(folder, **loads)[0]
    problems = loaded_weight_problems([model], folder, model_content(pin), loads)
    if problems:
        raise UserInputError("model", f"{folder} changed while it loaded: not the model its pin recorded (files "
                             f"{model_content(pin)[:12]}), so nothing was {what}: " + "; ".join(problems[:4])
                             + ". Put its files back as they were (nothing may replace them while it loads), then "
                             "try again")
    return model.eval(), tokenizer


def pinned_tokenizer(model_ref, pin: dict | None, loads: dict | None = None, verified: dict | None = None):
    """The tokenizer (chat template included) of `model_ref` as `pin` hashed it (held_tokenizer), where another
    engine loads the weights (vLLM); UserInputError as load_pinned's. A pin without files: from `model_ref` itself.
    `verified`: given a dict, that read's non-weight files' bytes put in it as "files" and every file's pin as
    "pins" (what pinned_vllm loads vLLM's config from)."""
    from transformers import AutoTokenizer

    folder = pinned_folder(model_ref, pin)
    if folder is None:
        return AutoTokenizer.from_pretrained(str(model_ref))
    loads = dict((pin or {}).get("loads") or {}) if loads is None else dict(loads)
    return held_tokenizer(folder, pin, loads, verified)


def held_tokenizer(folder: Path, pin: dict, loads: dict, verified: dict | None = None, what: str = "sampled"):
    """The tokenizer of `folder` loaded from ONE read of its non-weight files whose digest is the pin, kept in
    memory (verified_copy, no folder written), by private_copy.held_load: a fresh folder of exactly those bytes,
    watched while it loads; never a private folder read by path after it was written (round 19, b05/b06: a chat
    template planted there rendered every prompt). UserInputError naming what differs or was planted (nothing was
    `what`)."""
    from transformers import AutoTokenizer

    from mcp_server.inspection.loaded_weights import verified_copy
    from mcp_server.inspection.private_copy import PlantedFile, held_load

    verified = {} if verified is None else verified
    verified.update(files={}, pins={})
    problem = verified_copy(folder, model_content(pin), loads, None, verified["files"], verified["pins"])
    if problem is None:
        try:
            return held_load(verified["files"], AutoTokenizer.from_pretrained, prefix="llm-finetuning-pinned-")
        except PlantedFile as exc:
            problem = str(exc)
    raise UserInputError("model", f"{folder}'s tokenizer did not load as the bytes its pin recorded, so nothing "
                         f"was {what}: {problem}. Put its files back as they were; nothing may write into its "
                         "private copy while it loads. Then try again")

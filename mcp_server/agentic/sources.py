"""The inspection gate's pin of an agentic run: the environment's and the tools' source files with the local
modules they import (rewards.sources follows the imports), the timeout, the turn limit and the model's chat
template (the one TRL parses tool calls with). A change of any
file closes the gate and the change names the file."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
from pathlib import Path

from mcp_server.config import FIELD
from mcp_server.agentic.spec import AgenticRecord, split_path
from mcp_server.errors import UserInputError
from mcp_server.model_ref import cached_config_path, resolve_model
from mcp_server.rewards.sources import _origin, local_sources
from mcp_server.runs import Run
from mcp_server.userfiles import read_json
from mcp_server.workspace import sha256_file


@contextlib.contextmanager
def _on_path(root: str):
    added = root not in sys.path
    if added:
        sys.path.insert(0, root)
    try:
        yield
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(root)


def _chat_template(config: dict) -> str | None:
    """sha256 of the model's chat template (tokenizer_config.json's, else chat_template.jinja), from its local
    directory or the hub cache; None when neither is on disk."""
    model = str(config.get(FIELD.model_name_or_path) or "")
    try:
        ref = resolve_model(model)
    except UserInputError:
        return None
    folder = Path(ref) if Path(ref).is_dir() else Path(cached_config_path(ref) or "/nonexistent").parent
    config = folder / "tokenizer_config.json"
    try:
        template = json.loads(config.read_text(encoding="utf-8")).get("chat_template") if config.is_file() else None
    except (OSError, ValueError):
        template = None
    if template is None and (folder / "chat_template.jinja").is_file():
        template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    return None if template is None else hashlib.sha256(json.dumps(template).encode()).hexdigest()


def agentic_pin(run: Run, agentic: dict | None = None, config: dict | None = None) -> dict | None:
    """{'environment', 'tools', 'timeout_s', 'max_tool_calling_iterations', 'file <path>': sha256, ...}; None for
    a run without train/agentic.json. `agentic`, `config`: train/agentic.json and train/config.yaml as the caller
    read them (the trainer's RunSpec), else read here."""
    if agentic is None:
        if not run.agentic.is_file():
            return None
        agentic = read_json(run.agentic, "run", dict)
    record = AgenticRecord(**agentic)
    config = run.read_config() if config is None else config
    pin = {"environment": record.environment, "tools": record.tools, "timeout_s": record.timeout_s,
           "max_tool_calling_iterations": config.get(FIELD.max_tool_calling_iterations),
           "chat_template": _chat_template(config)}
    root = Path(record.source_root)
    with _on_path(str(root)):
        for text in filter(None, [record.environment, *record.tools]):
            module, _ = split_path(text, "environment")
            for name, _source in local_sources(module):
                if " " in name:  # "<module> (as it ran)": the files are pinned here (this process may hold an
                    continue  # older import: agentic.spec imports afresh what changed)
                path = _origin(name)
                if path is None:
                    continue
                shown = path.relative_to(root) if path.is_relative_to(root) else path
                pin[f"file {shown}"] = sha256_file(path)
        if len(pin) == 5:  # the module itself was not found: pin that
            pin["file"] = "missing"
    return pin

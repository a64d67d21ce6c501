"""The inspection gate's pin of an agentic run: the environment's and the tools' source files with the local
modules they import (rewards.sources follows the imports), the timeout and the turn limit. A change of any
file closes the gate and the change names the file."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from mcp_server.agentic.spec import AgenticRecord, split_path
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


def agentic_pin(run: Run) -> dict | None:
    """{'environment', 'tools', 'timeout_s', 'max_tool_calling_iterations', 'file <path>': sha256, ...}; None for
    a run without train/agentic.json."""
    if not run.agentic.is_file():
        return None
    record = AgenticRecord(**read_json(run.agentic, "run", dict))
    pin = {"environment": record.environment, "tools": record.tools, "timeout_s": record.timeout_s,
           "max_tool_calling_iterations": run.read_config().get("max_tool_calling_iterations")}
    root = Path(record.source_root)
    with _on_path(str(root)):
        for text in filter(None, [record.environment, *record.tools]):
            module, _ = split_path(text, "environment")
            for name, _source in local_sources(module):
                path = _origin(name)
                if path is None:
                    continue
                shown = path.relative_to(root) if path.is_relative_to(root) else path
                pin[f"file {shown}"] = sha256_file(path)
        if len(pin) == 4:  # the module itself was not found: pin that
            pin["file"] = "missing"
    return pin

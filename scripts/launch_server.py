#!/usr/bin/env python3
"""Start the llm-finetuning MCP server, building its light Python environment on the first start.

Every harness config starts this file with whatever `python3` it finds. Standard library only, so it runs
before anything is installed. The server's own environment holds only what its doors need (the package's
base dependencies: the MCP SDK, pydantic, jsonschema, pyyaml, psutil; no torch), so the first start takes
seconds: `uv venv` + `uv pip install` when uv is on PATH (about 1 s), else `python -m venv --without-pip`
and this Python's pip installing into it (7-8 s with wheels cached on a 2-core machine). Training, sampling and
TRL's checks run in the training interpreter instead (LLM_FINETUNING_PYTHON, or the environment the
prepare_environment tool builds), never inside a server start.

The environment lives in a per-user cache directory keyed by the requirement set and this Python, not by
the plugin's path, so every copy of the plugin (Codex and Gemini copy the folder) shares one; its lock and
install log sit beside it. Nothing is written into the plugin folder. The server runs with the plugin folder
on PYTHONPATH, so no install of the package itself is needed. Later starts find the environment ready (a
marker holding the fingerprint) and exec at once.

stdout belongs to the MCP protocol: nothing here writes to it, and installer output goes to stderr.

Environment variables:
  LLM_FINETUNING_VENV     where the server's environment lives (default: <user cache>/llm-finetuning/server-<key>):
                          a new or empty folder it builds in, one it built (OWNED in it), or the person's own
                          environment with the package's dependencies, used as it is and never written into
  LLM_FINETUNING_LAUNCH_DRY_RUN=1   print the plan to stderr and exit without installing or serving
  LLM_FINETUNING_LAUNCH_FRONT=0     a first start builds, then serves (by default it answers the harness at once
                                    from scripts/launch_front.py while the environment builds in the background)

`python3 scripts/launch_server.py --prepare` builds the environment ahead of time.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = ".llm-finetuning-ready"
OWNED = ".llm-finetuning-server-env"  # written first into a folder the launcher builds in: the build is its own
_NEW_FILE = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)  # never via a link


def say(message: str) -> None:
    print(f"llm-finetuning: {message}", file=sys.stderr, flush=True)


def requirements() -> list[str]:
    """The package's base dependencies, read from pyproject.toml (a regex: tomllib is 3.11+)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies\s*=\s*\[(.*?)\]", text, re.S | re.M)
    if not block:
        raise SystemExit("llm-finetuning: pyproject.toml has no [project] dependencies list")
    return re.findall(r'"([^"]+)"', re.sub(r"#[^\n]*", "", block.group(1)))


def fingerprint() -> str:
    """Changes with the requirement set and the Python that builds the environment, never with the
    plugin's path, so copies of the plugin share one environment."""
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    data = "\n".join(sorted(requirements()) + [sys.version, base])
    return hashlib.sha256(data.encode()).hexdigest()


def cache_dir() -> Path:
    if os.name == "nt":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local") / "llm-finetuning"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llm-finetuning"


def venv_dir() -> Path:
    if os.environ.get("LLM_FINETUNING_VENV"):
        return Path(os.environ["LLM_FINETUNING_VENV"]).expanduser().resolve()
    return cache_dir() / f"server-py{sys.version_info[0]}{sys.version_info[1]}-{fingerprint()[:12]}"


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def is_ready(venv: Path) -> bool:
    marker = venv / MARKER
    return (venv_python(venv).exists() and marker.is_file() and not marker.is_symlink() and not foreign(venv)
            and marker.read_text().strip() == fingerprint())


def write_file(path: Path, text: str) -> None:
    """Write `text` as a new file at `path`: whatever had its name (a link planted there) is removed, never
    written through."""
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, _NEW_FILE | os.O_EXCL, 0o644), "w", encoding="utf-8") as out:
        out.write(text)


def links_out(venv: Path) -> list[str]:
    """Links inside the environment that lead out of it, other than its interpreter's (bin/python*): an install
    over it would write through them."""
    found = []
    for top, dirs, files in os.walk(venv):
        for name in dirs + files:
            path = Path(top) / name
            if path.is_symlink() and not path.resolve().is_relative_to(venv.resolve()) and not (
                    path.parent == venv_python(venv).parent and name.lower().startswith("python")):
                found.append(str(path.relative_to(venv)))
    return found


def foreign(venv: Path) -> bool:
    """LLM_FINETUNING_VENV names something the launcher did not build and may not build in: neither new, nor an
    empty folder, nor one holding its OWNED marker (a plain file). Its default place is its own."""
    if not os.environ.get("LLM_FINETUNING_VENV") or not os.path.lexists(venv):
        return False
    if venv.is_symlink() or not venv.is_dir():
        return True
    return bool(os.listdir(venv)) and not ((venv / OWNED).is_file() and not (venv / OWNED).is_symlink())


def use_as_it_is(venv: Path) -> None:
    """The person's own environment (foreign): the launcher never installs into it, removes or marks it. It serves
    from it as it is when its Python has the package's dependencies (or a launcher marked it ready with this
    fingerprint: no check then, which would cost a start of its Python); otherwise it exits saying so."""
    marker = venv / MARKER
    if venv_python(venv).exists() and marker.is_file() and not marker.is_symlink() and (
            marker.read_text(errors="replace").strip() == fingerprint()):
        return
    names = sorted(os.listdir(venv)) if venv.is_dir() and not venv.is_symlink() else []
    held = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    check = ("import importlib.metadata as m, re, sys\nmissing = []\nfor r in sys.argv[1:]:\n"
             "    name = re.match(r'[A-Za-z0-9._-]+', r).group()\n    try:\n        m.version(name)\n"
             "    except m.PackageNotFoundError:\n        missing.append(r)\nprint(' '.join(missing))\n")
    try:
        proc = subprocess.run([str(venv_python(venv)), "-c", check, *requirements()], capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)
        problem = proc.stdout.strip() and f"it lacks {proc.stdout.strip()}" if proc.returncode == 0 else (
            f"its Python failed: {(proc.stderr.strip().splitlines() or ['exit ' + str(proc.returncode)])[-1]}")
    except (OSError, subprocess.SubprocessError) as exc:
        problem = f"it has no Python the launcher can run ({venv_python(venv)}: {exc})"
    if not problem:
        return
    yours = (f"install the package's dependencies into that environment yourself ({' '.join(requirements())}), or "
             if "pyvenv.cfg" in names else "")
    say(f"LLM_FINETUNING_VENV is {venv}, which this launcher did not build (it holds "
        f"{held or 'nothing: it is no folder'}; no {OWNED}), and {problem}. The launcher builds only in a new or empty "
        f"folder, or one it built, and never installs into, removes or marks another: {yours}set "
        "LLM_FINETUNING_VENV to a new folder, or unset it.")
    sys.exit(1)


def _pip_can_target(python: str) -> bool:
    """This Python's pip can install into another environment (`pip --python`, pip >= 22.3)."""
    try:
        out = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    match = re.match(r"pip (\d+)\.(\d+)", out)
    return bool(match) and (int(match.group(1)), int(match.group(2))) >= (22, 3)


def install_plans(venv: Path) -> list[list[list[str]]]:
    """Ways to build the environment, fastest first; each is a list of commands run in order, and a failing
    way falls back to the next. uv, when on PATH, builds it in about a second (pip takes 7-8 s on a 2-core
    machine with every wheel cached); uv does not read pip's configuration (a private index in pip.conf),
    so pip stays the fallback. pip's fast path: a venv without pip, filled by this Python's pip."""
    py, reqs = str(venv_python(venv)), requirements()
    plans = []
    uv = shutil.which("uv")
    if uv:
        plans.append([[uv, "venv", "--quiet", "--allow-existing", "--python", sys.executable, str(venv)],
                      [uv, "pip", "install", "--quiet", "--python", py, *reqs]])
    # --no-compile: bytecode is written on first import instead (halves the install time).
    quiet = ["--quiet", "--no-compile", "--disable-pip-version-check"]
    if _pip_can_target(sys.executable):
        plans.append([[sys.executable, "-m", "venv", "--without-pip", str(venv)],
                      [sys.executable, "-m", "pip", "--python", py, "install", *quiet, *reqs]])
    else:
        plans.append([[sys.executable, "-m", "venv", str(venv)], [py, "-m", "pip", "install", *quiet, *reqs]])
    return plans


def _resumable(venv: Path) -> bool:
    """An interrupted start (a harness that gave up and killed it) left an environment with its Python: the next
    start finishes that one (the install skips what is already there) instead of beginning again from nothing."""
    return venv_python(venv).exists() and not is_ready(venv) and not foreign(venv) and not links_out(venv)


def _run_plan(plan: list[list[str]], venv: Path, out, resume: bool = False) -> int:
    """Run one way, from an empty directory or, with `resume`, its install alone over the half-built
    environment; its exit code (0: built)."""
    if resume:
        say(f"resuming the environment an interrupted start left in {venv}")
        plan = plan[1:]  # the venv is there: only the install
    else:  # from nothing, in a folder marked as the launcher's own before anything else is written into it
        if foreign(venv):
            use_as_it_is(venv)
            raise SystemExit(f"llm-finetuning: {venv} is not the launcher's to build in")
        if os.path.lexists(venv):  # its own half-built environment a resume could not finish, or a failed way
            shutil.rmtree(venv)  # a link inside is removed, never followed
        venv.mkdir(parents=True)
        write_file(venv / OWNED, "built by llm-finetuning's scripts/launch_server.py\n")
    for cmd in plan:
        say("running: " + " ".join(cmd))
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        try:
            code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
        except OSError as exc:
            out.write(f"{exc}\n")
            code = 127
        if code != 0:
            return code
    return 0


def prepare(venv: Path) -> None:
    say(f"first start: building the server's light environment in {venv} (the MCP SDK, pydantic, jsonschema, "
        "pyyaml; no torch), once: about 3 s with uv, 6-10 s with pip on a quiet machine, up to a minute on a busy "
        "one (12-32 s seen at load 4-10); later starts take a second.")
    plans = install_plans(venv)
    if os.environ.get("LLM_FINETUNING_LAUNCH_DRY_RUN"):
        if _resumable(venv):
            say(f"would resume the half-built environment in {venv}: " + " ".join(plans[0][-1]))
        for cmd in plans[0]:
            say("would run: " + " ".join(cmd))
        for fallback in plans[1:]:
            say("if that fails, would run: " + " && ".join(" ".join(cmd) for cmd in fallback))
        return
    venv.parent.mkdir(parents=True, exist_ok=True)
    log = venv.parent / f"{venv.name}.install.log"
    with os.fdopen(os.open(log, _NEW_FILE | os.O_TRUNC, 0o644), "w", encoding="utf-8") as out:
        for number, plan in enumerate(plans, 1):
            code = _run_plan(plan, venv, out, resume=True) if _resumable(venv) else 1
            if code != 0:
                code = _run_plan(plan, venv, out)
            if code == 0:
                break
            if number < len(plans):
                say(f"{plan[-1][0]} failed (exit {code}); falling back to the next installer (log: {log})")
        else:
            out.flush()
            sys.stderr.write(log.read_text(encoding="utf-8", errors="replace")[-3000:])
            say(f"setup failed (exit {code}); the log is {log}. Fix the error above, or set "
                "LLM_FINETUNING_VENV to an environment with this package's dependencies, then restart.")
            sys.exit(code)
    compile_bytecode(venv)
    write_file(venv / MARKER, fingerprint() + "\n")
    say("server environment ready.")


def pycache(venv: Path) -> Path:
    """Where the server's bytecode lives (PYTHONPYCACHEPREFIX, set by server_env when the person has none): in the
    environment the launcher built, in its cache directory beside a person's own (never written into)."""
    own = venv / "pycache" if not foreign(venv) else cache_dir() / "pycache"
    return Path(os.environ.get("PYTHONPYCACHEPREFIX") or own)


def compile_bytecode(venv: Path) -> None:
    """Write the bytecode of everything the server imports at start into its cache once, as the environment is
    built (by importing the server module with bytecode writing on: the start that follows reads it, so this
    costs the first start little): a start with PYTHONDONTWRITEBYTECODE=1 (common in containers) then reads
    bytecode instead of compiling the MCP SDK and the rest every time (2x the start time). Best effort."""
    path = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "PYTHONPYCACHEPREFIX": str(pycache(venv))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    code = subprocess.run([str(venv_python(venv)), "-c", "import mcp_server.server"], env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    if code:
        say(f"writing the server's bytecode failed (exit {code}); it compiles as it imports")


def refresh_package_bytecode(venv: Path) -> None:
    """With PYTHONDONTWRITEBYTECODE=1 the server never writes bytecode: bring this package's (the plugin may
    have changed since the environment was built) up to date in its cache. A few ms when nothing changed."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or venv_python(venv).resolve() != Path(sys.executable).resolve():
        return  # bytecode is written as the server imports; or another Python would need its own
    import compileall

    sys.pycache_prefix = str(pycache(venv))
    try:
        compileall.compile_dir(str(ROOT / "mcp_server"), quiet=2)
    except OSError:
        pass


def _lock(venv: Path):
    """Two harness windows starting at once must not build the same environment together."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory lock; first starts rarely race there
        return None
    venv.parent.mkdir(parents=True, exist_ok=True)
    handle = os.fdopen(os.open(venv.parent / f"{venv.name}.lock", _NEW_FILE, 0o644), "w")
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def ensure(venv: Path) -> None:
    if is_ready(venv):
        return
    if os.environ.get("LLM_FINETUNING_LAUNCH_DRY_RUN"):
        prepare(venv)
        return
    lock = _lock(venv)
    try:
        if not is_ready(venv):  # another start may have built it while we waited for the lock
            prepare(venv)
    finally:
        if lock:
            lock.close()


def server_env(venv: Path) -> dict:
    env = {**os.environ, "LLM_FINETUNING_PLUGIN_ROOT": str(ROOT)}
    # The package runs from the plugin folder: no install into the shared environment.
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if not env.get("PYTHONPYCACHEPREFIX"):
        # Bytecode goes beside the environment, not into the plugin folder (and is kept: later starts are fast).
        # The training interpreter's processes drop this again (mcp_server.interpreter.training_env).
        env["PYTHONPYCACHEPREFIX"] = env["LLM_FINETUNING_SERVER_PYCACHE"] = str(pycache(venv))
    if not env.get("LLM_FINETUNING_WORKSPACE") and Path.cwd().resolve() == ROOT:
        project = project_dir()
        if project:
            env["LLM_FINETUNING_WORKSPACE"] = project
            say(f"workspace: {project}")
    return env


def project_dir() -> str | None:
    """The person's project when a harness starts us inside the plugin root (Codex can only express paths
    relative to the plugin: cwd "."), where runs do not belong. The inherited PWD names it, unless a shell
    on the way reset PWD (a pyenv shim is a bash script); then the harness's own working directory, read
    from /proc (Linux): every exec on the way keeps the harness as our parent."""
    candidates = [os.environ.get("PWD")]
    try:
        candidates.append(os.readlink(f"/proc/{os.getppid()}/cwd"))
    except OSError:  # not Linux, or not ours to read
        pass
    for candidate in candidates:
        if candidate and Path(candidate).is_dir() and Path(candidate).resolve() != ROOT:
            # as the person wrote it (links kept) but one slash a separator: a shell's PWD keeps "//" (issue 49's
            # seventh walk printed "workspace: /home/me//project")
            return os.path.normpath(candidate)
    return None


def first_start_front(venv: Path, python: str):
    """The front (scripts/launch_front.py) that answers the harness while the environment builds in the background,
    unless LLM_FINETUNING_LAUNCH_FRONT is 0 or its answers are missing; else None (the start builds, then serves)."""
    if os.environ.get("LLM_FINETUNING_LAUNCH_FRONT", "").strip() in ("0", "false", "no"):
        return None
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        import launch_front
    finally:
        sys.path.pop(0)
    answers = launch_front.load_answers()
    if answers is None:
        say("first start: scripts/first_answers.json is missing or unreadable; building the environment first")
        return None
    say(f"first start: answering the harness at once while the server's environment builds in {venv} in the "
        "background (the MCP SDK, pydantic, jsonschema, pyyaml; no torch): a tool call waits for it, about 3 s with "
        "uv, 6-10 s with pip on a quiet machine, up to two minutes on a busy one (its log: "
        f"{venv.parent / (venv.name + '.start.log')}); later starts take a second.")
    return launch_front.Front(answers, [sys.executable, str(Path(__file__).resolve()), "--prepare"],
                              [python, "-m", "mcp_server"], server_env(venv), say, lambda: is_ready(venv),
                              venv.parent / f"{venv.name}.start.log")


def main() -> None:
    venv = venv_dir()
    own = not foreign(venv)
    if not own:  # the person's own environment: served from as it is (or refused), never built in
        use_as_it_is(venv)
    if sys.argv[1:2] == ["--prepare"]:
        if own:
            ensure(venv)
        say(f"server environment ready in {venv}")
        return
    python = str(venv_python(venv))
    if own and not is_ready(venv) and not os.environ.get("LLM_FINETUNING_LAUNCH_DRY_RUN"):
        front = first_start_front(venv, python)
        if front is not None:
            sys.exit(front.run())
    if own:
        ensure(venv)
    if os.environ.get("LLM_FINETUNING_LAUNCH_DRY_RUN"):
        if not own or is_ready(venv):
            say(f"environment ready in {venv}{'' if own else ' (yours, used as it is)'}; would exec: {python} -m "
                "mcp_server")
        return
    refresh_package_bytecode(venv)
    args = [python, "-m", "mcp_server", *sys.argv[1:]]
    if os.name == "nt":
        sys.exit(subprocess.run(args, env=server_env(venv)).returncode)
    os.execve(python, args, server_env(venv))


if __name__ == "__main__":
    main()

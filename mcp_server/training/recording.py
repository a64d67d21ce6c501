"""The run's recipe recorded in git: launch_training and resume_training commit the files a launch runs from
(config, training script, rewards, launch script) when the run lives in a git repository, and the launch record
names the commit."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from mcp_server.runs import Run

GIT_TIMEOUT_S = 60
FALLBACK_IDENTITY = ("llm-finetuning", "llm-finetuning@localhost")


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """One git command that cannot wait on a person: no stdin, no credential prompt, a timeout (a hook or a
    signing agent that hangs reads as a failure, returncode 124)."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(exc.cmd, 124, "", f"timed out after {GIT_TIMEOUT_S}s")


def _git_identity(run_dir: Path) -> list[str]:
    """[] when git knows who commits (config, GIT_AUTHOR_*/GIT_COMMITTER_* or EMAIL); else `-c` options that
    complete the identity with llm-finetuning's own, keeping a user.name or user.email that is set."""
    if all(_git(["var", ident], run_dir).returncode == 0 for ident in ("GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT")):
        return []
    name = _git(["config", "user.name"], run_dir).stdout.strip() or FALLBACK_IDENTITY[0]
    email = _git(["config", "user.email"], run_dir).stdout.strip() or FALLBACK_IDENTITY[1]
    return ["-c", f"user.name={name}", "-c", f"user.email={email}"]


def record_in_git(run: Run, files: list[Path], message: str) -> str | None:
    """Commit the run's recipe files when the run lives in a git repository; the commit id (HEAD when they
    were already committed), or None (not a repo, git absent, the run is git-ignored, or git refused or hung).
    Without a git identity configured the commit is made as llm-finetuning <llm-finetuning@localhost>."""
    run_dir = run.dir
    if not shutil.which("git") or _git(["rev-parse", "--is-inside-work-tree"], run_dir).returncode != 0:
        return None
    paths = [str(f.resolve()) for f in files if f.exists()]
    if not paths or _git(["check-ignore", "-q", paths[0]], run_dir).returncode == 0:
        return None
    if _git(["add", "--", *paths], run_dir).returncode != 0:
        return None
    if _git(["diff", "--cached", "--quiet", "--", *paths], run_dir).returncode != 0:
        # --only: commit these paths and nothing else the person may have staged
        commit = [*_git_identity(run_dir), "commit", "-q", "-m", message, "--only", "--", *paths]
        if _git(commit, run_dir).returncode != 0:
            return None
    return _git(["rev-parse", "HEAD"], run_dir).stdout.strip() or None

"""The run's recipe recorded in git: launch_training and resume_training commit the files a launch runs from
(config, training script, rewards, launch script) when the run lives in a git repository, and the launch record
names the commit.

Git here runs nothing the workspace configures (issue 48, round 9, G4: the workspace's .git/hooks/pre-commit ran
between the launch gate and bash, rewrote train/launch.sh, the trainer and the data, and the run trained
unreviewed). The commit is made with plumbing alone (hash-object --no-filters, update-index --index-info on an
index of its own, write-tree, commit-tree, update-ref), never `git add` or `git commit`: no clean or smudge filter,
textconv or diff driver is ever chosen, no commit hook exists for it, no gc --auto follows. Every call also gets
GIT_OPTIONS (hooks from /dev/null, so reference-transaction and post-index-change find none; no fsmonitor; no
signing, so no gpg.program) and an environment without the launching shell's GIT_* variables (GIT_CONFIG_COUNT,
GIT_CONFIG_PARAMETERS, GIT_EXTERNAL_DIFF, GIT_DIR...) but its commit identity.

Only the workspace's own repository is written (issue 48, round 12, D4: `.git` in the workspace, a file naming
another repository's git directory, moved that repository's branch and rewrote its index): `foreign_repository`."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from mcp_server.runs import Run
from mcp_server.workspace import workspace_root

GIT_TIMEOUT_S = 60
FALLBACK_IDENTITY = ("llm-finetuning", "llm-finetuning@localhost")
# Command-line configuration outranks every config file (the repository's .git/config, its includes) and the
# environment's GIT_CONFIG_* entries, which are dropped anyway.
GIT_OPTIONS = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "commit.gpgSign=false",
               "-c", "gc.auto=0", "-c", "maintenance.auto=false", "-c", "core.pager=cat", "--no-pager"]
# The launching shell's GIT_* variables kept: who commits, and which of the person's config files git reads (what
# they set runs nothing here either: GIT_OPTIONS outrank them); every other GIT_* is dropped.
IDENTITY_ENV = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
                "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM")


def _git(args: list[str], cwd: Path, stdin: bytes | None = None, index: str | None = None
         ) -> subprocess.CompletedProcess:
    """One git command that cannot wait on a person and runs nothing configured: no stdin (or `stdin`'s bytes),
    no credential prompt, GIT_OPTIONS, no GIT_* of the launching shell but the identity, a timeout (returncode
    124). `index`: the index file it works on, else the repository's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in IDENTITY_ENV}
    env.update({"GIT_TERMINAL_PROMPT": "0", **({"GIT_INDEX_FILE": index} if index else {})})
    try:
        done = subprocess.run(["git", *GIT_OPTIONS, *args], cwd=cwd, capture_output=True, timeout=GIT_TIMEOUT_S,
                              input=stdin if stdin is not None else b"", env=env)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(exc.cmd, 124, "", f"timed out after {GIT_TIMEOUT_S}s")
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(errors="replace"),
                                       done.stderr.decode(errors="replace"))


def _git_identity(run_dir: Path) -> list[str]:
    """[] when git knows who commits (config, GIT_AUTHOR_*/GIT_COMMITTER_* or EMAIL); else `-c` options that
    complete the identity with llm-finetuning's own, keeping a user.name or user.email that is set."""
    if all(_git(["var", ident], run_dir).returncode == 0 for ident in ("GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT")):
        return []
    name = _git(["config", "user.name"], run_dir).stdout.strip() or FALLBACK_IDENTITY[0]
    email = _git(["config", "user.email"], run_dir).stdout.strip() or FALLBACK_IDENTITY[1]
    return ["-c", f"user.name={name}", "-c", f"user.email={email}"]


def _read_plain(path: Path) -> bytes | None:
    """The file's bytes, None for anything but a regular file (a link is never followed: its target could be any
    file of the user's, committed into the workspace's history)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read() if stat.S_ISREG(os.fstat(fd).st_mode) else None


def _entries(run_dir: Path, top: Path, files: list[Path]) -> list[str] | None:
    """`update-index --index-info` lines (mode, blob, path from the top) of the files, their bytes stored as they
    are (hash-object --no-filters: no clean filter runs); None when git refused one."""
    lines = []
    for file in files:
        data = _read_plain(file)
        if data is None:
            continue
        blob = _git(["hash-object", "-w", "--no-filters", "--stdin"], run_dir, stdin=data)
        if blob.returncode != 0:
            return None
        mode = "100755" if os.stat(file, follow_symlinks=False).st_mode & 0o111 else "100644"
        rel = os.path.relpath(os.path.realpath(file), top)
        lines.append(f"{mode} {blob.stdout.strip()}\t{rel}\n")
    return lines


def _filters_off(run_dir: Path) -> list[str] | None:
    """`-c` options that empty every filter driver git's config defines (clean, smudge, process; not required):
    git still consults the attributes when it writes the person's index (its racy-entry check re-reads a file
    through its clean filter), and an attribute naming an undefined driver runs nothing. None when a driver's name
    cannot be passed as `-c` (an '=' in it)."""
    keys = _git(["config", "--name-only", "--get-regexp", r"^filter\..*\.(clean|smudge|process|required)$"], run_dir)
    names = sorted({key.rsplit(".", 1)[0] for key in keys.stdout.splitlines() if key.strip()})
    if any("=" in name for name in names):
        return None
    return [option for name in names for part in ("clean=", "smudge=", "process=", "required=false")
            for option in ("-c", f"{name}.{part}")]


def _inside(path: str, root: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(root)


def foreign_repository(run_dir: Path, top: Path) -> str | None:
    """Why the repository git found for the run is not the workspace's own, None when it is: its git folders (the
    git directory, the common one, objects, index, refs) all lie inside the workspace; or it was found above the
    workspace (no `.git` inside it on the way up: nothing of the workspace chose it, the workspace lies in the
    person's repository); or the `.git` file at its top names a worktree that the repository itself registered
    there (its `gitdir` file names this `.git`, as `git worktree add` writes it)."""
    root = workspace_root()
    asked = ["--git-dir", "--git-common-dir", "--git-path", "objects", "--git-path", "index", "--git-path", "refs"]
    found = _git(["rev-parse", *asked], run_dir)  # each absolute or relative to run_dir
    folders = [os.path.join(run_dir, line) for line in found.stdout.splitlines()]
    if found.returncode != 0 or len(folders) != 5:
        return "git did not name the repository's folders"
    if all(_inside(folder, root) for folder in folders):
        return None
    gitdir, common = Path(os.path.realpath(folders[0])), Path(os.path.realpath(folders[1]))
    real = Path(os.path.realpath(run_dir))
    here = [p for p in (real, *real.parents) if p.is_relative_to(root)]
    if not any(os.path.lexists(p / ".git") for p in here) and not any(_inside(f, root) for f in folders):
        return None  # found above the workspace
    dotgit = top / ".git"
    registered = (gitdir.parent == common / "worktrees" and os.path.isfile(dotgit) and not os.path.islink(dotgit)
                  and _names(gitdir / "gitdir", dotgit))
    return None if registered else (
        f"{dotgit if os.path.lexists(dotgit) else top} leads to the git directory {gitdir}, outside the workspace "
        f"{root}, and that repository registered no worktree here: the recipe was not committed; "
        "to record it, make the workspace a repository (git init) or a worktree of yours (git worktree add)")


def _names(back: Path, dotgit: Path) -> bool:
    """Whether the worktree record `back` (the repository's own `gitdir` file) names `dotgit`."""
    try:
        return back.is_file() and os.path.realpath(back.read_text()[:4096].strip()) == os.path.realpath(dotgit)
    except (OSError, ValueError):
        return False


def record_in_git(run: Run, files: list[Path], message: str,
                  said: Callable[[str], None] | None = None) -> str | None:
    """Commit the run's recipe files when the run lives in a git repository; the commit id (HEAD when they
    were already committed), or None (not a repo, git absent, the run is git-ignored, or git refused or hung).
    Only these paths change in the commit and the index, whatever else the person staged (as `commit --only`).
    Without a git identity configured the commit is made as llm-finetuning <llm-finetuning@localhost>. A
    repository not the workspace's own is never written: why goes to `said` (a callable), and None is returned."""
    run_dir = run.dir
    if not shutil.which("git"):
        return None
    top = _git(["rev-parse", "--show-toplevel"], run_dir)
    paths = [f for f in files if f.exists()]
    off = _filters_off(run_dir) if top.returncode == 0 else None
    if off is None or not top.stdout.strip() or not paths:
        return None
    foreign = foreign_repository(run_dir, Path(os.path.realpath(top.stdout.strip())))
    if foreign:
        if said:
            said(foreign)
        return None
    if _git(["check-ignore", "-q", str(paths[0].resolve())], run_dir).returncode == 0:
        return None
    lines = _entries(run_dir, Path(os.path.realpath(top.stdout.strip())), paths)
    if not lines:
        return None
    listed = "".join(lines).encode()
    head = _git(["rev-parse", "-q", "--verify", "HEAD^{commit}"], run_dir).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="llm-finetuning-git-") as scratch:
        index = str(Path(scratch) / "index")
        if _git([*off, "read-tree", head or "--empty"], run_dir, index=index).returncode != 0 or \
                _git([*off, "update-index", "--add", "--index-info"], run_dir, listed, index).returncode != 0:
            return None
        tree = _git([*off, "write-tree"], run_dir, index=index).stdout.strip()
    if not tree:
        return None
    if head and tree == _git(["rev-parse", f"{head}^{{tree}}"], run_dir).stdout.strip():
        return head  # already committed as they are
    parent = ["-p", head] if head else []
    commit = _git([*off, *_git_identity(run_dir), "commit-tree", "--no-gpg-sign", tree, *parent, "-m", message],
                  run_dir).stdout.strip()
    if not commit or _git([*off, "update-ref", "-m", message, "HEAD", commit, head], run_dir).returncode != 0:
        return None
    _git([*off, "update-index", "--add", "--index-info"], run_dir, listed)  # the index as `commit --only` leaves it
    return commit

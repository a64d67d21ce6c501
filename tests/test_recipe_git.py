"""Issue 48, round 9, G4: the launch commits the run's recipe in the workspace's git repository, and that git ran
what the workspace configures: its .git/hooks/pre-commit ran between the launch gate and bash, rewrote
train/launch.sh, the trainer and the data, and the run trained what nobody reviewed. The table: every git door
that runs a configured command (hooks, a hooks folder, fsmonitor, filters, signing programs, config from the
launching shell's GIT_* variables) x the commit the launch makes (a repository with history, one without, the
recipe already committed) -> nothing of the workspace runs, and the commit holds the files' bytes as they are."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from mcp_server.runs import Run
from mcp_server.training.recording import record_in_git

HOOKS = ("pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "reference-transaction",
         "post-index-change", "pre-auto-gc")


def _script(path: Path, name: str, marks: Path, body: str = "") -> str:
    """An executable that leaves `marks/name` when it runs (then `body`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ntouch {marks}/{name}\n{body}")
    path.chmod(0o755)
    return str(path)


def _config(repo: Path, *pairs: str) -> None:
    for key, value in zip(pairs[::2], pairs[1::2]):
        subprocess.run(["git", "-C", str(repo), "config", key, value], check=True, env=_env())


def _env() -> dict:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
            "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def _hooks(repo, marks, monkeypatch):
    for hook in HOOKS:
        _script(repo / ".git" / "hooks" / hook, hook, marks)
    _config(repo, "gc.auto", "1", "gc.autoDetach", "false")


def _hooks_path(repo, marks, monkeypatch):
    for hook in HOOKS:
        _script(repo / "myhooks" / hook, hook, marks)
    _config(repo, "core.hooksPath", str(repo / "myhooks"))


def _included_hooks_path(repo, marks, monkeypatch):
    for hook in HOOKS:
        _script(repo / "myhooks" / hook, hook, marks)
    (repo / "more.gitconfig").write_text(f"[core]\n\thooksPath = {repo / 'myhooks'}\n")
    _config(repo, "include.path", str(repo / "more.gitconfig"))


def _fsmonitor(repo, marks, monkeypatch):
    _config(repo, "core.fsmonitor", _script(repo / "tools" / "fsmonitor", "fsmonitor", marks))


def _clean_filter(repo, marks, monkeypatch):
    (repo / ".gitattributes").write_text("* filter=evil diff=evil\n")
    _config(repo, "filter.evil.clean", _script(repo / "tools" / "clean", "clean", marks, "echo rewritten\n"),
            "filter.evil.smudge", _script(repo / "tools" / "smudge", "smudge", marks, "cat\n"))


def _process_filter(repo, marks, monkeypatch):
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text("* filter=lfsish\n")
    _config(repo, "filter.lfsish.process", _script(repo / "tools" / "process", "process", marks),
            "filter.lfsish.required", "true")


def _gpg_signing(repo, marks, monkeypatch):
    _config(repo, "commit.gpgSign", "true", "user.signingKey", "x",
            "gpg.program", _script(repo / "tools" / "gpg", "gpg", marks, "exit 1\n"))


def _ssh_signing(repo, marks, monkeypatch):
    _config(repo, "commit.gpgSign", "true", "gpg.format", "ssh", "user.signingKey", "key::x",
            "gpg.ssh.program", _script(repo / "tools" / "ssh-keygen", "ssh-keygen", marks, "exit 1\n"))


def _shell_config(repo, marks, monkeypatch):
    """The launching shell's GIT_CONFIG_COUNT entries: a hooks folder and an fsmonitor."""
    for hook in HOOKS:
        _script(repo / "myhooks" / hook, hook, marks)
    for i, (key, value) in enumerate([("core.hooksPath", str(repo / "myhooks")),
                                      ("core.fsmonitor", _script(repo / "tools" / "fsm", "fsmonitor", marks))]):
        monkeypatch.setenv(f"GIT_CONFIG_KEY_{i}", key)
        monkeypatch.setenv(f"GIT_CONFIG_VALUE_{i}", value)
    monkeypatch.setenv("GIT_CONFIG_COUNT", "2")


def _shell_parameters(repo, marks, monkeypatch):
    """GIT_CONFIG_PARAMETERS (what `git -c` passes to the git it runs) naming a pre-commit hook folder."""
    _script(repo / "myhooks" / "pre-commit", "pre-commit", marks)
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'core.hookspath'='{repo / 'myhooks'}'")


DOORS = {"hooks": _hooks, "core.hooksPath": _hooks_path, "include.path": _included_hooks_path,
         "core.fsmonitor": _fsmonitor, "clean filter": _clean_filter, "process filter": _process_filter,
         "gpg signing": _gpg_signing, "ssh signing": _ssh_signing, "GIT_CONFIG_COUNT": _shell_config,
         "GIT_CONFIG_PARAMETERS": _shell_parameters}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env=_env()).stdout.strip()


# A recipe already committed made no commit before either: a door that only a commit opens (its hooks, a signature)
# ran nothing there then, so that row would not fail without the fix and is left out.
ONLY_ON_COMMIT = {"core.hooksPath", "gpg signing", "ssh signing", "GIT_CONFIG_PARAMETERS"}
ROWS = [(door, history) for door in DOORS for history in ("with history", "no commit yet", "already committed")
        if not (history == "already committed" and door in ONLY_ON_COMMIT)]


@pytest.mark.slow
@pytest.mark.parametrize("door,history", ROWS)
def test_the_launch_commit_runs_nothing_the_workspace_configures(tmp_path, monkeypatch, door, history):
    repo, marks = tmp_path / "ws", tmp_path / "marks"
    marks.mkdir()
    _git(tmp_path, "init", "-q", str(repo))
    _config(repo, "user.name", "Ana", "user.email", "ana@example.org")
    train = repo / "runs" / "r1" / "train"
    train.mkdir(parents=True)
    files = {train / "config.yaml": "max_steps: 1\n", train / "launch.sh": "#!/bin/bash\necho gated\n"}
    for path, text in files.items():
        path.write_text(text)
    (train / "launch.sh").chmod(0o755)
    (repo / "notes.txt").write_text("the person's own work\n")
    if history != "no commit yet":
        _git(repo, "add", "notes.txt")
        _git(repo, "commit", "-q", "-m", "init")
    if history == "already committed":
        _git(repo, "add", "runs")
        _git(repo, "commit", "-q", "-m", "recipe")
    (repo / "notes.txt").write_text("staged, not the launch's\n")
    _git(repo, "add", "notes.txt")
    for var in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM"):
        monkeypatch.setenv(var, _env()[var])
    monkeypatch.setenv("LLM_FINETUNING_WORKSPACE", str(repo))  # the workspace's own repository
    before = _git(repo, "rev-parse", "-q", "--verify", "HEAD") if history != "no commit yet" else ""
    DOORS[door](repo, marks, monkeypatch)

    commit = record_in_git(Run(train.parent), list(files), "llm-finetuning: launch r1")

    assert sorted(p.name for p in marks.iterdir()) == []  # nothing the workspace configured ran
    assert commit == _git(repo, "rev-parse", "HEAD")
    assert (commit == before) == (history == "already committed")
    for path, text in files.items():  # the bytes as they are: no clean filter chose what was committed
        assert _git(repo, "show", f"{commit}:{path.relative_to(repo)}") + "\n" == text
    assert _git(repo, "ls-tree", commit, "runs/r1/train/launch.sh").startswith("100755")
    assert _git(repo, "diff", "--cached", "--name-only", "--no-ext-diff") == "notes.txt"  # the person's staging kept


# ---------------------------------------------------------------- round 12, D4: whose repository is written
# Issue 48, round 12, D4: `.git` in the workspace, a file naming another repository's git directory, made the launch
# commit there (that repository's branch moved, its index rewritten). The table: each way a workspace leads git to a
# repository -> whether the recipe is committed, and that a repository not the workspace's is left as it was.
def _outside_gitfile(ws, outside):
    (ws / ".git").write_text(f"gitdir: {outside / '.git'}\n")


def _gitfile_in_runs(ws, outside):
    _git(ws.parent, "init", "-q", str(ws))
    (ws / "runs" / ".git").write_text(f"gitdir: {outside / '.git'}\n")


def _linked_git_folder(ws, outside):
    (ws / ".git").symlink_to(outside / ".git")


def _commondir_outside(ws, outside):
    """A git folder of the workspace's whose `commondir` names the other repository's (as a worktree's does)."""
    _git(ws.parent, "init", "-q", str(ws))
    (ws / ".git" / "commondir").write_text(f"{outside / '.git'}\n")


def _unregistered_worktree(ws, outside):
    """The other repository's worktree folder for another path, named by the workspace's .git file."""
    _git(outside, "worktree", "add", "-q", str(ws.parent / "elsewhere"))
    (ws / ".git").write_text(f"gitdir: {outside / '.git' / 'worktrees' / 'elsewhere'}\n")


def _own_repository(ws, outside):
    _git(ws.parent, "init", "-q", str(ws))


def _registered_worktree(ws, outside):
    """The workspace is a worktree of the person's repository (git worktree add): its commit lands on its branch."""
    moved = ws.parent / "ws-files"
    ws.rename(moved)
    _git(outside, "worktree", "add", "-q", "-b", "ws-branch", str(ws))
    for item in moved.iterdir():
        item.rename(ws / item.name)


def _enclosing_repository(ws, outside):
    """The workspace is a folder of the person's repository, found above it."""
    _git(ws.parent, "init", "-q", str(ws.parent))


SHAPES = {"a .git file naming another repository": (_outside_gitfile, False),
          "a .git file in runs/": (_gitfile_in_runs, False),
          ".git a link to another repository's": (_linked_git_folder, False),
          "commondir naming another repository's": (_commondir_outside, False),
          "another path's worktree": (_unregistered_worktree, False),
          "the workspace's own repository": (_own_repository, True),
          "a worktree the repository registered": (_registered_worktree, True),
          "a repository enclosing the workspace": (_enclosing_repository, True)}


def _state(repo: Path) -> tuple:
    """What a commit into `repo` would change: every ref, HEAD, the index's bytes, the objects' count."""
    git = repo / ".git"
    index = git / "index"
    return (_git(repo, "for-each-ref", "--format=%(refname) %(objectname)"), _git(repo, "rev-parse", "HEAD"),
            index.read_bytes() if index.exists() else b"", sum(1 for _ in (git / "objects").rglob("*")))


@pytest.mark.slow
@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_launch_commits_only_into_the_workspaces_own_repository(tmp_path, monkeypatch, shape):
    base = tmp_path / "home"
    ws, outside = base / "ws", tmp_path / "outside"
    train = ws / "runs" / "r1" / "train"
    train.mkdir(parents=True)
    (train / "config.yaml").write_text("max_steps: 1\n")
    _git(tmp_path, "init", "-q", str(outside))
    _config(outside, "user.name", "Ana", "user.email", "ana@example.org")
    (outside / "notes.txt").write_text("the person's own work\n")
    _git(outside, "add", "notes.txt")
    _git(outside, "commit", "-q", "-m", "the person's own history")
    for var in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM"):
        monkeypatch.setenv(var, _env()[var])
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Ana")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "ana@example.org")
    make, recorded = SHAPES[shape]
    make(ws, outside)
    monkeypatch.setenv("LLM_FINETUNING_WORKSPACE", str(ws))
    before = _state(outside)
    said = []

    commit = record_in_git(Run(train.parent), [train / "config.yaml"], "llm-finetuning: launch r1", said.append)

    assert bool(commit) == recorded, said
    if recorded:
        assert commit == _git(train, "rev-parse", "HEAD") and not said
        assert _git(train, "show", f"{commit}:./config.yaml") == "max_steps: 1"
    else:
        assert _state(outside) == before  # the other repository as it was: refs, HEAD, index, objects
        assert len(said) == 1 and "outside the workspace" in said[0] and "not committed" in said[0], said

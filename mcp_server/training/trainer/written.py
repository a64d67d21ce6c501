"""Every folder of a run that the run writes into (the launchers, the trainer, its libraries and trackers, the
archive flags), declared once (WRITTEN). The launch and resume gate's link and hard-link checks
(launch_gates.link_refusals) and the trainer's own check of its trackers' folder (tracker_dirs.py, beside it) are
generated from this list, so a new write target is checked by adding its row here, and tests/test_run_tampering.py
holds a row per target (round 19, b01: report_to's trackers/ was written through a link, since no check named it).
Light: the run layout only, as the training scripts import it before TRL."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from mcp_server.errors import UserInputError, one_line
from mcp_server.runs import Run
from mcp_server.userfiles import not_regular


@dataclass(frozen=True)
class Written:
    """A folder the run writes into: `member`, Run's name of it ("output_dir": the config's, when inside the run);
    `entries`: whether files are written in place at any depth under it (then every entry is refused as a
    symbolic link, a second name of a file or a pipe), else only renamed in (the folder itself is refused as a
    link); `by`: who writes there."""

    member: str
    entries: bool
    by: str


WRITTEN = (
    Written("train", False, "launch_training: launch.sh, launch.slurm, accelerate.yaml, each renamed in"),
    Written("logs", True, "train/launch.sh and the trainer: stdout, exit code, progress, saves, the markers"),
    Written("cache", True, "train/launch.sh's library caches, the trainer's datasets cache and vLLM weights"),
    Written("trackers", True, "report_to's trackers: mlflow.db, wandb/, trackio/ (tracker_dirs.py, beside it)"),
    Written("output_dir", True, "the trainer's checkpoints, TRL's completions, tensorboard's runs/"),
    Written("archive", False, "archive_previous and a resume's patch (run_archive: moved in through descriptors)"),
)


def written_paths(run: Run, config: dict | None = None) -> list[tuple[Written, Path]]:
    """Each declared target with its path in `run`; the output_dir is the config's (read here when not given;
    checkpoints/ for a config that cannot be read), and left out when it is not inside the run (the config gate
    refuses that: foreign_output_dir)."""
    found = []
    for target in WRITTEN:
        if target.member != "output_dir":
            found.append((target, getattr(run, target.member)))
            continue
        try:
            out = run.output_dir(run.read_config() if config is None else config)
        except UserInputError:
            out = run.checkpoints
        if os.path.abspath(out).startswith(os.path.abspath(run.dir) + os.sep):
            found.append((target, out))
    return found


def linked(run: Run, targets: list[tuple[Written, Path]]) -> list[Path]:
    """The symbolic links among the targets themselves and, under those written in place, among their entries at
    any depth (never walked through a link: a target under a linked one is refused by that one)."""
    links = [path for _, path in targets if path.is_symlink()]
    for target, path in targets:
        if target.entries and not any(link in path.parents for link in links):
            links += [p for p in entries(path) if p.is_symlink()]
    return links


def written_through(info: os.stat_result) -> str | None:
    """What an entry (its lstat) is when a write to its name would land elsewhere than a file of the run's own:
    'link' (a symbolic link), 'special' (no regular file and no folder: a pipe, a socket, a device), 'shared' (a
    regular file with another name, st_nlink > 1); None for a folder or a file of one name. The launch gate (shared,
    linked) and the trainer's saves (digest.refuse_save_through) judge entries by this one test."""
    if stat.S_ISLNK(info.st_mode):
        return "link"
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        return "special"
    return "shared" if stat.S_ISREG(info.st_mode) and info.st_nlink > 1 else None


def shared(run: Run, targets: list[tuple[Written, Path]]) -> list[str]:
    """Entries under the targets written in place that are a second name of a file (st_nlink > 1: `ln ~/.bashrc
    train/logs/stdout.log` had the resumed training's output appended to it) or no regular file and no folder (a
    pipe, a device, a socket), each named with what it is."""
    found = []
    for path in [p for target, folder in targets if target.entries for p in entries(folder)]:
        try:
            mode = path.lstat()
        except OSError:
            continue
        kind = written_through(mode)
        if kind == "shared":
            found.append(f"{one_line(str(path.relative_to(run.dir)))}: a hard link, {mode.st_nlink} names of one file")
        elif kind == "special":
            found.append(f"{one_line(str(path.relative_to(run.dir)))}: {not_regular(path) or 'not a regular file'}")
    return found


def entries(folder: Path) -> list[Path]:
    """Every entry under `folder` at any depth, sorted, links never followed; [] when it is no folder (or a link)."""
    if folder.is_symlink() or not folder.is_dir():
        return []
    found = []
    for root, dirs, files in os.walk(folder):
        found += [Path(root) / name for name in dirs + files]
    return sorted(found)


def written_problems(run: Run, targets: list[tuple[Written, Path]]) -> tuple[list[Path], list[str]]:
    """(the links, the shared entries) under `targets`: the second only looked for when there is no link."""
    links = linked(run, targets)
    return links, ([] if links else shared(run, targets))

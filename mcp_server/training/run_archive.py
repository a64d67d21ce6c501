"""archive/<kind>-<n>/, where an archive flag moves a run's files aside (launch_training's earlier attempt,
export_model's earlier export) and a resume's patch keeps the launched config: reached only through directory
descriptors, each folder opened without following a link (O_NOFOLLOW | O_DIRECTORY), and every move a rename
between two such descriptors (renameat). Round 19 (b02, b04): archive/ was checked once, before the gates or the
export's load, then used tens of seconds later by path; a link planted there meanwhile moved the run's record,
logs, checkpoints and export out of the workspace. Now a link at archive/ (or on the way to what moves) is refused
when it is used, before anything moves, and one planted after that is never followed: the folders are held open."""

from __future__ import annotations

import contextlib
import errno
import os
from itertools import count
from pathlib import Path

from mcp_server.errors import UserInputError, one_line
from mcp_server.runs import Run

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class ArchiveRefused(UserInputError):
    """A folder on the way (archive/ or one holding what moves) is a symbolic link or no folder: nothing moved."""

    def __init__(self, path: Path):
        self.said = (f"{one_line(str(path))} is a symbolic link or not a folder of the run: nothing is archived "
                     "through it (the run's record, logs, checkpoints and export would leave the run); replace it "
                     "with a directory, or remove it")
        super().__init__("run", self.said)


def _open(parent: int, name: str, shown: Path, make: bool = False) -> int:
    """The folder `name` under the descriptor `parent`, opened without following a link (made first when `make`)."""
    if make:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o777, dir_fd=parent)
    try:
        return os.open(name, _DIR, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
            raise ArchiveRefused(shown) from None
        raise


class ArchiveSlot:
    """A new archive/<kind>-<n>/ of `run`, made and held open (a context manager: the descriptors close on exit)."""

    def __init__(self, run: Run, kind: str):
        self.run, self._fds = run, []
        try:
            self._make(kind)
        except BaseException:
            self.__exit__()
            raise

    def _make(self, kind: str) -> None:
        run = self.run
        self.root = self._hold(os.open(run.dir, _DIR))
        self.made_archive = not os.path.lexists(run.archive)
        self.archive = self._hold(_open(self.root, "archive", run.archive, make=True))
        for n in count(1):  # mkdir never follows a link: a name taken (by anything) is passed over
            try:
                os.mkdir(f"{kind}-{n}", 0o777, dir_fd=self.archive)
            except FileExistsError:
                continue
            self.name = f"{kind}-{n}"
            break
        self.slot = self._hold(_open(self.archive, self.name, run.archive / self.name))
        self.path = run.archive / self.name

    def _hold(self, fd: int) -> int:
        self._fds.append(fd)
        return fd

    def __enter__(self) -> ArchiveSlot:
        return self

    def __exit__(self, *exc) -> None:
        for fd in reversed(self._fds):
            os.close(fd)
        self._fds = []

    def _folder(self, top: int, parts: tuple[str, ...], shown: Path, make: bool) -> int:
        fd = top
        for i, part in enumerate(parts):
            fd = self._hold(_open(fd, part, shown.joinpath(*parts[:i + 1]), make=make))
        return fd

    def move_in(self, paths: list[Path]) -> list[Path]:
        """Each of `paths` (the run's, relative to it) that is there renamed to the same place under the slot; every
        folder on the way is opened before the first move, so a link there refuses them all (ArchiveRefused) and
        nothing has moved. The paths moved, as they were named."""
        moves = []
        try:
            for path in paths:
                rel = Path(path).relative_to(self.run.dir).parts
                source = self._folder(self.root, rel[:-1], self.run.dir, make=False) if rel[:-1] else self.root
                try:
                    os.lstat(rel[-1], dir_fd=source)
                except FileNotFoundError:
                    continue
                target = self._folder(self.slot, rel[:-1], self.path, make=True) if rel[:-1] else self.slot
                moves.append((path, source, target, rel[-1]))
        except ArchiveRefused:  # nothing moved: the slot made for it goes (its empty folders, through descriptors)
            self._empty(self.slot)
            with contextlib.suppress(OSError):
                os.rmdir(self.name, dir_fd=self.archive)
                if self.made_archive:
                    os.rmdir("archive", dir_fd=self.root)
            raise
        for _, source, target, name in moves:
            os.rename(name, name, src_dir_fd=source, dst_dir_fd=target)
        return [path for path, *_ in moves]

    def _empty(self, fd: int) -> None:
        """Remove the empty folders under the descriptor `fd` (what move_in made before a refusal)."""
        for name in os.listdir(fd):
            with contextlib.suppress(OSError):
                inner = os.open(name, _DIR, dir_fd=fd)
                try:
                    self._empty(inner)
                finally:
                    os.close(inner)
                os.rmdir(name, dir_fd=fd)

    def become(self, path: Path) -> Path:
        """The folder `path` (the run's) renamed to be the slot itself (archive/export-<n>/ is the earlier export/):
        over the empty folder made for it, which a rename replaces only while it is an empty folder."""
        rel = Path(path).relative_to(self.run.dir).parts
        source = self._folder(self.root, rel[:-1], self.run.dir, make=False) if rel[:-1] else self.root
        os.rename(rel[-1], self.name, src_dir_fd=source, dst_dir_fd=self.archive)
        return self.path

    def write(self, name: str, text: str) -> Path:
        """A new file `name` in the slot, created there (O_EXCL | O_NOFOLLOW: never through a link) with `text`."""
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                     dir_fd=self.slot)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        return self.path / name


def remove_slot(run: Run, name: str, files: list[str], made_archive: bool) -> None:
    """Undo a slot `name` that holds only `files` (a resume's kept config when a later gate refused): they, the
    slot, and archive/ when the slot made it, removed through descriptors opened afresh without following a link
    (a link planted at archive/ since is left alone: nothing outside is removed)."""
    fds = [os.open(run.dir, _DIR)]
    try:
        fds.append(_open(fds[0], "archive", run.archive))
        fds.append(_open(fds[1], name, run.archive / name))
        for file in files:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(file, dir_fd=fds[2])
        with contextlib.suppress(OSError):
            os.rmdir(name, dir_fd=fds[1])
        if made_archive:
            with contextlib.suppress(OSError):
                os.rmdir("archive", dir_fd=fds[0])
    except ArchiveRefused:
        pass
    finally:
        for fd in reversed(fds):
            os.close(fd)

"""Private copies the tools load from, and proof that what loaded from one is the verified bytes (round 18).

The trainer's tokenizer, promote's and export's checkpoint load from a private copy of verified files made in a
mkdtemp folder of $TMPDIR (loaded_weights.verified_copy). Any process of the user can write into that folder: a
racer planted a file there that the load read (an extra chat template, special_tokens_map.json, an
adapter_config.json: transformers loads every file it finds), or a symbolic link the copy wrote through (a file
outside the workspace overwritten). So:

- `write_private` writes each file of a copy with O_CREAT|O_EXCL|O_NOFOLLOW, each folder on its way opened without
  following a link: a planted file or link is refused (PlantedFile), never truncated or written through;
- what loaded is checked in memory after the load, against the verified files: a model's tensors by
  loaded_weights.saved_weight_problems (every parameter, no extra module), a tokenizer's effective state
  (`tokenizer_state`: backend JSON, chat templates, special tokens and ids, sides, model_max_length) against the
  same state of a tokenizer loaded by `held_load` from the verified bytes held in memory.

`held_load` writes the bytes into a fresh folder (each file read-only, created here), watches every folder and file
of it (inotify), checks the tree is exactly those bytes (no other name, one link each, no writer open: a read
lease), then loads through /proc/self/fd/N (the folder's inode: a rename of the folder changes nothing) and refuses
when any watch saw a change during the load. Where inotify or /proc is missing (not Linux) only the tree checks
before and after the load run.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import struct
import tempfile
from pathlib import Path, PurePosixPath

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
# IN_MODIFY IN_ATTRIB IN_CLOSE_WRITE IN_MOVED_FROM IN_MOVED_TO IN_CREATE IN_DELETE IN_DELETE_SELF IN_MOVE_SELF
_CHANGES = 0x2 | 0x4 | 0x8 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800
_DONT_FOLLOW, _OVERFLOW = 0x02000000, 0x4000
_SETLEASE = getattr(fcntl, "F_SETLEASE", 1024)


class PlantedFile(ValueError):
    """A private copy's file or folder was there before the copy wrote it (planted), or is a link."""


def _relative_parts(relative: str) -> tuple[str, ...]:
    parts = PurePosixPath(relative).parts
    if not parts or relative.startswith("/") or any(p in (".", "..") for p in parts):
        raise PlantedFile(f"{relative!r} is not a path inside the private copy")
    return parts


def _open_folder(root_fd: int, parts: tuple[str, ...], where: str, make: bool = True) -> int:
    """The folder `parts` below `root_fd` (made when absent), each step opened without following a link."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            if make:
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass  # made for an earlier file, or planted: opened below without following a link
            try:
                step = os.open(part, _FOLDER, dir_fd=fd)
            except OSError as exc:
                raise PlantedFile(f"{where}/{part} is a link or not a folder ({exc.strerror}): planted") from exc
            os.close(fd)
            fd = step
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_private(root: str | Path | int, relative: str, data: bytes | None = None, link: str | None = None,
                  mode: int = 0o600) -> None:
    """`data` written at `relative` under `root` (a folder path or an open folder fd), created here: never an
    existing file truncated nor a link followed (O_CREAT|O_EXCL|O_NOFOLLOW), each folder on the way opened without
    following a link; `link`: a symbolic link to that path made instead. PlantedFile, naming it, when something is
    there already."""
    parts = _relative_parts(relative)
    root_fd = root if isinstance(root, int) else os.open(root, _FOLDER)
    try:
        fd = _open_folder(root_fd, parts[:-1], str(root))
        try:
            if link is not None:
                os.symlink(link, parts[-1], dir_fd=fd)
                return
            out = os.open(parts[-1], _CREATE, mode, dir_fd=fd)
        except FileExistsError as exc:
            raise PlantedFile(f"{relative} was in the private copy {root} before the copy wrote it (planted by "
                              "another process): nothing was written through it") from exc
        except OSError as exc:
            raise PlantedFile(f"{relative} in the private copy {root} could not be created ({exc.strerror}): "
                              "a link or a file planted there") from exc
        finally:
            os.close(fd)
        with os.fdopen(out, "wb") as handle:
            handle.write(data or b"")
    finally:
        if not isinstance(root, int):
            os.close(root_fd)


class _Watch:
    """inotify watches on every folder and file of a tree (Linux; elsewhere none: `changes` says nothing)."""

    def __init__(self, base: str, names: list[str]):
        self.fd = -1
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            self.fd = libc.inotify_init1(os.O_NONBLOCK | _CLOEXEC)
        except (OSError, AttributeError):
            return
        if self.fd < 0:
            return
        for name in ["", *names]:  # the folder itself through its /proc/self/fd link (followed), the rest not
            path, follow = (f"{base}/{name}", _DONT_FOLLOW) if name else (base, 0)
            if libc.inotify_add_watch(self.fd, path.encode(), _CHANGES | follow) < 0:
                self.close()
                raise PlantedFile(f"{name or 'the folder'} of the private copy could not be watched")

    def changes(self) -> list[str]:
        if self.fd < 0:
            return []
        found, data = [], b""
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
        at = 0
        while at + 16 <= len(data):
            _, mask, _, length = struct.unpack_from("iIII", data, at)
            name = data[at + 16:at + 16 + length].rstrip(b"\0").decode(errors="replace")
            at += 16 + length
            found.append("the watch overflowed" if mask & _OVERFLOW else f"{name or 'a watched file'} ({mask:#x})")
        return found

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.fd = -1


def _tree_problems(root_fd: int, files: dict[str, bytes]) -> list[str]:
    """Why the tree under `root_fd` is not exactly `files` (each a regular file, one link, no writer, its bytes)."""
    problems, folders = [], {()}
    for relative in files:
        parts = _relative_parts(relative)
        folders.update(parts[:i] for i in range(1, len(parts)))
    for folder in sorted(folders):
        fd = _open_folder(root_fd, folder, "", make=False)
        try:
            for name in os.listdir(fd):
                relative = "/".join((*folder, name))
                if relative not in files and tuple(relative.split("/")) not in folders:
                    problems.append(f"{relative} (not a verified file) is in the private copy")
        finally:
            os.close(fd)
    for relative, data in files.items():
        problems += _file_problems(root_fd, relative, data)
    return problems


def _file_problems(root_fd: int, relative: str, data: bytes) -> list[str]:
    parts = _relative_parts(relative)
    folder = _open_folder(root_fd, parts[:-1], "", make=False)
    try:
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | _CLOEXEC, dir_fd=folder)
    except OSError as exc:
        return [f"{relative} of the private copy is gone or a link ({exc.strerror})"]
    finally:
        os.close(folder)
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1:
            return [f"{relative} of the private copy is not the one file written ({found.st_nlink} links)"]
        try:  # a read lease is refused while any descriptor or mapping can write the file
            fcntl.fcntl(fd, _SETLEASE, fcntl.F_RDLCK)
            fcntl.fcntl(fd, _SETLEASE, fcntl.F_UNLCK)
        except OSError as exc:
            if exc.errno in (11, 13):  # EAGAIN, EACCES: open for writing somewhere
                return [f"{relative} of the private copy is open for writing by another process"]
        read, chunks = 0, []
        while chunk := os.pread(fd, 1 << 24, read):
            chunks.append(chunk)
            read += len(chunk)
        return [] if b"".join(chunks) == data else [f"{relative} of the private copy is not the verified bytes"]
    finally:
        os.close(fd)


def held_load(files: dict[str, bytes], load, prefix: str = "llm-finetuning-held-"):
    """`load(folder)` run on a fresh private folder holding exactly `files` ({relative: bytes}), each created
    read-only here, the folder and every file watched while it loads (module doc). PlantedFile naming what
    changed, or was there, when the tree was not exactly those bytes before, during or after the load."""
    folder = tempfile.mkdtemp(prefix=prefix)
    try:
        root = os.open(folder, _FOLDER)
        try:
            for relative, data in sorted(files.items()):
                write_private(root, relative, data, mode=0o400)
            base = f"/proc/self/fd/{root}" if os.path.isdir(f"/proc/self/fd/{root}") else folder
            dirs = sorted({"/".join(_relative_parts(r)[:i]) for r in files for i in range(1, len(_relative_parts(r)))})
            watch = _Watch(base, dirs + sorted(files))
            try:
                problems = _tree_problems(root, files)
                result = None if problems else load(base)
                problems = problems or watch.changes() or _tree_problems(root, files)
            finally:
                watch.close()
        finally:
            os.close(root)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if problems:
        raise PlantedFile(f"the private copy {folder} changed while it loaded: {'; '.join(problems[:4])}")
    return result


# Keys of a tokenizer's init kwargs that name where it loaded from, not what it is.
_PATH_KWARGS = frozenset({"name_or_path", "vocab_file", "merges_file", "tokenizer_file", "spm_file",
                          "is_local", "local_files_only", "cache_dir", "_commit_hash",
                          "special_tokens_map_file", "added_tokens_file", "tokenizer_config_file"})


def _text(value) -> str:
    """JSON of `value`; an object JSON has no form for by its str, less any memory address (the same in any load)."""
    return json.dumps(value, sort_keys=True, default=lambda o: re.sub(r" at 0x[0-9a-fA-F]+", "", str(o)))


def tokenizer_state(loaded) -> dict[str, str]:
    """The effective state of a loaded tokenizer or processor, {part: sha256}: its class, backend tokenizer JSON,
    chat template(s), special tokens with their ids, added tokens, padding and truncation sides, model_max_length
    and its other init kwargs (the path-valued ones left out)."""
    tok = getattr(loaded, "tokenizer", None) or loaded
    backend = getattr(tok, "backend_tokenizer", None)
    special = {name: [str(value), tok.convert_tokens_to_ids(str(value))] if isinstance(value, str) else
               [str(v) for v in value] for name, value in (getattr(tok, "special_tokens_map", None) or {}).items()}
    added = {str(i): str(t) for i, t in (getattr(tok, "added_tokens_decoder", None) or {}).items()}
    kwargs = {k: v for k, v in (getattr(tok, "init_kwargs", None) or {}).items()
              if k not in _PATH_KWARGS and k != "added_tokens_decoder"}
    parts = {"class": type(loaded).__name__ + "/" + type(tok).__name__,
             "backend tokenizer": backend.to_str() if backend is not None else "",
             "chat template": _text([getattr(loaded, "chat_template", None), getattr(tok, "chat_template", None)]),
             "special tokens": _text(special), "added tokens": _text(added),
             "padding and truncation side": _text([getattr(tok, "padding_side", None),
                                                   getattr(tok, "truncation_side", None)]),
             "model_max_length": _text(getattr(tok, "model_max_length", None)), "init kwargs": _text(kwargs)}
    return {part: hashlib.sha256(value.encode()).hexdigest() for part, value in parts.items()}


def tokenizer_problems(loaded, verified) -> list[str]:
    """The parts of `loaded`'s effective state that are not `verified`'s (a tokenizer loaded from the verified
    bytes by held_load); empty when it is that tokenizer."""
    mine, theirs = tokenizer_state(loaded), tokenizer_state(verified)
    differ = [part for part in theirs if mine.get(part) != theirs[part]]
    return [f"the tokenizer as loaded is not the verified files' ({', '.join(differ)} differ: a file planted or "
            "changed in its private copy while it loaded)"] if differ else []


def configs_read(model, folder: Path) -> tuple[dict[str, tuple[str, int]], list[str]]:
    """config.json and generation_config.json, each read once and compared with the model's config in memory (the
    JSON its save_pretrained writes: to_json_string(use_diff=True)); a PEFT save writes neither."""
    read, problems = {}, []
    for name, config in (("config.json", getattr(model, "config", None)),
                         ("generation_config.json", getattr(model, "generation_config", None))):
        path = folder / name
        if not hasattr(config, "to_json_string") or not path.is_file():
            continue
        data = path.read_bytes()
        try:
            same = json.loads(data) == json.loads(config.to_json_string(use_diff=True))
        except (ValueError, RecursionError):
            same = False
        if not same:
            problems.append(f"{name}: not the model's {name.removesuffix('.json').replace('_', ' ')} in memory")
        read[name] = (hashlib.sha256(data).hexdigest(), len(data))
    return read, problems


# The names a tokenizer's or processor's save_pretrained writes, besides its vocabulary files (vocab_files_names)
# and additional_chat_templates/.
TOKENIZER_FILES = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "tokenizer.json",
                   "chat_template.jinja", "chat_template.json", "processor_config.json", "preprocessor_config.json")


def tokenizer_read(tokenizer, folder: Path) -> tuple[dict[str, tuple[str, int]], list[str]]:
    """The save's tokenizer files, each read once, loaded back from those bytes (private_copy.held_load: a private
    folder watched while it loads) and compared with the trainer's tokenizer in memory by its effective state
    (private_copy.tokenizer_state: backend, chat templates, special tokens, sides, init kwargs): a file replaced or
    planted as the save wrote them (another chat template, special tokens map) is named (digest.record_save,
    export's staging)."""
    if tokenizer is None:
        return {}, []
    inner = getattr(tokenizer, "tokenizer", None) or tokenizer
    names = {*TOKENIZER_FILES, *(getattr(inner, "vocab_files_names", None) or {}).values()}
    paths = sorted(p for p in folder.rglob("*") if p.is_file() and (p.name in names and p.parent == folder or (
        p.parent.name == "additional_chat_templates" and p.parent.parent == folder)))
    held = {p.relative_to(folder).as_posix(): p.read_bytes() for p in paths}
    if not held:
        return {}, []
    read = {name: (hashlib.sha256(data).hexdigest(), len(data)) for name, data in held.items()}
    remote = not type(tokenizer).__module__.startswith("transformers.")  # as the trainer loaded it

    def load(private):
        from transformers import AutoProcessor

        return AutoProcessor.from_pretrained(private, trust_remote_code=remote)
    try:
        loaded = held_load(held, load)
        mine, saved = tokenizer_state(tokenizer), tokenizer_state(loaded)
    except PlantedFile as exc:
        return read, [f"the tokenizer files: {exc}"]
    except Exception as exc:  # noqa: BLE001 - files that load as no tokenizer are not the one in memory
        return read, [f"the tokenizer files ({', '.join(held)}) do not load back ({type(exc).__name__}: {exc})"]
    differ = [part for part in mine if mine[part] != saved.get(part)]
    if "init kwargs" in differ and _kwargs_as_saved(tokenizer, loaded):
        differ.remove("init kwargs")
    return read, [f"the tokenizer files ({', '.join(held)}): not the tokenizer in memory "
                  f"({', '.join(differ)} differ)"] if differ else []


def _kwargs_as_saved(memory, loaded) -> bool:
    """Whether `loaded`'s init kwargs are `memory`'s as its save_pretrained writes them: its init kwargs with its
    current attributes over them (a padding side or pad token set after it loaded is saved, and loaded back as an
    init kwarg)."""
    mem, got = (getattr(t, "tokenizer", None) or t for t in (memory, loaded))

    def plain(tok) -> dict:
        return {k: v for k, v in (getattr(tok, "init_kwargs", None) or {}).items()
                if k not in _PATH_KWARGS and k != "added_tokens_decoder"}
    mine, theirs = plain(mem), plain(got)
    for key in theirs:
        now = getattr(mem, key, mine.get(key))
        mine[key] = mine.get(key) if callable(now) else now
    return _text(mine) == _text(theirs)

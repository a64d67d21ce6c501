"""Reading files a person or an agent can hand us or edit (a config, a run's sidecar files): every way a read can
fail (missing, a directory, unreadable, not UTF-8, not JSON/YAML, the wrong shape, a name too long) becomes a
UserInputError that names the input and the file, never a bare exception."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from mcp_server.errors import CLOSE_NAMES, UserInputError, closest_names, did_you_mean, short

# libyaml's safe loader when PyYAML has it: the same YAML, faster, and a too-deep file fails at once (the pure-Python
# loader takes seconds to reach its RecursionError on 5,000 nested brackets).
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a pipe (FIFO)"), (stat.S_ISCHR, "a device"),
          (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


def not_regular(path: str | Path) -> str | None:
    """What `path` is when something is there but no regular file (a link followed): 'a pipe (FIFO)', 'a directory',
    'a device', 'a socket', 'a link to nothing'; None for a regular file or for nothing there."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "a link to nothing" if os.path.islink(path) else None
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    return None if stat.S_ISREG(mode) else next((what for test, what in _KINDS if test(mode)), "not a file")


class NotRegularFile(OSError):
    """open_regular's refusal: the path is there but is no regular file (str() names the file and what it is)."""

    def __str__(self) -> str:
        return str(self.strerror)


# The most a reader takes of a file it reads whole (a config, run.json, a request, a record, a review): more is
# refused, naming the file and its size, before a byte is read (round 17, b07: a sparse 2 GiB run.json, 0 bytes on
# disk, made list_runs hold 4.2 GiB). A reader that reads in bounded pieces (a hash, a log's tail) asks for no bound.
WHOLE_READ_BYTES = 64 << 20


def open_regular(path: str | Path, mode: str | None = None, limit: int | None = WHOLE_READ_BYTES, **options):
    """`path` opened for reading only when it is a regular file: a FIFO blocks the open or the first read forever,
    a device may never end (/dev/zero), a directory reads nothing. The one way a reader of a person's or a run's
    files opens them (issue 48): a FIFO swapped in between the look and the open is caught on the descriptor
    (opened without blocking, then checked). Text when given an `encoding`, else bytes. A file over `limit` bytes
    (WHOLE_READ_BYTES; None for a reader that reads in bounded pieces) is refused too, judged on the descriptor
    (a sparse file's size, not its blocks). Raises NotRegularFile naming the file and what it is, or the open's
    OSError (FileNotFoundError when nothing is there)."""
    def refuse(what: str) -> NotRegularFile:
        return NotRegularFile(errno.EINVAL, f"{short(path)} is {what}, not a regular file")

    what = not_regular(path)
    if what:
        raise refuse(what)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise refuse(not_regular(path) or "no longer a regular file")
        if limit is not None and found.st_size > limit:
            raise NotRegularFile(errno.EFBIG, f"{short(path)} is {found.st_size:,} bytes, over the {limit:,} "
                                 "bytes a file read whole may hold: not read (a sparse or runaway file? the tools "
                                 "write it far smaller)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, mode or ("r" if "encoding" in options else "rb"), **options)
    except BaseException:
        os.close(fd)
        raise


BLANK = b"\0 \t\r\n"  # what a content end skips: whitespace and NUL runs (a sparse hole reads as NULs)


def data_after(handle, offset: int) -> int:
    """The first offset at or after `offset` that may hold data: a sparse hole (`truncate -s +3G`) is skipped
    without reading it (SEEK_DATA); `offset` itself where the system cannot say. The file's size when only a hole
    follows."""
    try:
        return _probe(handle, offset, os.SEEK_DATA)
    except OSError as exc:  # ENXIO: no data after offset; EINVAL and others: no answer, read on
        return os.fstat(handle.fileno()).st_size if exc.errno == errno.ENXIO else offset
    except AttributeError:  # no SEEK_DATA here
        return offset


def _probe(handle, offset: int, whence: int) -> int:
    """os.lseek(offset, whence) on `handle`'s descriptor, its position put back: the buffered file object keeps
    its own idea of where the descriptor stands."""
    fd = handle.fileno()
    here = os.lseek(fd, 0, os.SEEK_CUR)
    try:
        return os.lseek(fd, offset, whence)
    finally:
        os.lseek(fd, here, os.SEEK_SET)


def content_end(handle, size: int, chunk: int = 1 << 20) -> int:
    """The offset just after the last byte of `handle` (an open binary file of `size` bytes) that is neither
    whitespace nor NUL: trailing holes are skipped by SEEK_DATA, written NUL runs read back in `chunk`-sized
    pieces, so memory stays bounded whatever the file holds. 0 when it holds nothing else."""
    end, start = 0, 0
    while start < size:  # the end of the last data extent (one step for a file without holes)
        at = data_after(handle, start)
        if at >= size:
            break
        try:
            end = _probe(handle, at, os.SEEK_HOLE)
        except (OSError, AttributeError):
            end = size
        start = max(end, at + 1)
    while end > 0:
        begin = max(0, end - chunk)
        handle.seek(begin)
        kept = handle.read(end - begin).rstrip(BLANK)
        if kept:
            return begin + len(kept)
        end = begin
    return 0


def last_lines(handle, size: int, span: int, line_limit: int) -> tuple[list[tuple[int, bytes]], int]:
    """The non-blank lines of the last `span` bytes before the content end of `handle` (content_end: a trailing
    hole or NUL run is read past, not loaded), as (offset, line), and how many were over `line_limit` (skipped).
    A line cut by the span's start is left out."""
    end = content_end(handle, size)
    span = min(span, end)
    handle.seek(end - span)
    data, offset = handle.read(span), end - span
    if span < end:
        cut = data.find(b"\n") + 1
        data, offset = data[cut:], offset + cut
    found, skipped = [], 0
    for raw in data.split(b"\n"):
        if len(raw) > line_limit:
            skipped += 1
        elif raw.strip(BLANK):
            found.append((offset, raw))
        offset += len(raw) + 1
    return found, skipped


def read_bytes(path: str | Path, field: str) -> bytes:
    try:
        with open_regular(path) as handle:
            return handle.read()
    except NotRegularFile as exc:
        raise UserInputError(field, str(exc)) from None
    except OSError as exc:
        nearby = _files_nearby(path) if exc.errno == errno.ENOENT else ""
        raise UserInputError(field, f"cannot read {short(path)}: {exc.strerror or exc}"
                             + (f".{nearby}" if nearby else "")) from None


def _files_nearby(path: str | Path) -> str:
    """" Did you mean 'rewards.json'?" for a missing file whose folder holds files of a near name (walk 13:
    `--graders @rewardz.json` said only "No such file or directory"); "" else."""
    path = Path(path)
    try:
        with os.scandir(path.parent) as entries:
            names = [e.name for _, e in zip(range(CLOSE_NAMES), entries) if e.is_file()]
    except OSError:
        return ""
    return did_you_mean([n if path.parent == Path(".") else str(path.with_name(n))
                         for n in closest_names(path.name, names)])


def decode(data: bytes, path: str | Path, field: str) -> str:
    """UTF-8 text with universal newlines (as Path.read_text gives it)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserInputError(field, f"{short(path)} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def read_text(path: str | Path, field: str) -> str:
    return decode(read_bytes(path, field), path, field)


def read_json(path: str | Path, field: str, kind: type | None = None, with_sha256: bool = False) -> Any:
    """The file's JSON value; with `kind` (dict or list), refused unless it is one. `with_sha256`: (value, sha256
    of the bytes it was parsed from), from one read."""
    data = read_bytes(path, field)
    text = decode(data, path, field)
    if with_sha256:
        return _parse_json(text, path, field, kind), hashlib.sha256(data).hexdigest()
    return _parse_json(text, path, field, kind)


def _parse_json(text: str, path: str | Path, field: str, kind: type | None = None) -> Any:
    """read_json for a text already read from `path`."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UserInputError(field, f"{short(path)} is not valid JSON: {exc}") from None
    except RecursionError:
        raise UserInputError(field, f"{short(path)} nests JSON too deeply to read") from None
    return _of_kind(value, kind, path, field, "JSON")


def read_yaml(path: str | Path, field: str, kind: type | None = dict) -> Any:
    """The file's YAML value (an empty file reads as an empty mapping); by default it must be a mapping."""
    return parse_yaml(read_text(path, field), path, field, kind)


# Round 15, M2: a 1.2 KB config of nested anchors and aliases ("billion laughs") expands to 10^7 values: seconds to
# minutes in every reader (the gate's pins and messages, TRL's parse) and gigabytes. Every YAML the tools read (a
# config, a rewritten config checked before it is written) goes through parse_yaml: aliases adding more values
# than this are refused.
YAML_ALIAS_VALUES = 10_000


def refuse_alias_bomb(text: str, path: str | Path, field: str) -> None:
    """UserInputError(`field`) naming the file and the line when the YAML's aliases (`*name`) would add more than
    YAML_ALIAS_VALUES values once expanded; read as parse events (linear in the text, nothing expanded). A text
    that does not parse is left to the load, which says where."""
    sizes: dict[str, int] = {}
    stack: list[list] = []  # [values so far, anchor] per open sequence or mapping
    added = 0
    try:
        for event in yaml.parse(text, Loader=SAFE_LOADER):
            size = None
            if isinstance(event, yaml.AliasEvent):
                size = sizes.get(event.anchor, 1)
                added += size
                if added > YAML_ALIAS_VALUES:
                    raise UserInputError(field, f"{short(path)} line {event.start_mark.line + 1}: its YAML aliases "
                                         f"(*{event.anchor}) expand to more than {YAML_ALIAS_VALUES:,} values (an "
                                         "alias bomb?): write the values out, or remove the anchors (&) and aliases")
            elif isinstance(event, yaml.ScalarEvent):
                size = 1
                if event.anchor:
                    sizes[event.anchor] = 1
            elif isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                stack.append([1, event.anchor])
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)) and stack:
                size, anchor = stack.pop()
                if anchor:
                    sizes[anchor] = size
            if size is not None and stack:
                stack[-1][0] += size
    except yaml.YAMLError:
        return


def parse_yaml(text: str, path: str | Path, field: str, kind: type | None = dict) -> Any:
    """read_yaml for a text already read from `path` (aliases bounded: refuse_alias_bomb)."""
    refuse_alias_bomb(text, path, field)
    try:
        value = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        raise UserInputError(field, f"{short(path)} is not valid YAML: {yaml_problem(exc)}") from None
    except RecursionError:
        raise UserInputError(field, f"{short(path)} nests YAML too deeply to read") from None
    return _of_kind({} if value is None and kind is dict else value, kind, path, field, "YAML")


def yaml_problem(exc: yaml.YAMLError) -> str:
    """What is wrong with a YAML text and where, without the text itself: PyYAML's message quotes the lines around
    the problem, which for a file that is no config (a key file, /etc/shadow) would echo its content."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{getattr(exc, 'problem', None) or type(exc).__name__}{where}"


CONFIG_SUFFIXES = (".yaml", ".yml")


def require_yaml_name(path: Path, field: str) -> None:
    """A config is a .yaml or .yml file, by its name and by what a link points at: anything else (a key, a password
    file) is refused before a byte is read, so no finding can echo its content (its lines as unknown fields)."""
    for name in (path, Path(os.path.realpath(path))):
        if name.suffix.lower() not in CONFIG_SUFFIXES:
            raise UserInputError(field, f"{short(path)} is not a YAML config (a .yaml or .yml file): give the run's "
                                        "train/config.yaml or its run directory")


def _of_kind(value: Any, kind: type | None, path, field: str, language: str) -> Any:
    if kind is not None and not isinstance(value, kind):
        want = "a mapping of fields" if kind is dict else "a list"
        raise UserInputError(field, f"{short(path)} must hold {want} in {language}, got {type(value).__name__}")
    return value


def load_config_file(path: str | Path, field: str = "config_path") -> dict:
    """A TrlParser YAML config's fields as a dict; `field` names the input in errors."""
    data = read_config_file(path, field)
    data.pop("env", None)  # TrlParser's environment block, not a field
    return data


PACKAGE_ENV_PREFIX = "LLM_FINETUNING_"


def package_switches(config: dict) -> list[str]:
    """This package's variables a config's `env:` block sets (TrlParser exports the block into the trainer's
    environment before anything else runs): none belongs in a config (issue 48)."""
    env = config.get("env")
    return sorted(str(k) for k in env if str(k).startswith(PACKAGE_ENV_PREFIX)) if isinstance(env, dict) else []


def read_config_file(path: str | Path, field: str = "config_path", with_sha256: bool = False):
    """A TrlParser YAML config's mapping as written (its `env:` block too); `field` names the input in errors.
    `with_sha256`: (mapping, sha256 of the bytes it was parsed from), from one read."""
    path = Path(path)
    if not path.is_file():
        what = "no such file" if not path.exists() else "not a regular file"
        raise UserInputError(field, f"{what}: {short(path)}; give the run's YAML config (train/config.yaml)")
    require_yaml_name(path, field)
    if not with_sha256:
        return read_yaml(path, field)
    data = read_bytes(path, field)
    return parse_yaml(decode(data, path, field), path, field), hashlib.sha256(data).hexdigest()


def read_json_if_present(path: Path, kind: type = dict):
    """A JSON file another process writes (run.json, a log marker): None when missing, unreadable, half-written or
    not of `kind` (a JSON object by default), which for these files means 'not (yet) there'."""
    try:
        with open_regular(path, encoding="utf-8") as handle:  # a pipe put there would block forever
            value = json.loads(handle.read())
    except (OSError, ValueError, RecursionError):
        return None
    return value if isinstance(value, kind) else None


def sha256_file(path: Path) -> str:
    """The file's sha256; a pipe or a device put where a pinned file was is refused (NotRegularFile, an OSError),
    never read (it would block the gate forever, or never end)."""
    digest = hashlib.sha256()
    with open_regular(path, limit=None) as handle:  # read in pieces
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------- a run's review files: whose are they?
REVIEW_SHEET_TITLE = "# Reward review: "  # review.md's first line, as inspect_rewards writes it (review_sheet.py)
REVIEW_FILES = ("review.md", "review.jsonl", "review.json")  # in a run's inspection/


def _sha256(path: Path) -> str | None:
    try:
        return sha256_file(path)
    except OSError:
        return None


def _review_rows(path: Path) -> bool:
    """Whether review.jsonl holds only rows of the form inspect_rewards writes (an object with id and scores)."""
    try:
        with open_regular(path, encoding="utf-8") as handle:
            rows = [json.loads(line) for line in handle.read().splitlines() if line.strip()]
    except (OSError, ValueError, RecursionError):
        return False
    return all(isinstance(r, dict) and "id" in r and isinstance(r.get("scores"), dict) for r in rows)


def foreign_review_files(inspection: Path) -> list[str]:
    """The review files in a run's `inspection/` folder that inspect_rewards did not write, each named with why
    (issue 48, round 8: a person's own inspection/review.md was replaced by the generated sheet, no copy kept):
    review.json that is not its record ({result, reviewed_ids}); review.md that is neither the sheet review.json
    records (its sha256) nor one beginning with the sheet's title (the sheet, edited: inspect_rewards again
    replaces it, as the gate's refusal of an edited sheet says); review.jsonl neither the rows review.json records
    nor rows of its form; anything there that is no regular file. An empty file holds nothing to lose. [] when
    each is absent or inspect_rewards'."""
    record = read_json_if_present(inspection / "review.json")
    ours = isinstance(record, dict) and isinstance(record.get("result"), dict) and isinstance(
        record.get("reviewed_ids"), list)
    recorded = record if ours else {}

    def sheet(path: Path) -> bool:
        try:
            with open_regular(path) as handle:
                first = handle.read(len(REVIEW_SHEET_TITLE.encode()))
        except OSError:
            return False
        return first == REVIEW_SHEET_TITLE.encode() or _sha256(path) == recorded.get("review_md_sha256")

    checks = {"review.json": (lambda path: ours, "not the record inspect_rewards writes"),
              "review.md": (sheet, "not the sheet inspect_rewards writes (your own notes?)"),
              "review.jsonl": (lambda path: _sha256(path) == recorded.get("review_jsonl_sha256") or
                               _review_rows(path), "not the rows inspect_rewards writes")}
    found = []
    for name in REVIEW_FILES:
        path = inspection / name
        what = not_regular(path)
        if what:
            found.append(f"{path} ({what}: inspect_rewards writes a file there)")
        elif path.is_file() and path.stat().st_size and not checks[name][0](path):
            found.append(f"{path} ({checks[name][1]})")
    return found

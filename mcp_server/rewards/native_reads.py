"""Reads that Python's "open" audit event does not name by path, made to name it (reads.py records them).

- `os.open(name, flags, dir_fd=d)`: the event carries `name`, relative to a folder it does not name (issue 48,
  round 11: a rubric opened so was pinned as a file of the working folder). While a recording is in force,
  os.open resolves such a name against the folder `d` holds and opens that path: the same file, named.
- Native readers read in C, C++ or Rust with no audit event at all (round 11: `torch.from_file`; pyarrow,
  safetensors and tokenizers alike). Those in NATIVE_READERS are wrapped, once their module is imported, to raise
  the "open" event for each path they are given (a folder: every file under it, and its listings, walked here for
  the reward: read_frames.made_by_user) before they read; every binding of the original in an imported module
  (`from safetensors import safe_open`) is replaced too. A native reader not in the table is not seen:
  tests/test_reward_reads_native.py holds a row per entry, and one per change to a folder it takes.
"""

from __future__ import annotations

import functools
import os
import sys

# (module, attribute path) of each reader by path that reads with no audit event, where its library is installed.
# tests/test_reward_reads_native.py derives from the installed pyarrow, pandas and polars every public callable that
# takes a path, and fails on one with no row (recorded here, through Python's open, or not a read of a path).
NATIVE_READERS = (
    ("torch", "from_file"), ("torch", "UntypedStorage.from_file"),
    ("safetensors", "safe_open"), ("safetensors.torch", "load_file"), ("safetensors.numpy", "load_file"),
    ("tokenizers", "Tokenizer.from_file"),
    ("pyarrow", "memory_map"), ("pyarrow", "input_stream"), ("pyarrow", "OSFile"),
    ("pyarrow.parquet", "read_table"), ("pyarrow.parquet", "read_metadata"), ("pyarrow.parquet", "read_schema"),
    ("pyarrow.parquet", "ParquetFile.__init__"), ("pyarrow.csv", "read_csv"), ("pyarrow.csv", "open_csv"),
    ("pyarrow.json", "read_json"), ("pyarrow.feather", "read_table"), ("pyarrow.ipc", "open_file"),
    ("pyarrow.ipc", "open_stream"), ("pyarrow.ipc", "RecordBatchFileReader.__init__"),
    ("pyarrow.ipc", "RecordBatchStreamReader.__init__"), ("pyarrow.json", "open_json"),
    ("pyarrow.feather", "read_feather"), ("pyarrow.feather", "FeatherDataset.__init__"),
    ("pyarrow.dataset", "dataset"), ("pyarrow.dataset", "parquet_dataset"),
    ("pyarrow.parquet", "ParquetDataset.__init__"), ("pyarrow.orc", "read_table"), ("pyarrow.orc", "ORCFile.__init__"),
    ("pyarrow.fs", "copy_files"),
)
# Readers given one file that read the files of its folder too: pyarrow.dataset.parquet_dataset('d/_metadata') reads
# the data files `_metadata` lists, beside it.
READS_ITS_FOLDER = frozenset({("pyarrow.dataset", "parquet_dataset")})
PATH_KEYWORDS = ("filename", "path", "source", "where", "input_file", "file", "f", "path_or_paths", "metadata_path")
_WRAPPED: dict[tuple[str, str], object] = {}  # (module, attribute) -> the wrapper in place
_OS_OPEN = os.open
_RECORDINGS: list = []  # reads._ACTIVE, handed over by install(): the recordings in force


def _open_at(path, flags, mode=0o777, *, dir_fd=None):
    """os.open, a name relative to `dir_fd` opened by its whole path while a recording is in force."""
    if dir_fd is not None and _RECORDINGS and not isinstance(path, int) and not os.path.isabs(os.fsdecode(path)):
        try:
            path, dir_fd = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), os.fsdecode(path)), None
        except OSError:
            pass
    return _OS_OPEN(path, flags, mode, dir_fd=dir_fd)


def _paths(args, kwargs) -> list[str]:
    """The paths a reader call names: its first argument or a path keyword, a str or PathLike or a list of them."""
    given = args[0] if args else next((kwargs[k] for k in PATH_KEYWORDS if k in kwargs), None)
    out = []
    for item in given if isinstance(given, (list, tuple)) else [given]:
        if isinstance(item, (str, bytes, os.PathLike)):
            path = os.path.abspath(os.fsdecode(item))
            if os.path.isdir(path):
                out += [os.path.join(top, name) for top, _, names in os.walk(path) for name in sorted(names)]
            else:
                out.append(path)
    return out


def _wrap(original, method: bool, folder: bool = False):
    @functools.wraps(original)
    def reader(*args, **kwargs):
        if _RECORDINGS:
            paths = _paths(args[1:] if method else args, kwargs)
            for path in _paths((sorted({os.path.dirname(p) for p in paths}),), {}) if folder else paths:
                sys.audit("open", path, "r", 0)
        return original(*args, **kwargs)

    return reader


def install(recordings: list) -> None:
    """os.open made to name its file; each native reader whose module is imported wrapped (once); `recordings`:
    the recordings in force (reads.py's), a file is named only while one is."""
    global _RECORDINGS
    _RECORDINGS = recordings
    if os.open is not _open_at:
        os.open = _open_at
    for module, attribute in NATIVE_READERS:
        if (module, attribute) in _WRAPPED or module not in sys.modules:
            continue
        owner = sys.modules[module]
        *parents, name = attribute.split(".")
        for parent in parents:
            owner = getattr(owner, parent, None)
        original = getattr(owner, name, None)
        if original is None:
            continue
        wrapper = _wrap(original, method=name == "__init__", folder=(module, attribute) in READS_ITS_FOLDER)
        try:
            setattr(owner, name, staticmethod(wrapper) if parents and name != "__init__" else wrapper)
        except (AttributeError, TypeError):  # a type that takes no attributes: left as it is
            continue
        _WRAPPED[module, attribute] = wrapper
        if not parents:
            _rebind(original, wrapper)


def _rebind(original, wrapper) -> None:
    """Every module-level name bound to `original` (a `from module import reader` done before) now the wrapper."""
    for module in list(sys.modules.values()):
        names = getattr(module, "__dict__", None)
        if not isinstance(names, dict):
            continue
        for key, value in list(names.items()):
            if value is original:
                names[key] = wrapper

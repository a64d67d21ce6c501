"""Issue 48, round 11: a native reader (C, C++, Rust: no audit event of its own) names what a reward reads with it.

The table: every entry of rewards.native_reads.NATIVE_READERS (a reader without a row fails
test_every_native_reader_has_a_row) x a reward module in the workspace that reads a file through it, called inside
a recording: the file is recorded (so the verdict pins it, and the trainer checks it: the end-to-end rows, through
inspect, verdict, gate and trainer, are `torch.from_file` and the others in test_reward_reads_every_audit_event.py).
A second row binds the reader at the module's import (`from pyarrow.parquet import read_table`), as a library does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_server.rewards import reads
from mcp_server.rewards.dotted import import_dotted
from mcp_server.rewards.native_reads import NATIVE_READERS


def _bytes(folder: Path) -> Path:
    (folder / "a.bin").write_bytes(bytes(range(16)))
    return folder / "a.bin"


def _safetensors(folder: Path) -> Path:
    import safetensors.torch
    import torch

    safetensors.torch.save_file({"x": torch.zeros(2)}, folder / "a.safetensors")
    return folder / "a.safetensors"


def _tokenizer(folder: Path) -> Path:
    from tokenizers import Tokenizer, models

    Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")).save(str(folder / "tokenizer.json"))
    return folder / "tokenizer.json"


def _table():
    import pyarrow

    return pyarrow.table({"x": [1, 2]})


def _parquet(folder: Path) -> Path:
    import pyarrow.parquet

    pyarrow.parquet.write_table(_table(), folder / "a.parquet")
    return folder / "a.parquet"


def _csv(folder: Path) -> Path:
    (folder / "a.csv").write_text("x\n1\n2\n")
    return folder / "a.csv"


def _jsonl(folder: Path) -> Path:
    (folder / "a.jsonl").write_text("".join(json.dumps({"x": i}) + "\n" for i in (1, 2)))
    return folder / "a.jsonl"


def _feather(folder: Path) -> Path:
    import pyarrow.feather

    pyarrow.feather.write_feather(_table(), folder / "a.feather")
    return folder / "a.feather"


def _ipc(folder: Path, stream: bool) -> Path:
    import pyarrow

    path = folder / ("a.arrows" if stream else "a.arrow")
    table = _table()
    with (pyarrow.ipc.new_stream if stream else pyarrow.ipc.new_file)(str(path), table.schema) as writer:
        writer.write_table(table)
    return path


# (module, attribute) -> (the file it reads, the reward's line that reads PATH through it)
ROWS = {
    ("torch", "from_file"): (_bytes, "torch.from_file(PATH, size=16, dtype=torch.uint8)"),
    ("torch", "UntypedStorage.from_file"): (_bytes, "torch.UntypedStorage.from_file(PATH, False, 16)"),
    ("safetensors", "safe_open"): (_safetensors, "list(safetensors.safe_open(PATH, 'pt').keys())"),
    ("safetensors.torch", "load_file"): (_safetensors, "safetensors.torch.load_file(PATH)"),
    ("safetensors.numpy", "load_file"): (_safetensors, "safetensors.numpy.load_file(PATH)"),
    ("tokenizers", "Tokenizer.from_file"): (_tokenizer, "tokenizers.Tokenizer.from_file(PATH)"),
    ("pyarrow", "memory_map"): (_bytes, "pyarrow.memory_map(PATH).read()"),
    ("pyarrow", "input_stream"): (_bytes, "pyarrow.input_stream(PATH).read()"),
    ("pyarrow", "OSFile"): (_bytes, "pyarrow.OSFile(PATH).read()"),
    ("pyarrow.parquet", "read_table"): (_parquet, "pyarrow.parquet.read_table(PATH)"),
    ("pyarrow.parquet", "read_metadata"): (_parquet, "pyarrow.parquet.read_metadata(PATH)"),
    ("pyarrow.parquet", "read_schema"): (_parquet, "pyarrow.parquet.read_schema(PATH)"),
    ("pyarrow.parquet", "ParquetFile.__init__"): (_parquet, "pyarrow.parquet.ParquetFile(PATH).read()"),
    ("pyarrow.csv", "read_csv"): (_csv, "pyarrow.csv.read_csv(PATH)"),
    ("pyarrow.csv", "open_csv"): (_csv, "pyarrow.csv.open_csv(PATH).read_all()"),
    ("pyarrow.json", "read_json"): (_jsonl, "pyarrow.json.read_json(PATH)"),
    ("pyarrow.feather", "read_table"): (_feather, "pyarrow.feather.read_table(PATH)"),
    ("pyarrow.ipc", "open_file"): (lambda f: _ipc(f, False), "pyarrow.ipc.open_file(PATH).read_all()"),
    ("pyarrow.ipc", "open_stream"): (lambda f: _ipc(f, True), "pyarrow.ipc.open_stream(PATH).read_all()"),
}
IMPORTS = "import pyarrow, pyarrow.csv, pyarrow.feather, pyarrow.ipc, pyarrow.json, pyarrow.parquet\n" \
          "import safetensors, safetensors.numpy, safetensors.torch, tokenizers, torch\n"


def _recorded(folder: Path, monkeypatch, head: str, line: str, path: Path, tag: str) -> dict:
    module = f"native_{tag}_{abs(hash(str(folder)))}"
    (folder / f"{module}.py").write_text(f"{IMPORTS}{head}PATH = {str(path)!r}\n\n\n"
                                         f"def f(completions, **kwargs):\n    {line}\n"
                                         "    return [1.0 for _ in completions]\n")
    monkeypatch.syspath_prepend(str(folder))
    with reads.recording() as read, reads.calling("f"):
        assert import_dotted(f"{module}.f", "rewards")(["a"]) == [1.0]
    return read.pins()


def test_every_native_reader_has_a_row():
    assert set(ROWS) == set(NATIVE_READERS)


@pytest.mark.parametrize("entry", list(ROWS), ids=[".".join(e) for e in ROWS])
def test_a_native_reader_names_the_file_a_reward_reads(tmp_path, monkeypatch, entry):
    make, line = ROWS[entry]
    path = make(tmp_path)
    pins = _recorded(tmp_path, monkeypatch, "", line, path, "".join(c for c in ".".join(entry) if c.isalnum()))
    assert str(path) in pins and pins[str(path)].get("sha256"), pins


def test_a_reader_bound_at_import_names_it_too(tmp_path, monkeypatch):
    path = _parquet(tmp_path)
    pins = _recorded(tmp_path, monkeypatch, "from pyarrow.parquet import read_table as _read\n", "_read(PATH)", path,
                     "bound")
    assert str(path) in pins, pins


def test_what_a_library_reads_for_itself_is_not_the_rewards(tmp_path):
    """A native read with no user code on its stack (a library's thread) is not recorded."""
    import threading

    import pyarrow.parquet

    path = _parquet(tmp_path)
    with reads.recording() as read, reads.calling("f"):
        thread = threading.Thread(target=pyarrow.parquet.read_table, args=(path,))
        thread.start()
        thread.join()
    assert str(path) not in read.pins(), read.pins()

"""Issue 48, round 11: a native reader (C, C++, Rust: no audit event of its own) names what a reward reads with it.

The table: every entry of rewards.native_reads.NATIVE_READERS (a reader without a row fails
test_every_native_reader_has_a_row) x a reward module in the workspace that reads a file through it, called inside
a recording: the file is recorded (so the verdict pins it, and the trainer checks it: the end-to-end rows, through
inspect, verdict, gate and trainer, are `torch.from_file` and the others in test_reward_reads_every_audit_event.py).
A second row binds the reader at the module's import (`from pyarrow.parquet import read_table`), as a library does.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import pkgutil
import re
import shutil
from pathlib import Path

import pytest

from mcp_server.rewards import reads
from mcp_server.rewards.dotted import import_dotted
from mcp_server.inspection.pins import changes
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


def _orc(folder: Path) -> Path:
    import pyarrow.orc

    pyarrow.orc.write_table(_table(), folder / "a.orc")
    return folder / "a.orc"


def _pandas(suffix: str, write: str):
    def make(folder: Path) -> Path:
        import pandas

        path = folder / f"a.{suffix}"
        getattr(pandas.DataFrame({"x": [1, 2]}), write)(path, **({"parser": "etree"} if suffix == "xml" else {}))
        return path

    return make


def _with_metadata(folder: Path) -> Path:
    """A parquet data set with its `_metadata` file (what pyarrow.dataset.parquet_dataset is given)."""
    import pyarrow.parquet

    collected: list = []
    pyarrow.parquet.write_to_dataset(_table(), folder / "set", metadata_collector=collected)
    pyarrow.parquet.write_metadata(_table().schema, folder / "set" / "_metadata", metadata_collector=collected)
    return folder / "set" / "_metadata"


# (module, attribute) -> (the file it reads, the reward's line that reads PATH through it): every native reader,
# and every other reader of a path the installed packages offer (test_every_reader_a_package_offers_has_a_row).
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
    ("pyarrow.ipc", "RecordBatchFileReader.__init__"): (lambda f: _ipc(f, False),
                                                        "pyarrow.ipc.RecordBatchFileReader(PATH).read_all()"),
    ("pyarrow.ipc", "RecordBatchStreamReader.__init__"): (lambda f: _ipc(f, True),
                                                          "pyarrow.RecordBatchStreamReader(PATH).read_all()"),
    ("pyarrow.json", "open_json"): (_jsonl, "pyarrow.json.open_json(PATH).read_all()"),
    ("pyarrow.feather", "read_feather"): (_feather, "pyarrow.feather.read_feather(PATH)"),
    ("pyarrow.feather", "FeatherDataset.__init__"): (_feather, "pyarrow.feather.FeatherDataset([PATH]).read_table()"),
    ("pyarrow.dataset", "dataset"): (_parquet, "pyarrow.dataset.dataset(PATH).to_table()"),
    ("pyarrow.dataset", "parquet_dataset"): (_with_metadata, "pyarrow.dataset.parquet_dataset(PATH).to_table()"),
    ("pyarrow.parquet", "ParquetDataset.__init__"): (_parquet, "pyarrow.parquet.ParquetDataset(PATH).read()"),
    ("pyarrow.parquet", "read_pandas"): (_parquet, "pyarrow.parquet.read_pandas(PATH)"),
    ("pyarrow.orc", "read_table"): (_orc, "pyarrow.orc.read_table(PATH)"),
    ("pyarrow.orc", "ORCFile.__init__"): (_orc, "pyarrow.orc.ORCFile(PATH).read()"),
    ("pyarrow.fs", "copy_files"): (_bytes, "pyarrow.fs.copy_files(PATH, tempfile.mkdtemp() + '/copy')"),
    ("pandas", "read_csv"): (_csv, "pandas.read_csv(PATH)"),
    ("pandas", "read_table"): (_csv, "pandas.read_table(PATH)"),
    ("pandas", "read_fwf"): (_csv, "pandas.read_fwf(PATH)"),
    ("pandas", "read_json"): (_jsonl, "pandas.read_json(PATH, lines=True)"),
    ("pandas", "read_parquet"): (_parquet, "pandas.read_parquet(PATH)"),
    ("pandas", "read_feather"): (_feather, "pandas.read_feather(PATH)"),
    ("pandas", "read_orc"): (_orc, "pandas.read_orc(PATH)"),
    ("pandas", "read_pickle"): (_pandas("pkl", "to_pickle"), "pandas.read_pickle(PATH)"),
    ("pandas", "read_stata"): (_pandas("dta", "to_stata"), "pandas.read_stata(PATH)"),
    ("pandas", "read_xml"): (_pandas("xml", "to_xml"), "pandas.read_xml(PATH, parser='etree')"),
    # pandas writes no SAS file: the reader opens the file, then refuses these bytes (ValueError, let pass)
    ("pandas", "read_sas"): (_bytes, "not_sas(pandas.read_sas, PATH, format='xport')"),
}
IMPORTS = "import tempfile, pandas\n" \
          "def not_sas(read, *args, **kwargs):\n    try:\n        read(*args, **kwargs)\n" \
          "    except ValueError as error:\n        assert 'not an XPORT file' in str(error), error\n" \
          "import pyarrow, pyarrow.csv, pyarrow.dataset, pyarrow.feather, pyarrow.fs, pyarrow.ipc, pyarrow.json\n" \
          "import pyarrow.orc, pyarrow.parquet, safetensors, safetensors.numpy, safetensors.torch, tokenizers, torch\n"


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
    assert set(NATIVE_READERS) <= set(ROWS), set(NATIVE_READERS) - set(ROWS)


# What a reward could read a file through, derived from the installed packages: every public callable of pyarrow
# (and each of its modules), pandas and polars whose first parameter names a path. Each has a row above (a reward
# reading through it is recorded), or one here: it takes no path (a buffer: test_a_buffer_reader_takes_no_path), it
# writes, or it needs a package not installed here (then it reads nothing; installing that package fails
# test_a_reader_needing_a_package_has_none_here until the reader has a row).
OFFERED_BY = ("pyarrow", "pandas", "polars")
NOT_SCANNED = {"pyarrow.lib": "the core the pyarrow namespace re-exports (its readers are pyarrow's)",
               "pyarrow.tests": "pyarrow's own tests", "pyarrow.conftest": "pyarrow's own tests",
               "pyarrow.benchmark": "pyarrow's own benchmarks"}
PATH_PARAMETER = re.compile(r"path|source|file|where|buf|^io$")
TAKES_A_BUFFER = {("pyarrow", "compress"), ("pyarrow", "decompress"), ("pyarrow", "deserialize_pandas"),
                  ("pyarrow.ipc", "read_message"), ("pyarrow.ipc", "read_tensor"),
                  ("pyarrow.ipc", "deserialize_pandas"),
                  ("pyarrow.substrait", "deserialize_expressions"), ("pyarrow.substrait", "deserialize_schema")}
WRITES = {("pyarrow", "create_memory_map"), ("pyarrow", "output_stream"), ("pyarrow.parquet", "ParquetWriter"),
          ("pyarrow.orc", "ORCWriter"), ("pandas", "ExcelWriter")}
NOT_A_READ = {("pyarrow", "set_timezone_db_path"): "where pyarrow finds its time zone database (on Windows only)",
              ("pyarrow.jvm", "jvm_buffer"): "a Java ArrowBuf, through JPype"}
NEEDS = {("pandas", "read_excel"): ("openpyxl", "xlrd", "odf", "pyxlsb", "python_calamine"),
         ("pandas", "ExcelFile"): ("openpyxl", "xlrd", "odf", "pyxlsb", "python_calamine"),
         ("pandas", "read_hdf"): ("tables",), ("pandas", "HDFStore"): ("tables",),
         ("pandas", "read_spss"): ("pyreadstat",),
         ("pandas", "read_html"): ("lxml", "bs4")}


def _offered() -> dict:
    """(module, name) -> the callable, of every public callable of the installed OFFERED_BY whose first parameter
    names a path."""
    names = list(OFFERED_BY)
    if importlib.util.find_spec("pyarrow"):
        import pyarrow

        names += [f"pyarrow.{m.name}" for m in pkgutil.iter_modules(pyarrow.__path__) if not m.name.startswith("_")]
    found = {}
    for name in (n for n in names if n not in NOT_SCANNED and importlib.util.find_spec(n.split(".")[0])):
        try:
            module = importlib.import_module(name)
        except ImportError:  # a module not built here (pyarrow.cuda): nothing reads through it
            continue
        for attribute in (a for a in dir(module) if not a.startswith("_")):
            value = getattr(module, attribute)
            try:
                parameters = [p for p in inspect.signature(value).parameters if p not in ("self", "cls")]
            except (TypeError, ValueError):  # not a callable, or one with no signature to read
                continue
            if parameters and PATH_PARAMETER.search(parameters[0]):
                found[name, attribute] = value
    return found


def _resolve(entry: tuple[str, str]):
    """What a row's (module, attribute) names now: a class for its `__init__`."""
    value = importlib.import_module(entry[0])
    for part in entry[1].removesuffix(".__init__").split("."):
        value = getattr(value, part)
    return value


def test_every_reader_a_package_offers_has_a_row():
    """A callable bound under another name (pyarrow.RecordBatchFileReader is pyarrow.ipc's) shares its row."""
    rowed = {id(_resolve(entry)) for entry in [*ROWS, *TAKES_A_BUFFER, *WRITES, *NOT_A_READ, *NEEDS]}
    offered = _offered()
    assert ("pyarrow.dataset", "dataset") in offered and ("pandas", "read_csv") in offered, sorted(offered)
    assert not [entry for entry, value in offered.items() if id(value) not in rowed]


@pytest.mark.parametrize("entry", sorted(TAKES_A_BUFFER), ids=[".".join(e) for e in sorted(TAKES_A_BUFFER)])
def test_a_buffer_reader_takes_no_path(tmp_path, entry):
    with pytest.raises(TypeError):
        _resolve(entry)(str(_bytes(tmp_path)))


@pytest.mark.parametrize("entry", sorted(NEEDS), ids=[".".join(e) for e in sorted(NEEDS)])
def test_a_reader_needing_a_package_has_none_here(entry):
    assert not [name for name in NEEDS[entry] if importlib.util.find_spec(name)], entry


@pytest.mark.parametrize("entry", list(ROWS), ids=[".".join(e) for e in ROWS])
def test_a_native_reader_names_the_file_a_reward_reads(tmp_path, monkeypatch, entry):
    make, line = ROWS[entry]
    path = make(tmp_path)
    pins = _recorded(tmp_path, monkeypatch, "", line, path, "".join(c for c in ".".join(entry) if c.isalnum()))
    assert str(path) in pins and pins[str(path)].get("sha256"), pins


def test_a_parquet_dataset_s_data_files_are_named_with_its_metadata(tmp_path, monkeypatch):
    """pyarrow.dataset.parquet_dataset is given `_metadata` and reads the data files beside it: each is recorded."""
    path = _with_metadata(tmp_path)
    pins = _recorded(tmp_path, monkeypatch, "", "pyarrow.dataset.parquet_dataset(PATH).to_table()", path, "meta")
    data = [str(p) for p in path.parent.glob("*.parquet")]
    assert data and set(data) <= set(pins), (data, pins)


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



# ---------------------------------------------------------------- a folder given to a native reader (m11)
def _reparquet(path: Path) -> None:
    import pyarrow
    import pyarrow.parquet

    pyarrow.parquet.write_table(pyarrow.table({"x": [7, 8, 9]}), path)


# The native readers that take a folder (a parquet data set of shards: read_table('rubric/')), each with how a file
# of it is rewritten with other content of its format; checked against each reader's own behaviour
# (test_which_native_readers_take_a_folder). A folder given to one has its every file and listing pinned
# (m11-sandbox-native-folder-unwalked: the folder alone, {kind: directory}, let a shard edited after the verdict
# through the gate and the trainer).
TAKES_A_FOLDER = {("pyarrow.parquet", "read_table"): _reparquet, ("pyarrow.parquet", "read_pandas"): _reparquet,
                  ("pyarrow.parquet", "ParquetDataset.__init__"): _reparquet,
                  ("pyarrow.dataset", "dataset"): _reparquet, ("pandas", "read_parquet"): _reparquet,
                  ("pyarrow.fs", "copy_files"): lambda path: path.write_bytes(bytes(range(16, 32)))}
# A file of the folder (at its top, or in a partition folder under it) x a change after the verdict
FOLDER_FILES = ("a.x", "part=1/b.x")
FOLDER_CHANGES = ("kept", "edited", "added", "removed")
FOLDER_ROWS = [(entry, name, how) for entry in TAKES_A_FOLDER for name in FOLDER_FILES for how in FOLDER_CHANGES]


def _folder_of(folder: Path, entry: tuple[str, str]) -> Path:
    """A folder holding FOLDER_FILES, each a file the reader `entry` reads."""
    (folder / "made").mkdir(exist_ok=True)
    for name in FOLDER_FILES:
        made = ROWS[entry][0](folder / "made")
        target = folder / "data" / name.replace(".x", made.suffix)
        target.parent.mkdir(parents=True, exist_ok=True)
        made.rename(target)
    return folder / "data"


@pytest.mark.parametrize("entry", list(ROWS), ids=[".".join(e) for e in ROWS])
def test_which_native_readers_take_a_folder(tmp_path, entry):
    """TAKES_A_FOLDER is what each reader does: given a folder of its files it reads them, or refuses the folder."""
    folder = _folder_of(tmp_path, entry)
    names: dict = {}
    exec(IMPORTS, names)
    try:
        eval(ROWS[entry][1].replace("PATH", repr(str(folder))), names)
        takes = True
    except Exception:  # noqa: BLE001 - each library refuses a folder its own way (OSError, RuntimeError, ...)
        takes = False
    assert takes == (entry in TAKES_A_FOLDER), (entry, takes)


def _folder_reward(tmp_path: Path, monkeypatch, entry: tuple[str, str]):
    """(the folder, the reward reading it through `entry`, what its review recorded)."""
    folder = _folder_of(tmp_path, entry)
    module = f"native_folder_{''.join(c for c in '.'.join(entry) if c.isalnum())}_{abs(hash(str(tmp_path)))}"
    (tmp_path / f"{module}.py").write_text(f"{IMPORTS}PATH = {str(folder)!r}\n\n\ndef f(completions, **kwargs):\n"
                                           f"    {ROWS[entry][1]}\n    return [1.0 for _ in completions]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with reads.recording() as read, reads.calling("f"):
        reward = import_dotted(f"{module}.f", "rewards")
        assert reward(["a"]) == [1.0]
    return folder, reward, read.pins()


def _change_in(folder: Path, entry: tuple[str, str], name: str, how: str) -> str | None:
    """The change `how` to the file `name` of `folder`; the path a refusal must name: the file, or for a file added
    beside it the folder it was added to (its listing: which name is new, a listing's digest cannot say)."""
    path = next(p for p in folder.rglob("*") if p.stem == Path(name).stem)
    if how == "edited":
        TAKES_A_FOLDER[entry](path)
    elif how == "removed":
        path.unlink()
    elif how == "added":
        shutil.copy(path, path.with_name("added" + path.suffix))
        return os.path.join(str(path.parent), "")
    return None if how == "kept" else str(path)


class _Refused(SystemExit):
    pass


def _trainer(pinned: dict, reward, capsys) -> str | None:
    """What the trainer says of the reward's reads (reads.checking before the first step, then the reward's call
    inside its recording): None when it trains, else its refusal."""
    capsys.readouterr()
    try:
        with reads.recording(reads.checking(pinned, _Refused)), reads.calling("f"):
            reward(["a"])
    except _Refused:
        return capsys.readouterr().err
    return None


@pytest.mark.parametrize(("entry", "name", "how"), FOLDER_ROWS,
                         ids=[f"{'.'.join(e)}-{n}-{h}" for e, n, h in FOLDER_ROWS])
def test_a_file_of_a_folder_a_native_reader_read_changed_is_refused_naming_it(tmp_path, monkeypatch, capsys, entry,
                                                                               name, how):
    """The gate (pins.changes of the verdict's reward_reads against reads.now, as check_inspection_gate compares)
    and the trainer (reads.checking, then the reward's call) each refuse naming the file, or the folder a file was
    added to; kept, both pass."""
    folder, reward, pinned = _folder_reward(tmp_path, monkeypatch, entry)
    assert {str(p) for p in folder.rglob("*") if p.is_file()} <= set(pinned), pinned
    named = _change_in(folder, entry, name, how)
    gate = changes({"reward_reads": pinned}, {"reward_reads": reads.now(pinned)})
    trainer = _trainer(pinned, reward, capsys)
    if named is None:
        assert (gate, trainer) == ([], None), (gate, trainer)
        return
    assert gate and f"{named} (read by f)" in gate[0], (how, named, gate)
    assert trainer and f"reviewed: {named} (read by f)" in trainer, (how, named, trainer)

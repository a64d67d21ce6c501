"""Issue 48, the point-of-use gate as a table: every input the trainer reads x every form TRL and the datasets
library accept for it x every change after the verdict; the gate's pins (inspection.pins.run_pins, what
check_inspection_gate compares) and the trainer's own fingerprint (inspection.training_inputs, what
check_reviewed_inputs compares) must each see the change and name it.

The rows are generated from the code that defines what is pinned: every config field config.fields declares
pinned (GRPOView's table), every part run_pins returns (PART_NAMES), every key of TRL's DatasetConfig, every
from_pretrained argument that chooses the model's files (training_inputs.WEIGHT_KWARGS). A new pinned field or a
new part gets rows without a new test, and `test_every_input_has_rows` fails for a part no row covers. Cells are
cheap: constructed runs, no sampling, no training (the launches through a real trainer are in
tests/test_gate_point_of_use.py).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import os
import shutil
import sysconfig
from pathlib import Path

import pytest
import yaml

from support import sign_samples
from mcp_server.config.fields import pinned
from mcp_server.config.grpo_fields import GRPOView
from mcp_server.errors import UserInputError
from mcp_server.inspection import pins as pins_module
from mcp_server.inspection.pins import MODEL_DATA_KEYS, PART_NAMES, changes, config_pins, run_pins
from mcp_server.inspection.training_inputs import WEIGHT_KWARGS, trained_model
from mcp_server.runs import Run

REWARD = "0" * 64
CHANGES = ("edited", "replaced", "removed", "added", "renamed", "linked")
ROWS = [{"prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(4)]


def _jsonl(path: Path, rows=ROWS, tag: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({**r, "prompt": r["prompt"] + tag}) + "\n" for r in rows))
    return path


# Every form a file takes in a pinned tree (a model folder, a data directory, train/): the pin lists the tree, so
# each must be seen changed (m12-gate-hidden-file: a filter on hidden names passed, the rows had a hidden folder
# only). Derived from what the name and place of a file can be (test_every_file_form_in_a_tree_has_a_row).
TREE_FILES = {"a top-level file": "config.json", "a nested file": "sub/model.safetensors",
              "a file in a hidden folder": ".hidden/model.safetensors", "a hidden file": ".hidden_config.json",
              "a hidden file nested": "sub/.hidden.json", "an empty file": "empty.json",
              "a link to a file outside the tree": "linked.safetensors"}


def _tree_files(folder: Path, text: str = "") -> Path:
    """TREE_FILES written under `folder` (the empty one empty, the link to a file beside `folder`)."""
    for form, name in TREE_FILES.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if form == "a link to a file outside the tree":
            target = folder.parent / f"{folder.name}-outside" / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(f"{text}linked {name}\n")
            path.symlink_to(target)
        elif not path.exists():
            path.write_text("" if form == "an empty file" else f"{text}{name}\n")
    return folder


def _model(folder: Path) -> Path:
    """A model folder as save_pretrained leaves it, with a subfolder and a hidden folder from_pretrained can be
    pointed at (model_init_kwargs' subfolder), and every other form of a file in a tree (TREE_FILES)."""
    for name, text in {"config.json": '{"model_type": "llama"}', "model.safetensors": "weights",
                       "tokenizer.json": "{}", "sub/config.json": '{"model_type": "llama"}',
                       "sub/model.safetensors": "other weights", ".hidden/model.safetensors": "hidden weights"}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return _tree_files(folder)


def test_every_file_form_in_a_tree_has_a_row(tmp_path):
    """Each property a file in a tree can have (a hidden name, under a hidden folder, nested, empty, a link) and
    none of them are a form of TREE_FILES."""
    folder = _tree_files(tmp_path / "tree")
    seen = set()
    for name in TREE_FILES.values():
        path, parts = folder / name, Path(name).parts
        seen |= {p for p, has in {"hidden name": parts[-1].startswith("."), "nested": len(parts) > 1,
                                  "under a hidden folder": any(p.startswith(".") for p in parts[:-1]),
                                  "empty": path.stat().st_size == 0, "a link": path.is_symlink(),
                                  "plain": len(parts) == 1 and not name.startswith(".") and not path.is_symlink()
                                  and path.stat().st_size > 0}.items() if has}
    assert seen == {"hidden name", "nested", "under a hidden folder", "empty", "a link", "plain"}, seen


def _run(tmp_path: Path, config: dict) -> Run:
    run = Run(tmp_path / "run")
    (run.dir / "train").mkdir(parents=True, exist_ok=True)
    (run.dir / "train" / "config.yaml").write_text(yaml.safe_dump({"output_dir": "checkpoints", **config}))
    (run.dir / "train" / "train.py").write_text("print('train')\n")
    return run


def _change(path: Path, how: str, tmp_path: Path) -> None:
    """One change after the verdict to the file `path` (for "added": a new file beside it)."""
    extra = json.dumps({"prompt": "unreviewed", "answer": "0"}) + "\n" if path.suffix == ".jsonl" else "unreviewed\n"
    other = tmp_path / "elsewhere" / path.name
    other.parent.mkdir(parents=True, exist_ok=True)
    other.write_text(path.read_text() + extra if path.is_file() else extra)
    if how == "edited":
        with open(path, "a") as handle:
            handle.write(extra)
    elif how == "replaced":  # another file renamed over it (a new inode, other content)
        shutil.copy(other, path.with_name(path.name + ".new"))
        os.replace(path.with_name(path.name + ".new"), path)
    elif how == "removed":
        path.unlink()
    elif how == "added":
        shutil.copy(other, path.with_name("added-" + path.name))
    elif how == "renamed":
        path.rename(path.with_name("renamed-" + path.name))
    elif how == "linked":  # a link to other content where the file was
        path.unlink()
        path.symlink_to(other)


def _moved(before: dict, run: Run) -> list[str]:
    """What the gate says changed: changes() of the pins, or the error that closes it when a pinned input cannot
    be read at all (check_inspection_gate: "what the verdict vouches for cannot be read now: ...")."""
    try:
        return changes(before, run_pins(run, REWARD))
    except UserInputError as exc:
        return [f"the {exc.field} cannot be read: {exc}"]


def _trained(name: str, run: Run) -> dict | str:
    try:
        return trained_model(name, None, run)
    except UserInputError as exc:  # the trainer exits before it loads anything
        return str(exc)


# ---------------------------------------------------------------- config fields x (edited, removed, added)
def _pinned_fields() -> list[str]:
    return sorted(n for n in GRPOView.DEFAULTS if pinned(n) and n not in MODEL_DATA_KEYS)


@pytest.mark.parametrize("field", _pinned_fields())
def test_a_pinned_config_field_changed_is_named(tmp_path, field):
    """Each pinned field edited, removed and added where nothing was: the config part of the pins (config_pins,
    which run_pins and the sampling record's config_pins both are) moves and names the field."""
    run = _run(tmp_path, {"model_name_or_path": str(_model(tmp_path / "model"))})
    base = {"output_dir": "checkpoints", "model_name_or_path": str(tmp_path / "model"),
            "dataset_name": str(_jsonl(tmp_path / "d.jsonl"))}
    for how, (old, new) in {"edited": ("a", "b"), "removed": ("a", None), "added": (None, "b")}.items():
        before = config_pins(run, {**base, **({field: old} if old is not None else {})})
        after = config_pins(run, {**base, **({field: new} if new is not None else {})})
        moved = changes(before, after)
        assert moved and field in " ".join(moved), (field, how, moved)


def test_resume_from_checkpoint_is_pinned():
    """It decides the weights that train (issue 48: it was declared unpinned)."""
    assert pinned("resume_from_checkpoint") and "resume_from_checkpoint" in _pinned_fields()


# ---------------------------------------------------------------- the data: every form x every change
# A data_files glob that holds one metacharacter of GLOB_CHARS (datasets' resolve_pattern) and no other, each
# matching data/train.jsonl; "**" (recursive) and none (a plain name: "data_files: a string") too. A character
# added to GLOB_CHARS without a form here fails test_every_glob_character_has_a_data_form.
_GLOB_OF = {"*": "tra*.jsonl", "?": "trai?.jsonl", "[": "[st]rain.jsonl", "**": "**/train.jsonl"}


def test_every_glob_character_has_a_data_form():
    assert set(pins_module.GLOB_CHARS) <= set(_GLOB_OF), sorted(set(pins_module.GLOB_CHARS) - set(_GLOB_OF))
    for c, glob in _GLOB_OF.items():  # each form holds its own metacharacter and no other
        assert c in glob and not set(pins_module.GLOB_CHARS.replace(c[0], "")) & set(glob), (c, glob)


def _data_forms(tmp_path: Path) -> dict[str, tuple[dict, Path]]:
    """form -> (the config's data fields, the file a change hits). Relative names are resolved in the run
    directory, as the trainer resolves them."""
    data = tmp_path / "run" / "data"
    one = _jsonl(data / "train.jsonl")
    _jsonl(data / "more.jsonl", tag=" (more)")
    return {
        "dataset_name: a file": ({"dataset_name": str(one)}, one),
        "dataset_name: a directory": ({"dataset_name": str(data)}, one),
        "dataset_name: a relative name resolved in the run": ({"dataset_name": "data"}, one),
        "data_files: a string": ({"datasets": [{"path": "json", "data_files": "data/train.jsonl"}]}, one),
        "data_files: a list": ({"datasets": [{"path": "json", "data_files": ["data/train.jsonl",
                                                                             "data/more.jsonl"]}]}, one),
        "data_files: a mapping of splits": ({"datasets": [{"path": "json", "data_files": {
            "train": "data/train.jsonl", "test": "data/more.jsonl"}}]}, one),
        "data_files: a relative glob": ({"datasets": [{"path": "json", "data_files": "data/*.jsonl"}]}, one),
        "data_files: an absolute glob": ({"datasets": [{"path": "json", "data_files": str(data / "*.jsonl")}]}, one),
        "data_files: relative to data_dir": ({"datasets": [{"path": "json", "data_dir": "data",
                                                            "data_files": "train.jsonl"}]}, one),
        **{f"data_files: a glob by {c!r} alone": ({"datasets": [{"path": "json", "data_files": f"data/{glob}"}]}, one)
           for c, glob in _GLOB_OF.items()},
        "path: a directory": ({"datasets": [{"path": "data"}]}, one),
        "path: an absolute directory": ({"datasets": [{"path": str(data)}]}, one),
    }


# A change that a form does not read cannot change what trains: a file added beside a named file.
# So is one a glob does not match ("added-train.jsonl" beside data/train.jsonl).
_NOT_READ = {("added", form) for form in ("dataset_name: a file", "data_files: a string", "data_files: a list",
                                            "data_files: a mapping of splits", "data_files: relative to data_dir")}
_NOT_READ |= {("added", f"data_files: a glob by {c!r} alone") for c, glob in _GLOB_OF.items()
              if not fnmatch.fnmatch("added-train.jsonl", glob.rsplit("/", 1)[-1])}
DATA_FORMS = list(_data_forms(Path("/nonexistent")))


@pytest.mark.parametrize("how", CHANGES)
@pytest.mark.parametrize("form", DATA_FORMS)
def test_the_data_changed_is_named_by_the_gate(tmp_path, form, how):
    fields, target = _data_forms(tmp_path)[form]
    run = _run(tmp_path, {"model_name_or_path": str(_model(tmp_path / "model")), **fields})
    before = run_pins(run, REWARD)
    _change(target, how, tmp_path)
    moved = changes(before, run_pins(run, REWARD))
    if (how, form) in _NOT_READ:
        assert not moved
    else:
        assert moved and "the data set changed" in moved[0], (form, how, moved)


@pytest.mark.slow  # TRL's parser and the datasets library, as the trainer loads (no process, no model)
@pytest.mark.parametrize("how", [c for c in CHANGES if c != "renamed"])
@pytest.mark.parametrize("form", [f for f in DATA_FORMS if f.startswith(("data_files", "path"))])
def test_the_data_changed_is_seen_by_the_trainers_loader(tmp_path, form, how):
    """What the trainer hashes at the point of use (its rows, loaded as train.py loads them) differs too, or the
    loader cannot read the data at all (the trainer exits before it trains). A rename that leaves every row as it
    was changes nothing that trains: the gate's pins refuse it (test_the_data_changed_is_named_by_the_gate)."""
    from mcp_server.inspection.training_inputs import load_training_inputs

    fields, target = _data_forms(tmp_path)[form]
    fields = json.loads(json.dumps(fields).replace('"test"', '"unused"'))
    run = _run(tmp_path, {"model_name_or_path": str(_model(tmp_path / "model")), **fields})
    (run.dir / "cache").mkdir()
    before = load_training_inputs(run, run.dir / "cache" / "a")["fingerprint"]
    _change(target, how, tmp_path)
    if (how, form) in _NOT_READ:
        return
    try:
        after = load_training_inputs(run, run.dir / "cache" / "b")["fingerprint"]
    except (OSError, ValueError) as exc:  # FileNotFoundError, datasets' "Unable to find", no data files
        assert how == "removed", (form, how, exc)
        return
    assert after["rows_sha256"] != before["rows_sha256"], (form, how)


@pytest.mark.slow  # imports TRL and datasets
def test_the_trainers_rows_are_in_memory(tmp_path):
    """The trainer hashes the rows it trains on: none is read again from the cache's arrow files (issue 48)."""
    from mcp_server.inspection.training_inputs import load_training_inputs

    fields, _ = _data_forms(tmp_path)["data_files: a relative glob"]
    run = _run(tmp_path, {"model_name_or_path": str(_model(tmp_path / "model")), **fields})
    loaded = load_training_inputs(run, tmp_path / "cache")
    assert loaded["dataset"].cache_files == []
    shutil.rmtree(tmp_path / "cache")
    assert len(loaded["dataset"].to_list()) == 2 * len(ROWS)


def test_every_datasets_entry_key_is_pinned(tmp_path):
    """Every field TRL's DatasetConfig takes (path, name, data_dir, data_files, split, columns, fraction, ...)
    set on an entry moves the data pin: a key TRL adds is pinned without a new row."""
    from trl.scripts.utils import DatasetConfig

    _jsonl(tmp_path / "run" / "data" / "train.jsonl")
    entry = {"path": "json", "data_files": "data/train.jsonl"}
    run = _run(tmp_path, {"model_name_or_path": str(_model(tmp_path / "model")), "datasets": [entry]})
    before = run_pins(run, REWARD)
    for field in dataclasses.fields(DatasetConfig):
        changed = {**entry, field.name: ["data/train.jsonl", "data/x.jsonl"] if field.name == "data_files"
                   else "other" if field.name != "fraction" else 0.5}
        run.config.write_text(yaml.safe_dump({"output_dir": "checkpoints", "datasets": [changed],
                                              "model_name_or_path": str(tmp_path / "model")}))
        assert changes(before, run_pins(run, REWARD)), field.name


# ---------------------------------------------------------------- the model: every form x file x change
MODEL_FILES = ("model.safetensors", *TREE_FILES.values())


def _fake_hub_cache(cache: Path, repo: str, model: Path, commit: str = "a" * 40) -> Path:
    """The local HF cache huggingface_hub writes: snapshots/<commit>/ of links into blobs/, refs/main."""
    root = cache / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / commit
    for path in sorted(p for p in model.rglob("*") if p.is_file()):
        blob = root / "blobs" / f"{commit}-{path.relative_to(model).as_posix().replace('/', '_')}"
        blob.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, blob)
        link = snapshot / path.relative_to(model)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    return snapshot


def _model_form(form: str, tmp_path: Path, monkeypatch) -> tuple[str, Path]:
    """(model_name_or_path, the folder whose files training loads) for one form."""
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    if form == "a relative directory in the run":
        return "model", _model(tmp_path / "run" / "model")
    if form == "an absolute directory":
        return str(tmp_path / "outside-model"), _model(tmp_path / "outside-model")
    return "org/model", _fake_hub_cache(tmp_path / "hub", "org/model", _model(tmp_path / "hub-source"))


MODEL_FORMS = ("a relative directory in the run", "an absolute directory", "a hub name resolved in the local cache")


@pytest.mark.parametrize("how", CHANGES)
@pytest.mark.parametrize("file", MODEL_FILES)
@pytest.mark.parametrize("form", MODEL_FORMS)
def test_the_model_changed_is_named_by_the_gate_and_the_trainer(tmp_path, monkeypatch, form, file, how):
    name, folder = _model_form(form, tmp_path, monkeypatch)
    run = _run(tmp_path, {"model_name_or_path": name, "dataset_name": str(_jsonl(tmp_path / "d.jsonl"))})
    before, trained = run_pins(run, REWARD), trained_model(name, None, run)
    target = folder / file
    if target.is_symlink() and how in ("edited", "replaced"):  # a cache's snapshot holds links into blobs/: an
        target = target.resolve()  # in-place overwrite of the cache hits the blob
    _change(target, how, tmp_path)
    moved = _moved(before, run)
    assert moved and ("the model changed" in moved[0] or "the model cannot be read" in moved[0]), moved
    assert _trained(name, run) != trained, (form, file, how)


def test_large_weights_rewritten_in_place_with_their_mtime_put_back_are_named(tmp_path):
    """Round 7 (G3): a model file over WHOLE_FILE_BYTES was pinned by size and mtime only; weights rewritten in
    place (same size) and `touch -r` to the old mtime passed the gate. The pin holds the inode and ctime too (no
    user sets a ctime back): the gate and the trainer see the rewrite, and the gate says what a large file's pin
    holds."""
    import time

    from mcp_server.workspace import WHOLE_FILE_BYTES

    folder = _model(tmp_path / "big-model")
    weights = folder / "model.safetensors"
    with open(weights, "r+b") as handle:
        handle.truncate(WHOLE_FILE_BYTES + (1 << 20))  # sparse: no disk used
    run = _run(tmp_path, {"model_name_or_path": str(folder), "dataset_name": str(_jsonl(tmp_path / "d.jsonl"))})
    before, trained, stat = run_pins(run, REWARD), trained_model(str(folder), None, run), weights.stat()
    time.sleep(0.05)  # past the file system's clock tick: a rewrite comes after the verdict
    with open(weights, "r+b") as handle:
        handle.seek(WHOLE_FILE_BYTES // 2)
        handle.write(b"other weights, same size")
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # touch -r
    assert weights.stat().st_size == stat.st_size and weights.stat().st_mtime_ns == stat.st_mtime_ns
    moved = _moved(before, run)
    assert moved and "the model changed" in moved[0] and "ctime" in moved[0], moved
    assert _trained(str(folder), run) != trained


def test_a_hub_model_is_the_cached_snapshot_not_the_name(tmp_path, monkeypatch):
    """An honest upstream update (the cache's main moved to a new commit) and another cache (an HF_HOME switch)
    are other weights: the gate and the trainer both see them."""
    name, _ = _model_form("a hub name resolved in the local cache", tmp_path, monkeypatch)
    run = _run(tmp_path, {"model_name_or_path": name, "dataset_name": str(_jsonl(tmp_path / "d.jsonl"))})
    before, trained = run_pins(run, REWARD), trained_model(name, None, run)
    newer = _model(tmp_path / "newer")
    (newer / "model.safetensors").write_text("updated upstream")
    _fake_hub_cache(tmp_path / "hub", "org/model", newer, commit="b" * 40)
    assert "the model changed" in changes(before, run_pins(run, REWARD))[0]
    assert trained_model(name, None, run) != trained
    # a revision that names the reviewed commit (model_revision, or model_init_kwargs' revision) keeps its files
    assert trained_model(name, "a" * 40, run)["files_sha256"] == trained["files_sha256"]
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    assert "the model changed" in changes(before, run_pins(run, REWARD))[0]
    assert trained_model(name, None, run)["files_sha256"] is None


def test_a_hub_model_not_in_the_cache_is_pinned_by_its_revision(tmp_path, monkeypatch):
    """A hub model no cache holds (no commit, no files to pin) is pinned by name and revision: model_revision set,
    changed or removed after the verdict is another model (issue 48's blind audit)."""
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    pins = {revision: config_pins(_run(tmp_path, {"model_name_or_path": "org/model", "model_revision": revision}))
            for revision in ("v1", "v2", None)}
    assert pins["v1"]["model"] == {"model": "org/model", "revision": "v1", "commit": None, "files_sha256": None}
    assert pins[None]["model"]["revision"] == "main"
    for before, after in (("v1", "v2"), ("v1", None), (None, "v2")):
        moved = changes(pins[before], pins[after])
        assert moved and moved[0].startswith("the model changed (revision:"), (before, after, moved)


def test_a_recursive_glob_pins_the_files_it_matches_at_every_depth(tmp_path):
    """data_files: data/**/*.jsonl (datasets resolves ** through every folder): a file two folders down, edited
    after the verdict, changes the data pin (issue 48's blind audit)."""
    run = _run(tmp_path, {"model_name_or_path": "org/model",
                          "datasets": [{"path": "json", "data_files": "data/**/*.jsonl", "split": "train"}]})
    deep = _jsonl(run.dir / "data" / "a" / "b" / "part-0.jsonl")
    before = config_pins(run)
    assert [m["source"] for m in before["data"][0]["sources"][0]["matches"]] == ["data/a/b/part-0.jsonl"]
    _change(deep, "edited", tmp_path)
    assert changes(before, config_pins(run))


def test_a_hub_data_sets_files_and_folder_are_pinned_by_name(tmp_path):
    """A `datasets` entry read from the hub (its content cannot be read offline) is pinned by the data_files and
    data_dir it is read with: either changed after the verdict is other data (issue 48's blind audit)."""
    def pins(**entry):
        return config_pins(_run(tmp_path, {"model_name_or_path": "org/model",
                                           "datasets": [{"path": "org/data", "split": "train", **entry}]}))

    before = pins(data_files="train-a.jsonl", data_dir="v1")
    assert before["data"][0]["sources"][0]["data_files"] == ["train-a.jsonl"]
    for after in (pins(data_files="train-b.jsonl", data_dir="v1"), pins(data_files=["train-a.jsonl", "x.jsonl"],
                                                                       data_dir="v1")):
        moved = changes(before, after)
        assert moved and moved[0].startswith("the data set changed"), moved
    assert changes(before, pins(data_files="train-a.jsonl", data_dir="v2"))
    # dataset_name's config (a subset of a hub data set) is the data pin's: the config pin leaves it to that one
    hub = {name: config_pins(_run(tmp_path, {"model_name_or_path": "org/model", "dataset_name": "org/data",
                                             "dataset_config": name})) for name in ("easy", "hard")}
    moved = changes(hub["easy"], hub["hard"])
    assert moved and moved[0].startswith("the data set changed") and "hard" in moved[0], moved
    # an entry that is not a mapping (TRL refuses it) is still pinned as written: swapped, the data set changed
    odd = {name: config_pins(_run(tmp_path, {"model_name_or_path": "org/model", "datasets": [name]}))
           for name in ("a.jsonl", "b.jsonl")}
    assert changes(odd["a.jsonl"], odd["b.jsonl"])


def test_a_hub_model_first_downloaded_by_sampling_is_pinned_by_that_snapshot(tmp_path, monkeypatch):
    """A hub model no cache held when sampling began is pinned, once sampling loaded (downloaded) it, by the
    snapshot the trainer will load: not left without files (which the trainer's pin, with files, would refuse)."""
    from mcp_server.inspection.training_inputs import pinned_after_load

    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    run = _run(tmp_path, {"model_name_or_path": "org/model"})
    before = trained_model("org/model", None, run)
    assert before["files_sha256"] is None
    _fake_hub_cache(tmp_path / "hub", "org/model", _model(tmp_path / "source"))  # what the load downloaded
    assert pinned_after_load(before, run) == trained_model("org/model", None, run)
    assert pinned_after_load(before, run)["files_sha256"] is not None


@pytest.mark.parametrize("kwarg", WEIGHT_KWARGS)
def test_model_init_kwargs_that_choose_the_files_are_in_the_model_pin(tmp_path, kwarg):
    """A `subfolder` (or variant, gguf_file, use_safetensors) trains other files of the same folder: the trainer's
    model pin names it, and sampling loads with it (sampling.py passes them to load_model)."""
    model = _model(tmp_path / "model")
    run = _run(tmp_path, {"model_name_or_path": str(model)})
    plain = trained_model(str(model), None, run, {"dtype": "float32"})
    chosen = trained_model(str(model), None, run, {"dtype": "float32", kwarg: "sub"})
    assert chosen != plain and chosen["loads"] == {kwarg: "sub"}



# from_pretrained's arguments that choose which weight files load, derived from transformers' own loading code (m11:
# `variant` dropped from WEIGHT_KWARGS took its own row of the table above with it). The trainer hands
# from_pretrained a folder (training_inputs.loadable_model: a local directory, or a hub model's cached snapshot,
# whose revision the pin records): an argument chooses files when the function that resolves the checkpoint files
# resolves another file of that folder with it set.
RESOLVER = "_get_resolved_checkpoint_files"


def _checkpoint_kwargs() -> list[str]:
    """The keyword arguments PreTrainedModel.from_pretrained hands on to RESOLVER, read from the installed
    transformers' modeling_utils.py (parsed, not imported): each keyword of that call whose value is one of
    from_pretrained's own arguments (its signature's, or one it pops from **kwargs), a dict of them
    (download_kwargs = {...}) counted by its values; the model's name itself left out (the model pin's)."""
    import ast
    import importlib.util

    source = Path(importlib.util.find_spec("transformers").submodule_search_locations[0]) / "modeling_utils.py"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    owner = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "PreTrainedModel")
    method = next(n for n in owner.body if isinstance(n, ast.FunctionDef) and n.name == "from_pretrained")
    accepted = {a.arg for a in method.args.args + method.args.kwonlyargs} | {
        n.args[0].value for n in ast.walk(method) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        and n.func.attr == "pop" and isinstance(n.func.value, ast.Name) and n.func.value.id == "kwargs"
        and n.args and isinstance(n.args[0], ast.Constant)}
    dicts = {n.targets[0].id: [v.id for v in n.value.values if isinstance(v, ast.Name)] for n in ast.walk(method)
             if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict) and isinstance(n.targets[0], ast.Name)}
    calls = [n for n in ast.walk(method) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == RESOLVER]
    assert calls, f"from_pretrained no longer calls {RESOLVER}: find what resolves its weight files now"
    names = [name for kw in calls[0].keywords if isinstance(kw.value, ast.Name)
             for name in dicts.get(kw.value.id, [kw.value.id])]
    return sorted(set(names) & accepted - {"pretrained_model_name_or_path"})


# A value for each argument that would choose other files where it can (the folder holds them: _weight_forms)
CHOICE_PROBES = {"variant": "ema", "subfolder": "sub", "use_safetensors": False, "gguf_file": "model.gguf",
                 "revision": "other", "cache_dir": "elsewhere", "force_download": True, "proxies": {"http": "none"},
                 "local_files_only": True, "token": "not-a-token", "tqdm_class": object}


def _weight_forms(folder: Path) -> Path:
    """A model folder holding a file for each way to choose: a variant's, a PyTorch file, a GGUF file, a subfolder."""
    _model(folder)
    for name in ("model.ema.safetensors", "pytorch_model.bin", "model.gguf"):
        (folder / name).write_text(name)
    return folder


def _files_chosen(folder: Path, **kwargs) -> list[str]:
    """The checkpoint files transformers' RESOLVER picks in `folder` with from_pretrained's `kwargs` (each where
    from_pretrained puts it: a parameter of RESOLVER's, else in its download_kwargs)."""
    import inspect

    from transformers import modeling_utils

    resolve = getattr(modeling_utils, RESOLVER)
    params = inspect.signature(resolve).parameters
    call = {n: None for n, p in params.items() if p.default is inspect.Parameter.empty}
    call.update(pretrained_model_name_or_path=str(folder), **{k: v for k, v in kwargs.items() if k in params})
    download = {k: v for k, v in kwargs.items() if k not in params}
    return [os.path.relpath(f, folder) for f in resolve(**call, download_kwargs=download)[0]]


def test_the_derived_weight_kwargs_are_from_pretrained_s():
    """The derivation reads something (every WEIGHT_KWARGS entry is among from_pretrained's file arguments), and
    every argument it finds has a probe value (a new one in transformers fails here: add it to CHOICE_PROBES)."""
    derived = _checkpoint_kwargs()
    assert set(WEIGHT_KWARGS) <= set(derived), (WEIGHT_KWARGS, derived)
    assert set(derived) <= set(CHOICE_PROBES), f"no probe for {set(derived) - set(CHOICE_PROBES)}"


@pytest.mark.parametrize("kwarg", _checkpoint_kwargs())
def test_a_from_pretrained_argument_that_chooses_the_files_is_pinned(tmp_path, monkeypatch, kwarg):
    """Each argument from_pretrained hands to its checkpoint resolver, set in model_init_kwargs after the verdict:
    the gate's config pin names model_init_kwargs; where it makes transformers load other files of the folder, it is
    a WEIGHT_KWARGS entry, so sampling loads with it and the trainer's model pin records it."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = _weight_forms(tmp_path / "model")
    value = CHOICE_PROBES[kwarg]
    base = {"output_dir": "checkpoints", "model_name_or_path": str(model), "model_init_kwargs": {"dtype": "float32"}}
    run = _run(tmp_path, base)
    moved = changes(config_pins(run, base),
                    config_pins(run, {**base, "model_init_kwargs": {"dtype": "float32", kwarg: value}}))
    assert moved and "model_init_kwargs" in " ".join(moved), (kwarg, moved)
    if _files_chosen(model, **{kwarg: value}) == _files_chosen(model):
        return  # it chooses nothing of a folder (the download's settings): the config pin is all
    assert kwarg in WEIGHT_KWARGS, f"from_pretrained's {kwarg} chooses other weight files: add it to WEIGHT_KWARGS"
    chosen = trained_model(str(model), None, run, {"dtype": "float32", kwarg: value})
    assert chosen != trained_model(str(model), None, run, {"dtype": "float32"}) and chosen["loads"] == {kwarg: value}


# ---------------------------------------------------------------- the files beside train.py, the script, sidecars
def _sidecars(run: Run) -> dict[str, Path]:
    """part -> a file of it that a change hits."""
    files = {"script": run.script, "train_files": run.train / "helper.py", "samples_meta": run.samples_meta,
             "train_files/dynamic_sampling": run.dynamic_sampling, "train_files/a package": run.train / "pkg" / "m.py",
             "train_files/request.json": run.request,  # the guard mode the trainer reads (round 19)
             **{f"train_files/{form}": run.train / name for form, name in TREE_FILES.items()
                if "hidden" in form or "empty" in form}}
    for path in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            empty = path == run.train / TREE_FILES["an empty file"]
            path.write_text("" if empty else '{"trained": {"rows": 4}}\n' if path.suffix == ".json" else "x = 1\n")
    return files


SIDECARS = ("script", "train_files", "samples_meta", "train_files/dynamic_sampling", "train_files/a package",
            "train_files/request.json",
            *(f"train_files/{form}" for form in TREE_FILES if "hidden" in form or "empty" in form))


@pytest.mark.parametrize("how", CHANGES)
@pytest.mark.parametrize("part", SIDECARS)
def test_a_sidecar_changed_is_named_by_the_gate(tmp_path, part, how):
    run = _run(tmp_path, {"model_name_or_path": str(_model(tmp_path / "model")),
                          "dataset_name": str(_jsonl(tmp_path / "d.jsonl"))})
    target = _sidecars(run)[part]
    before = run_pins(run, REWARD)
    _change(target, how, tmp_path)
    moved = changes(before, run_pins(run, REWARD))
    if how == "added" and part in ("script", "samples_meta"):  # a file beside them is a train file, or not read
        assert part == "samples_meta" or moved
        return
    assert moved and PART_NAMES[part.split("/")[0]] in " ".join(moved), (part, how, moved)


# ---------------------------------------------------------------- the training interpreter x every change
def _wrapper(folder: Path, marker: Path | None = None, body: str = "") -> Path:
    """A wrapper script as LLM_FINETUNING_PYTHON may name one (docs/slurm.md: a container's Python): it runs the real
    interpreter, after `body` (or, with `marker`, after writing it)."""
    import sys

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "python"
    path.write_text(f"#!/bin/sh\n{body}" + (f"echo ran >> {marker}\n" if marker else "")
                    + f'exec {sys.executable} "$@"\n')
    path.chmod(0o755)
    return path


# How the interpreter LLM_FINETUNING_PYTHON names changes after the verdict (its file, by CHANGES' names, or the
# variable itself); "added" (a file beside it) changes nothing it runs: the installed packages are not pinned.
PYTHON_CHANGES = ("edited", "replaced", "removed", "renamed", "linked", "another one named", "its folder linked")


@pytest.mark.parametrize("how", PYTHON_CHANGES)
def test_the_training_interpreter_changed_is_named(tmp_path, monkeypatch, how):
    """G3 (issue 48): LLM_FINETUNING_PYTHON pointed after the verdict at another interpreter, or a wrapper script
    whose bytes changed, ran before the trainer's checks. The verdict pins it (path, resolved file, sha256) and the
    gate names the variable, the recorded and the current one."""
    run = _run(tmp_path, {"model_name_or_path": str(_model(tmp_path / "model")),
                          "dataset_name": str(_jsonl(tmp_path / "d.jsonl"))})
    (tmp_path / "real").mkdir()
    named = _wrapper(tmp_path / "real" / "bin")
    (tmp_path / "venv").symlink_to(tmp_path / "real" / "bin", target_is_directory=True)
    named = tmp_path / "venv" / "python" if how == "its folder linked" else named
    monkeypatch.setenv("LLM_FINETUNING_PYTHON", str(named))
    before = run_pins(run, REWARD)
    assert before["training_python"]["sha256"], before["training_python"]
    if how == "renamed":
        named.rename(named.with_name("python3"))
        monkeypatch.setenv("LLM_FINETUNING_PYTHON", str(named.with_name("python3")))
    elif how == "another one named":
        monkeypatch.setenv("LLM_FINETUNING_PYTHON", str(_wrapper(tmp_path / "other" / "bin")))
    elif how == "its folder linked":  # the same name, another folder behind it (another venv)
        _wrapper(tmp_path / "other" / "bin")
        (tmp_path / "venv").unlink()
        (tmp_path / "venv").symlink_to(tmp_path / "other" / "bin", target_is_directory=True)
    else:
        _change(named, how, tmp_path)
    moved = changes(before, run_pins(run, REWARD))
    assert len(moved) == 1 and "LLM_FINETUNING_PYTHON" in moved[0], (how, moved)
    assert f"recorded under {before['training_python']['path']}" in moved[0], (how, moved)


@pytest.mark.slow  # the module's run is sampled once (the worker process)
def test_a_wrapper_named_after_the_verdict_never_runs(passed_run, tmp_path, monkeypatch):
    """G3 end to end: LLM_FINETUNING_PYTHON set after the verdict to a wrapper script; launch_training refuses before
    it starts anything (the config gate's rehearsal and the environment probe run the training interpreter too),
    naming the variable, the recorded and the current interpreter and the cheapest way on, which works."""
    from mcp_server.inspection.gate import check_inspection_gate, record_inspection_verdict
    from mcp_server.inspection.models import VerdictRequest
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest

    run_dir = shutil.copytree(passed_run, tmp_path / passed_run.name, symlinks=True)
    pins = json.loads((run_dir / "inspection" / "verdict.json").read_text())["pins"]
    marker = tmp_path / "wrapper-ran"
    wrapper = _wrapper(tmp_path / "bin", body=f"echo ran >> {marker}\nexit 1\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("LLM_FINETUNING_PYTHON", str(wrapper))
    result = launch_training(LaunchRequest(run=str(run_dir)))
    assert not result.launched and not marker.exists(), (result.message, marker.exists())
    recorded = pins["training_python"]
    said = " ".join(f"{r.message} {r.how_to_clear}" for r in result.refusals)
    assert [r.gate for r in result.refusals] == ["inspection"], result.refusals
    assert "LLM_FINETUNING_PYTHON" in said and recorded["path"] in said and str(wrapper) in said, said
    assert "record_inspection_verdict" in said and not (run_dir / "run.json").exists()
    gate = check_inspection_gate(run_dir)
    assert not gate.passed and "LLM_FINETUNING_PYTHON" in gate.reason and not marker.exists(), gate.reason
    # the way on: recorded again under the wrapper (the reviewer's act), which asks that interpreter its own folders
    # once (the verdict's training_paths, issue 48 round 7), then the gate passes
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana", agree_with_rest=True,
                                             note=json.loads((run_dir / "inspection" / "verdict.json").read_text())[
                                                 "note"]))
    assert check_inspection_gate(run_dir).passed


@pytest.mark.slow  # runs the written launch script in bash (the interpreter it would run is a wrapper)
def test_the_launch_script_refuses_an_interpreter_changed_after_the_gate(tmp_path):
    """G3, the launch script: train/launch.sh (as the local launcher writes it) checks the interpreter against the
    verdict's pin before it first runs it: a wrapper whose bytes changed after the gate never runs, the refusal names
    LLM_FINETUNING_PYTHON, and the exit code is 3; unchanged, it runs. train/launch.slurm carries the same check
    before its first use of the interpreter."""
    import subprocess
    import sys

    from mcp_server.inspection.pins import training_python_pin
    from mcp_server.training.launchers.base import PYTHON_PIN_LINE, LaunchPlan
    from mcp_server.training.launchers.local.launcher import LocalLauncher
    from mcp_server.training.launchers.local.shell import render_launch_sh
    from mcp_server.training.launchers.slurm.script import SlurmLayout, render_sbatch

    marker = tmp_path / "wrapper-ran"
    wrapper = _wrapper(tmp_path / "bin")
    run = _run(tmp_path, {"model_name_or_path": "tiny"})
    run.verdict.parent.mkdir(parents=True, exist_ok=True)
    run.verdict.write_text(json.dumps({"pins": {"training_python": training_python_pin(str(wrapper))}}))
    command = [str(wrapper), "-c", "print('trained')"]
    plan = LaunchPlan(launcher="local", strategy="single", num_processes=1, num_nodes=1, train_command=command,
                      script=render_launch_sh("g3", str(wrapper), command, True, None),
                      verdict=run.verdict.read_text())  # as the launch read it
    LocalLauncher().write(run, plan)

    def launch() -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(run.launch_script)], capture_output=True, text=True, timeout=120)

    ran = launch()
    assert ran.returncode == 0 and "trained" in ran.stdout, (ran.stdout, ran.stderr)
    wrapper.write_text(wrapper.read_text().replace("exec ", f"echo ran >> {marker}\nexec ", 1))
    refused = launch()
    assert refused.returncode == 3 and not marker.exists(), (refused.stdout, refused.stderr)
    assert "refusing to train: LLM_FINETUNING_PYTHON names" in refused.stderr and str(wrapper) in refused.stderr
    assert (run.logs / "exit-code").read_text().strip() == "3"
    sbatch = render_sbatch(SlurmLayout(run_dir=str(run.dir), job_name="g3", comment="c", python=sys.executable,
                                       nodes=1, train_nodes=1, processes_per_node=1, gpus_per_node=0, strategy="ddp",
                                       output_dir="checkpoints"), "tiny", [])
    assert PYTHON_PIN_LINE in sbatch and sbatch.index(PYTHON_PIN_LINE) < sbatch.index("PORT=$(")


# ---------------------------------------------------------------- every input has rows
# The part of run_pins each test covers; the review files the verdict signs (samples.jsonl, review.json, review.md,
# review.jsonl) are hashed in verdict.json itself and compared by check_inspection_gate
# (test_a_review_file_changed_closes_the_gate_naming_it, below); the reward code by rewards.reward_code_sha256
# (tests/test_gate_reward_code.py, the custom-reward work's); an agentic run's environment and tools by
# agentic.sources.agentic_pin (tests/test_agentic.py).
COVERED = {"model": "test_the_model_changed_is_named_by_the_gate_and_the_trainer",
           "data": "test_the_data_changed_is_named_by_the_gate", "sampling": "test_a_pinned_config_field_changed",
           "reward_config": "test_a_pinned_config_field_changed", "config": "test_a_pinned_config_field_changed",
           "script": "test_a_sidecar_changed", "train_files": "test_a_sidecar_changed",
           "samples_meta": "test_a_sidecar_changed", "trained": "test_the_data_changed_is_seen_by_the_trainers_loader",
           "reward_code": "tests/test_gate_reward_code.py", "agentic": "tests/test_agentic.py",
           "prompt_column": "tests/test_gate_point_of_use.py",
           "training_python": "test_the_training_interpreter_changed_is_named",
           "loader_env": "tests/test_gate_loader.py", "reward_reads": "tests/test_reward_reads.py"}


def test_every_input_has_rows(tmp_path):
    """Every part the gate pins (PART_NAMES, and each key run_pins returns for a run with every sidecar) has a
    row above; every config field is pinned or declared unpinned by config.fields, none left to a list here."""
    run = _run(tmp_path, {"model_name_or_path": str(_model(tmp_path / "model")),
                          "dataset_name": str(_jsonl(tmp_path / "d.jsonl"))})
    _sidecars(run)
    returned = set(run_pins(run, REWARD))
    missing = (set(PART_NAMES) | returned) - set(COVERED)
    assert not missing, f"pinned parts with no row in the gate table: {sorted(missing)}"
    for name in GRPOView.DEFAULTS:
        assert name in _pinned_fields() or not pinned(name) or name in MODEL_DATA_KEYS
    assert set(MODEL_DATA_KEYS) <= {"model_name_or_path", "model_revision", "dataset_name", "dataset_config",
                                    "datasets"}, "a field the model/data pins cover needs a form row above"
    assert pins_module.GLOB_CHARS  # the glob forms above are the ones _matched expands


def test_the_review_files_have_rows():
    """Every file the verdict record hashes (VerdictRecord's *_sha256 fields) and every sheet the review hashes
    (gate._sheet_edited) has a row in REVIEW_FILES."""
    from mcp_server.inspection.gate import VerdictRecord

    hashed = {"samples_sha256": "samples.jsonl", "review_sha256": "review.json"}
    for field in VerdictRecord.model_fields:
        assert not field.endswith("_sha256") or hashed.get(field) in REVIEW_FILES, f"no row for {field}"
    assert {"review.md", "review.jsonl", "samples.meta.json", "verdict.json"} <= set(REVIEW_FILES)


def test_table_size(capsys):
    """The table's size, as the issue's closing note reports it (cells: input x form x change)."""
    size = {"config fields x (edited, removed, added)": 3 * len(_pinned_fields()),
            "data forms x changes (gate)": len(DATA_FORMS) * len(CHANGES),
            "data forms x changes (trainer's loader)": len([f for f in DATA_FORMS if f.startswith(("data_files",
                                                                                                  "path"))]) * 5,
            "model forms x files x changes (gate and trainer)": len(MODEL_FORMS) * len(MODEL_FILES) * len(CHANGES),
            "sidecars x changes": len(SIDECARS) * len(CHANGES),
            "training interpreter x changes": len(PYTHON_CHANGES), "review files x changes": len(REVIEW_FILES) * 5,
            "data directories x hidden files x changes": 3 * len(DIRECTORY_FORMS) * len(HIDDEN_FILES),
            "parts absent at the verdict x appearing": len(APPEARS), "verdict record shapes": len(_verdict_shapes()),
            "output_dir forms x (validation, launch gate, trainer)": 3 * len(FORMS_OF_OUTPUT)}
    assert all(size.values())
    with capsys.disabled():
        print("\ngate table:", size, "total", sum(size.values()))


# ---------------------------------------------------------------- end-to-end rows: the real trainer
E2E = {"max_steps": 1, "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 12,
       "logging_steps": 1, "save_steps": 1, "gradient_accumulation_steps": 1, "report_to": "none"}


def _passed_run(workspace: Path, name: str, model: str = "tiny") -> Path:
    from support import emit_run, pass_inspection

    run_dir = emit_run(name, dataset=str(_jsonl(workspace / f"{name}.jsonl", [
        {"prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(16)])), base=E2E, model=model)
    pass_inspection(run_dir, max_samples=None, reviewer="ana")
    return run_dir


def _build(run_dir: Path, capsys, *argv: str):
    """train/train.py's build_trainer as launch.sh runs it (support.trainer_or_refusal) with more arguments."""
    import contextlib
    import importlib.util
    import time

    spec = importlib.util.spec_from_file_location(f"train_{time.time_ns()}", run_dir / "train" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with contextlib.chdir(run_dir):
        try:
            return module.build_trainer(["--config", "train/config.yaml", *argv]), None
        except SystemExit as exc:
            assert exc.code == 3, exc.code
            return None, capsys.readouterr().err


@pytest.mark.slow  # samples the tiny model and builds its trainer
def test_the_trainer_runs_from_what_it_verified(workspace, tiny_model, capsys, monkeypatch):
    """One passed run, each row through train/train.py's own build_trainer: the rows it trains on are in memory
    (the datasets cache is gone), a verdict swapped after the gate is refused by its hash, a checkpoint from
    elsewhere is refused, and a weight changed after the check is refused before training."""
    from mcp_server.inspection.trained import VERDICT_SHA_ENV, InputsChanged, confirm_loaded_model
    from mcp_server.workspace import sha256_file

    model = shutil.copytree(tiny_model, workspace / "model")
    run_dir = _passed_run(workspace, "e2e", model=str(model))
    trainer, refusal = _build(run_dir, capsys)
    assert refusal is None and trainer.train_dataset.cache_files == []
    assert not list((run_dir / "cache").glob("datasets-*")), "the rows' cache outlived the load"

    monkeypatch.setenv(VERDICT_SHA_ENV, sha256_file(run_dir / "inspection" / "verdict.json"))
    verdict = json.loads((run_dir / "inspection" / "verdict.json").read_text())
    (run_dir / "inspection" / "verdict.json").write_text(json.dumps({**verdict, "note": "swapped after the gate"}))
    assert "verdict.json is not the verdict launch_training's gate judged" in _build(run_dir, capsys)[1]
    (run_dir / "inspection" / "verdict.json").write_text(json.dumps(verdict))
    monkeypatch.setenv(VERDICT_SHA_ENV, sha256_file(run_dir / "inspection" / "verdict.json"))

    elsewhere = shutil.copytree(tiny_model, workspace / "checkpoint-9")
    assert "resume_from_checkpoint" in _build(run_dir, capsys, "--resume_from_checkpoint", str(elsewhere))[1]

    trainer, refusal = _build(run_dir, capsys)
    assert refusal is None
    with open(model / "config.json", "a") as handle:  # changed after the check, while the weights loaded
        handle.write("\n")
    with pytest.raises(InputsChanged):
        confirm_loaded_model(trainer)
    assert "the model's files changed while it loaded" in capsys.readouterr().err


@pytest.mark.slow  # a real launch
def test_a_verdict_swapped_after_launch_is_never_believed(workspace, monkeypatch):
    """Through launch_training: verdict.json rewritten as soon as it returns (the trainer is still importing TRL),
    keeping its pins: the trainer compares the bytes with the hash the launcher's gate passed it, and refuses."""

    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest
    from support import wait_for

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    run_dir = _passed_run(workspace, "swapverdict")
    path = run_dir / "inspection" / "verdict.json"
    verdict = json.loads(path.read_text())
    result = launch_training(LaunchRequest(run=str(run_dir)))
    path.write_text(json.dumps({**verdict, "reviewer": "mallory"}))
    assert result.launched, result.message
    status = wait_for(run_dir, lambda s: s.state not in ("starting", "running"), timeout=400)
    log = (run_dir / "train" / "logs" / "stdout.log").read_text()
    assert status.state == "failed" and "is not the verdict launch_training's gate judged" in log, status.log_tail


# ---------------------------------------------------------------- the script runs as verified
def test_the_launchers_run_the_script_bytes_the_verdict_pinned(tmp_path, monkeypatch, capsys):
    """verified_script (what every launcher starts) runs train/train.py's bytes only when their hash is the one
    the launcher passed (the verdict's script pin), read once: a script swapped after the gate never runs."""
    from mcp_server.training.launchers.base import TRAIN_ARGS
    from mcp_server.training.trainer.verified_script import SCRIPT_SHA_ENV, main
    from mcp_server.workspace import sha256_file

    assert TRAIN_ARGS[:3] == ["-m", "mcp_server.training.trainer.verified_script", "train/train.py"]
    script = tmp_path / "train" / "train.py"
    script.parent.mkdir()
    script.write_text("import sys, pathlib\npathlib.Path(__file__).with_name('ran').write_text(' '.join(sys.argv))\n")
    monkeypatch.setenv(SCRIPT_SHA_ENV, sha256_file(script))
    monkeypatch.setattr("sys.path", list(os.sys.path))  # main() sets what `python train/train.py` would
    monkeypatch.setattr("sys.argv", list(os.sys.argv))
    monkeypatch.setitem(os.sys.modules, "__main__", os.sys.modules["__main__"])
    main([str(script), "--config", "c.yaml"])
    assert (script.parent / "ran").read_text() == f"{script} --config c.yaml"
    (script.parent / "ran").unlink()
    script.write_text(script.read_text() + "# swapped after the gate\n")
    with pytest.raises(SystemExit) as refused:
        main([str(script)])
    assert refused.value.code == 3 and "is not the train/train.py the inspection verdict reviewed" in \
        capsys.readouterr().err and not (script.parent / "ran").exists()
    # without the evidence key every record the trainer writes would read as unrecorded: refused before it runs
    monkeypatch.setenv(SCRIPT_SHA_ENV, sha256_file(script))
    monkeypatch.setenv("LLM_FINETUNING_STATE_DIR", str(tmp_path / "no-key-here"))
    with pytest.raises(SystemExit) as refused:
        main([str(script)])
    assert refused.value.code == 3 and "would read as unrecorded" in capsys.readouterr().err
    assert not (script.parent / "ran").exists()


# ---------------------------------------------------------------- the review files that back the verdict
REVIEW_FILES = {"samples.jsonl": "samples.jsonl", "samples.meta.json": "samples.meta.json", "review.json": "review",
                "review.md": "review.md", "review.jsonl": "review.jsonl", "verdict.json": "verdict"}


@pytest.fixture(scope="module")
def passed_run(tmp_path_factory, tiny_model):
    """One run with a passing verdict (sampled and inspected once for the module); each cell changes a copy."""
    from support import emit_run, module_workspace, pass_inspection

    with module_workspace(tmp_path_factory, "review-files-ws"):
        data = tmp_path_factory.mktemp("review-files") / "d.jsonl"  # outside the workspace, as a user's file is
        run_dir = emit_run("reviewed", dataset=str(_jsonl(data, [
            {"prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(16)])), base=E2E)
        pass_inspection(run_dir, max_samples=None, reviewer="ana")
    return run_dir


@pytest.mark.slow  # the module's run is sampled once (the worker process)
@pytest.mark.parametrize("how", [c for c in CHANGES if c != "added"])
@pytest.mark.parametrize("name", REVIEW_FILES)
def test_a_review_file_changed_closes_the_gate_naming_it(passed_run, tmp_path, name, how):
    """Each file the verdict signs or rests on, changed after it: the gate closes and its reason names the file
    (the trainer's check reads the same verdict and samples: test_the_trainer_runs_from_what_it_verified)."""
    from mcp_server.inspection.gate import check_inspection_gate

    run_dir = shutil.copytree(passed_run, tmp_path / passed_run.name, symlinks=True)
    assert check_inspection_gate(run_dir).passed
    _change(run_dir / "inspection" / name, how, tmp_path)
    gate = check_inspection_gate(run_dir)
    assert not gate.passed and REVIEW_FILES[name] in gate.reason, (name, how, gate.reason)


@pytest.mark.slow  # samples the tiny model
def test_sampling_loads_the_files_the_trainer_loads(workspace, tiny_model, capsys):
    """model_init_kwargs' subfolder: the weights under it are what sampling draws from and what the trainer
    loads (before, sampling loaded the folder's own weights: here a file that is no model at all)."""
    model = shutil.copytree(tiny_model, workspace / "model")
    shutil.copytree(tiny_model, model / "sub")
    weights = next(model.glob("*.safetensors"))
    weights.write_bytes(b"not the weights that train")
    from support import emit_run, pass_inspection

    run_dir = emit_run("subfolder", dataset=str(_jsonl(workspace / "subfolder.jsonl", [
        {"prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(16)])), base=E2E,
        model=str(model), model_init_kwargs={"subfolder": "sub"})
    pass_inspection(run_dir, max_samples=None, reviewer="ana")
    meta = json.loads((run_dir / "inspection" / "samples.meta.json").read_text())
    assert meta["trained"]["model"]["loads"] == {"subfolder": "sub"}
    trainer, refusal = _build(run_dir, capsys)
    assert refusal is None


# ---------------------------------------------------------------- fifth round (issue 48): rows each break lacked
# A hidden file in a data directory: `datasets` skips hidden files when it lists a directory, but the pin holds them
# too ("more than datasets reads, never less"): a loader that starts reading them, or a data_files glob that names
# them, trains nothing unseen.
DIRECTORY_FORMS = [f for f in DATA_FORMS if "directory" in f or "relative name" in f]


HIDDEN_FILES = [name for form, name in TREE_FILES.items() if "hidden" in form]


@pytest.mark.parametrize("file", HIDDEN_FILES)
@pytest.mark.parametrize("how", ["added", "edited", "removed"])
@pytest.mark.parametrize("form", DIRECTORY_FORMS)
def test_a_hidden_file_in_a_data_directory_changed_is_named(tmp_path, form, how, file):
    fields, target = _data_forms(tmp_path)[form]
    hidden = target.parent / file
    if how != "added":
        _jsonl(hidden, tag=" (hidden)")
    run = _run(tmp_path, {"model_name_or_path": str(_model(tmp_path / "model")), **fields})
    before = run_pins(run, REWARD)
    if how == "removed":
        hidden.unlink()
    else:
        _jsonl(hidden, tag=" (changed after the verdict)")
    moved = changes(before, run_pins(run, REWARD))
    assert moved and "the data set changed" in moved[0], (form, how, moved)


# A part run_pins returns as None (or not at all) for a run that lacks it, made to appear after the verdict.
def _appear_script(run: Run, tmp_path: Path) -> None:
    run.script.write_text("print('written after the verdict')\n")


def _appear_samples_meta(run: Run, tmp_path: Path) -> None:
    """Samples and their record, signed as a sampler signs them (only a signed record is read for its pins)."""
    run.samples.parent.mkdir(parents=True, exist_ok=True)
    run.samples.write_text("")
    sign_samples(run.dir, {"trained": {"rows": 4, "written": "after the verdict"}})


def _appear_agentic(run: Run, tmp_path: Path) -> None:
    run.agentic.write_text(json.dumps({"source_root": str(tmp_path), "tools": []}))


def _appear_reward_reads(run: Run, tmp_path: Path) -> None:
    """A review that says its rewards read a file (rewards.reads), written after a verdict on a review that read
    none (the review's own hash is the gate's first check; this is the pin's row)."""
    rubric = tmp_path / "rubric.json"
    rubric.write_text(json.dumps({"scale": 1.0}))
    run.review.parent.mkdir(parents=True, exist_ok=True)
    run.review.write_text(json.dumps({"reward_reads": {str(rubric): {"sha256": "0" * 64, "by": ["rubric_reward"]}}}))


APPEARS = {"script": _appear_script, "samples_meta": _appear_samples_meta, "trained": _appear_samples_meta,
           "agentic": _appear_agentic, "reward_reads": _appear_reward_reads}
# PART_NAMES' parts that are no key of run_pins: the prompt column is a key of the "trained" pin (its fingerprint).
NOT_A_RUN_PIN = {"prompt_column"}


def _bare_run(tmp_path: Path) -> Run:
    """A run with a config and nothing else: every part that can be absent is."""
    run = _run(tmp_path, {"model_name_or_path": str(_model(tmp_path / "model")),
                          "dataset_name": str(_jsonl(tmp_path / "d.jsonl"))})
    run.script.unlink()
    return run


def _absent_parts(tmp_path: Path) -> list[str]:
    pins = run_pins(_bare_run(tmp_path / "probe"), REWARD)
    return sorted({k for k, v in pins.items() if v is None} | (set(PART_NAMES) - set(pins) - NOT_A_RUN_PIN))


@pytest.mark.parametrize("part", sorted(APPEARS))
def test_a_part_absent_at_the_verdict_that_appears_later_is_named(tmp_path, part):
    """train.py, samples.meta.json (and its trained pin) or an agentic spec that did not exist when the verdict was
    recorded, written after it: the gate names the part (absent is a pinned value, not a wildcard)."""
    run = _bare_run(tmp_path)
    before = run_pins(run, REWARD)
    assert before.get(part) is None
    APPEARS[part](run, tmp_path)
    moved = changes(before, run_pins(run, REWARD))
    assert any(PART_NAMES[part] in line for line in moved), (part, moved)


def test_every_part_that_can_be_absent_has_an_appearing_row(tmp_path):
    """Generated from run_pins: a new part that can be absent gets no pass without a row above."""
    missing = set(_absent_parts(tmp_path)) - set(APPEARS)
    assert not missing, f"parts that can be absent with no row making them appear: {sorted(missing)}"


# The verdict record: every shape of a hand-written record that does not add up (or passes what cannot train)
# closes the gate, named.
def _verdict_shapes() -> dict[str, tuple[dict, str]]:
    ids = [0, 1, 2, 3]
    every = [{"id": i, "agree": True} for i in ids]
    return {
        "a pass that judges a subset of the reviewed samples": (
            {"sample_verdicts": every[:2], "agree": 2}, "a pass judges 2 of the 4 reviewed samples"),
        "a pass that judges one sample": ({"sample_verdicts": every[:1], "agree": 1}, "judges 1 of the 4"),
        "a sample judged twice": ({"sample_verdicts": [*every, every[0]], "agree": 5}, "two verdicts"),
        "a sample that was not reviewed": ({"sample_verdicts": [*every, {"id": 9, "agree": True}], "agree": 5},
                                           "not reviewed"),
        "counts that are not its per-sample verdicts": ({"agree": 3, "disagree": 1, "note": "one sample scored a "
                                                                                           "little generously"},
                                                        "counts do not match"),
        "a pass that disagrees with half": (
            {"sample_verdicts": [{"id": i, "agree": i < 2} for i in ids], "agree": 2, "disagree": 2,
             "note": "the reward is fine enough for these samples"}, "is a fail"),
        "a pass with a disagreement and no note": (
            {"sample_verdicts": [{"id": i, "agree": i > 0} for i in ids], "agree": 3, "disagree": 1}, "needs a note"),
        # a record that adds up, on samples that never succeeded: GRPO has no signal to learn from
        "a pass on samples that never succeeded": ({"base_success_rate": 0.0}, "never succeeded"),
        "a pass on a review routed to SFT first": ({"route": "sft_first"}, "never succeeded"),
    }


@pytest.mark.parametrize("shape", list(_verdict_shapes()))
def test_a_verdict_record_that_does_not_add_up_closes_the_gate(tmp_path, shape):
    import datetime as dt

    from mcp_server.inspection.gate import check_inspection_gate

    run = _run(tmp_path, {"model_name_or_path": str(_model(tmp_path / "model"))})
    run.rewards.write_text(json.dumps([{"name": "format", "params": {}, "weight": 1.0}]))
    run.samples.parent.mkdir(parents=True, exist_ok=True)
    run.samples.write_text("".join(json.dumps({"id": i}) + "\n" for i in range(4)))
    sign_samples(run.dir)  # as the sampler signs what it wrote
    record = {"verdict": "pass", "reviewer": "ana", "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(),
              "note": "", "pins": {}, "samples_sha256": "0" * 64, "review_sha256": "0" * 64, "success_rule": "r",
              "route": "grpo", "base_success_rate": 0.5, "reviewed_ids": [0, 1, 2, 3], "agree": 4, "disagree": 0,
              "sample_verdicts": [{"id": i, "agree": True} for i in range(4)]}
    fields, named = _verdict_shapes()[shape]
    run.verdict.write_text(json.dumps({**record, **fields}))
    gate = check_inspection_gate(run)
    assert not gate.passed and named in gate.reason, (shape, gate.reason)


# The trainer's checks cannot be switched from outside the process: LLM_FINETUNING_SAMPLING was the environment
# variable sampling set; a launching shell (or a site hook) that exported it turned the checks off.
def test_no_environment_variable_switches_the_trainers_checks(tmp_path, monkeypatch, capsys):
    from mcp_server.inspection.trained import RewardCodeChanged, reviewed_reward_funcs

    run = _run(tmp_path, {"model_name_or_path": str(_model(tmp_path / "model"))})
    run.rewards.write_text(json.dumps([{"name": "format_reward", "params": {}, "weight": 1.0}]))
    run.verdict.parent.mkdir(parents=True, exist_ok=True)
    run.verdict.write_text(json.dumps({"pins": {"reward_code": REWARD}}))  # another reward code than the run's
    for name in ("LLM_FINETUNING_SAMPLING", "LLM_FINETUNING_SAMPLE", "LLM_FINETUNING_INSPECTING"):
        monkeypatch.setenv(name, "1")
    with pytest.raises(RewardCodeChanged):
        reviewed_reward_funcs(run.dir)
    assert "refusing to train: the reward code" in capsys.readouterr().err
    from mcp_server.inspection.trained import sampling

    with sampling():  # sampling's own switch, in this process only: reports, never refuses
        funcs, _ = reviewed_reward_funcs(run.dir)
    assert funcs and "its scores were not reviewed" in capsys.readouterr().err
    with pytest.raises(RewardCodeChanged):  # ... and ends with the block
        reviewed_reward_funcs(run.dir)


# Site hooks: the launch script starts the trainer with nothing of the launching shell's Python environment, and the
# trainer refuses to run after a hook from outside its interpreter's installation.
def test_a_site_hook_from_outside_the_installation_is_refused(tmp_path, monkeypatch, capsys):
    import sysconfig
    import types

    from mcp_server.training.trainer.verified_script import main

    script = _marker_script(tmp_path, monkeypatch)
    for name, where in (("sitecustomize", tmp_path / "hooks" / "sitecustomize.py"),
                        ("usercustomize", Path.home() / ".local" / "usercustomize.py")):
        hook = types.ModuleType(name)
        hook.__file__ = str(where)
        monkeypatch.setitem(os.sys.modules, name, hook)
        with pytest.raises(SystemExit) as refused:
            main([str(script)])
        assert refused.value.code == 3 and f"{name} ({where})" in capsys.readouterr().err
        assert not (script.parent / "ran").exists()
        monkeypatch.delitem(os.sys.modules, name.split(" (")[0])
    distribution = types.ModuleType("sitecustomize")  # the interpreter's own (a distribution ships one)
    distribution.__file__ = str(Path(sysconfig.get_paths()["stdlib"]) / "sitecustomize.py")
    monkeypatch.setitem(os.sys.modules, "sitecustomize", distribution)
    main([str(script)])
    assert (script.parent / "ran").read_text() == "ran"


@pytest.mark.slow  # runs the rendered launch script's header in bash (no training)
def test_the_launch_script_gives_the_trainer_nothing_of_the_launching_shells_python(tmp_path):
    """A sitecustomize and a usercustomize on the launching shell's PYTHONPATH, PYTHONSTARTUP, PYTHONHOME-like
    variables and LLM_FINETUNING_SAMPLING: the trainer's interpreter (here one that reports what it got) runs no
    hook and sees PYTHONPATH = this package's folder alone; the SLURM job's script sets the same environment."""
    import subprocess
    import sys

    from mcp_server.interpreter import package_path
    from mcp_server.training.launchers.base import trainer_pythonpath
    from mcp_server.training.launchers.local.shell import render_launch_sh

    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in ("sitecustomize", "usercustomize"):
        (hooks / f"{name}.py").write_text(f"open({str(tmp_path / name)!r}, 'w').write('ran')\n")
    report = ("import json, os, sys; print(json.dumps({'path': os.environ.get('PYTHONPATH'), 'hooks': "
              "[m for m in ('sitecustomize', 'usercustomize') if m in sys.modules], 'cwd_first': sys.path[0] in "
              "('', os.getcwd()), 'python_vars': sorted(k for k in os.environ if k.startswith('PYTHON'))}))")
    run = tmp_path / "run"
    (run / "train").mkdir(parents=True)
    (run / "train" / "launch.sh").write_text(render_launch_sh("hooked", sys.executable, [sys.executable, "-c", report],
                                                              True, None))
    env = {**os.environ, "PYTHONPATH": f"{hooks}:{os.environ.get('PYTHONPATH', '')}", "PYTHONSTARTUP": str(
        hooks / "sitecustomize.py"), "PYTHONINSPECT": "", "PYTHONUSERBASE": str(hooks),
        "LLM_FINETUNING_SAMPLING": "1"}
    proc = subprocess.run(["bash", str(run / "train" / "launch.sh")], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["hooks"] == [] and not [n for n in ("sitecustomize", "usercustomize") if (tmp_path / n).exists()]
    assert got["path"] == trainer_pythonpath() and not got["cwd_first"], got  # this package alone (round 8, G4)
    assert got["python_vars"] == sorted(["PYTHONNOUSERSITE", "PYTHONSAFEPATH", "PYTHONUNBUFFERED"]
                                        + (["PYTHONPATH"] if package_path() else [])), got
    from mcp_server.training.launchers.base import python_env
    from mcp_server.training.launchers.slurm.script import SlurmLayout, render_sbatch

    sbatch = render_sbatch(SlurmLayout(run_dir=str(run), job_name="hooked", comment="c", python=sys.executable,
                                       nodes=2, train_nodes=2, processes_per_node=1, gpus_per_node=0, strategy="ddp",
                                       output_dir="checkpoints", pythonpath=trainer_pythonpath()), "tiny", [])
    assert python_env(trainer_pythonpath()) in sbatch + "\n"
    assert "-m mcp_server.training.trainer.verified_script" in sbatch


# A reward's helpers, however the reward module imports them at its import: copied for the trainer and hashed.
DYNAMIC_REWARD = '''import importlib

_computed = importlib.import_module("{pkg}_helper_" + "computed")
importlib.import_module("{pkg}_helper_literal")


def reward(completions, **kwargs):
    import sys

    value = _computed.VALUE + sys.modules["{pkg}_helper_literal"].VALUE
    return [value for _ in completions]
'''


def test_a_reward_helper_imported_by_a_computed_name_is_copied_and_pinned(tmp_path, monkeypatch):
    """Break 2 of the fifth round: `importlib.import_module("helper")` at the reward module's import was neither
    copied into inspection/reward_code/ nor hashed; edited after the verdict it trained with another reward."""
    from mcp_server.inspection.trained import keep_reviewed_code, unkept_reward_code
    from mcp_server.rewards import reward_code_sha256
    from mcp_server.rewards.registry import reward_code_files

    pkg = f"dyn{abs(hash(str(tmp_path)))}"
    code = tmp_path / "code"
    code.mkdir()
    (code / f"{pkg}_reward.py").write_text(DYNAMIC_REWARD.format(pkg=pkg))
    for helper in ("computed", "literal"):
        (code / f"{pkg}_helper_{helper}.py").write_text("VALUE = 1.0\n")
    monkeypatch.syspath_prepend(str(code))
    rewards = [{"name": f"{pkg}_reward.reward", "params": {}, "weight": 1.0}]
    files = reward_code_files(rewards)
    assert {f"{pkg}_helper_computed.py", f"{pkg}_helper_literal.py"} <= set(files), sorted(files)
    run = _run(tmp_path, {"model_name_or_path": str(_model(tmp_path / "model"))})
    (run.dir / "inspection").mkdir()
    keep_reviewed_code(run, rewards)
    assert (run.reward_code / f"{pkg}_helper_computed.py").read_text() == "VALUE = 1.0\n"
    reviewed = reward_code_sha256(rewards)
    for helper in ("computed", "literal"):
        path = code / f"{pkg}_helper_{helper}.py"
        path.write_text("VALUE = 7.0\n")  # edited after the verdict
        assert reward_code_sha256(rewards) != reviewed, helper
        assert unkept_reward_code(run, rewards) == [path.name]
        path.write_text("VALUE = 1.0\n")
    assert reward_code_sha256(rewards) == reviewed and unkept_reward_code(run, rewards) == []


# output_dir, every form it can take x whether it is the run's own: validation, the launch gate and the trainer.
def _output_forms(run: Run, tmp_path: Path) -> dict[str, tuple[str, bool]]:
    """form -> (output_dir as written, whether it is a folder of the run)."""
    (run.dir / "linked").symlink_to(tmp_path, target_is_directory=True)
    other = tmp_path / "runs" / "other-run" / "checkpoints"
    return {"relative (emitted)": ("checkpoints", True), "relative, nested": ("out/grpo", True),
            "absolute, inside the run": (str(run.dir / "checkpoints"), True),
            "absolute, elsewhere": (str(tmp_path / "elsewhere"), False), "/tmp": ("/tmp/elsewhere", False),
            "relative, climbing out": ("../elsewhere", False), "the run directory itself": (".", False),
            "through a link out of the run": ("linked/out", False), "another run's": (str(other), False),
            "home": ("~/checkpoints", False)}


FORMS_OF_OUTPUT = [
    "relative (emitted)", "relative, nested", "absolute, inside the run", "absolute, elsewhere", "/tmp",
    "relative, climbing out", "the run directory itself", "through a link out of the run", "another run's", "home"]


@pytest.mark.parametrize("form", FORMS_OF_OUTPUT)
def test_an_output_dir_outside_the_run_is_refused_everywhere(tmp_path, form, capsys):
    """Break 3 of the fifth round: output_dir is unpinned, and /tmp/elsewhere set after the verdict carried the
    checkpoints out of the workspace. Validation, the launch gate and the trainer's check each refuse it."""
    from types import SimpleNamespace

    from mcp_server.inspection.trained import InputsChanged, check_reviewed_inputs
    from mcp_server.recipe.runspec import RunSpec
    from mcp_server.recipe.validate import validate_spec
    from mcp_server.training.launch_gates import foreign_output_dir

    run = _run(tmp_path, {"model_name_or_path": str(_model(tmp_path / "model"))})
    forms = _output_forms(run, tmp_path)
    assert sorted(forms) == sorted(FORMS_OF_OUTPUT)
    value, own = forms[form]
    spec = RunSpec(values={"model_name_or_path": "tiny", "dataset_name": "tiny", "output_dir": value}, rewards=[],
                   base_dir=run.dir)
    found = [f for f in validate_spec(spec).findings if f.code == "output_dir_outside_run"]
    assert (not found) == own, (form, found)
    assert not found or (found[0].field == "output_dir" and found[0].severity == "error")
    assert (foreign_output_dir(run, {"output_dir": value}) is None) == own, form
    args = SimpleNamespace(output_dir=value, resume_from_checkpoint=None)
    if own:
        return
    with pytest.raises(InputsChanged):  # before it reads anything else
        check_reviewed_inputs(run.dir, None, "prompt", None, args, None)
    assert "is not a folder of this run" in capsys.readouterr().err


HOOK = '''import os
if os.environ.get("LLM_FINETUNING_RUN_DIR"):  # only in the run's processes (train/launch.sh exports it)
    open({marker!r}, "a").write("ran\\n")
    os.environ["LLM_FINETUNING_SAMPLING"] = "1"
    with open({data!r}, "a") as rows:
        rows.write('{{"prompt": "unreviewed", "answer": "0"}}\\n')
'''


@pytest.mark.slow  # a real launch
def test_a_site_hook_on_the_launching_shells_pythonpath_never_runs_in_the_trainer(workspace, monkeypatch, tmp_path):
    """Break 1 of the fifth round, end to end: a sitecustomize on the PYTHONPATH of the shell that launches (which
    launch.sh kept) rewrote the data and set the sampling switch, and the run succeeded on unreviewed rows. Now the
    trainer's Python inherits no PYTHON* variable: the hook never runs and the run trains on the reviewed rows."""

    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest
    from support import wait_for

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    run_dir = _passed_run(workspace, "hooked")
    data = workspace / "hooked.jsonl"
    reviewed = data.read_bytes()
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    marker = tmp_path / "hook-ran"
    (hooks / "sitecustomize.py").write_text(HOOK.format(marker=str(marker), data=str(data)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("LLM_FINETUNING_SAMPLING", "1")
    result = launch_training(LaunchRequest(run=str(run_dir)))
    assert result.launched, result.message
    status = wait_for(run_dir, lambda s: s.state not in ("starting", "running"), timeout=400)
    assert not marker.exists(), "the launching shell's sitecustomize ran in the trainer"
    assert data.read_bytes() == reviewed
    assert status.state == "succeeded", (status.state, status.log_tail)


# Round 6 (issue 48): what runs before the trainer's checks, and what the trainer imports as the reviewed reward.
def test_the_launch_passes_on_no_shell_hook(tmp_path):
    """BASH_ENV (sourced by bash before train/launch.sh), an exported function named `export` (wins over the builtin
    and re-adds a PYTHONPATH after the script cleared it), xtrace with a PS4 command, LD_PRELOAD: none reaches the
    launch's bash or the SLURM job; what CUDA and torch need is kept."""
    import sys

    from mcp_server.interpreter import training_env

    hooks = {"BASH_ENV": str(tmp_path / "hook.sh"), "ENV": str(tmp_path / "hook.sh"),
             "BASH_FUNC_export%%": "() { builtin export \"$@\"; }", "BASH_FUNC_python%%": "() { :; }",
             "SHELLOPTS": "xtrace", "PS4": "$(touch /tmp/x)", "CDPATH": str(tmp_path), "LD_PRELOAD": "/tmp/evil.so",
             "LD_AUDIT": "/tmp/evil.so"}
    kept = {"LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "CUDA_VISIBLE_DEVICES": "0", "HF_HOME": str(tmp_path)}
    env = training_env(sys.executable, {**hooks, **kept, "PATH": os.environ["PATH"]})
    assert not set(hooks) & set(env), sorted(set(hooks) & set(env))
    assert {k: env[k] for k in kept} == kept


def test_the_trainer_refuses_this_package_from_elsewhere_than_the_launch_script_put_it(tmp_path, monkeypatch,
                                                                                        capsys):
    """A shell hook or a wrapper interpreter that puts a copy of this package first on PYTHONPATH: the copy's checks
    (or none) would run; verified_script refuses before it runs train.py."""
    import mcp_server
    from mcp_server.training.trainer.verified_script import main

    script = _marker_script(tmp_path, monkeypatch)
    monkeypatch.setenv("LLM_FINETUNING_PACKAGE", str(tmp_path / "meant"))
    with pytest.raises(SystemExit) as refused:
        main([str(script)])
    here = os.path.dirname(os.path.realpath(mcp_server.__file__))
    assert refused.value.code == 3 and f"imported from {here}" in capsys.readouterr().err
    assert not (script.parent / "ran").exists()
    monkeypatch.setenv("LLM_FINETUNING_PACKAGE", os.path.dirname(here))  # where the launch script put it
    from mcp_server.training.trainer.verified_script import foreign_modules, foreign_path_entries

    for name in foreign_modules():  # this test process's own (pytest's tests, fixtures): a trainer holds none
        monkeypatch.delitem(os.sys.modules, name.split(" (")[0])
    foreign = foreign_path_entries()  # and the folders it searched for them (its tests, tmp_path's runs)
    monkeypatch.setattr(os.sys, "path", [p for p in os.sys.path if p not in foreign])
    for entry in foreign:
        monkeypatch.delitem(os.sys.path_importer_cache, entry, raising=False)
    main([str(script)])
    assert (script.parent / "ran").read_text() == "ran"


def _reward_run(tmp_path: Path, module: str, monkeypatch) -> tuple[Run, list]:
    """A run whose reward is `module.nonempty_reward`, its reviewed copy in inspection/reward_code/ and a verdict
    pinning its hash and that copy's files, as record_inspection_verdict leaves them."""
    import sys

    from mcp_server.inspection.trained import keep_reviewed_code
    from mcp_server.rewards import reward_code_sha256

    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / f"{module}.py").write_text("def nonempty_reward(completions, **kw):\n"
                                            "    return [1.0 for c in completions]\n")
    monkeypatch.chdir(workspace)
    monkeypatch.setattr("sys.path", [str(workspace), *sys.path])
    run = _run(workspace / "runs", {})
    rewards = [{"name": f"{module}.nonempty_reward", "params": {}, "weight": 1.0}]
    run.rewards.write_text(json.dumps(rewards))
    run.verdict.parent.mkdir(parents=True, exist_ok=True)
    files = keep_reviewed_code(run, rewards)
    run.verdict.write_text(json.dumps({"pins": {"reward_code": reward_code_sha256(rewards)},
                                       "reward_code_files": files}))
    monkeypatch.setattr("sys.path", [p for p in sys.path if p != str(workspace)])
    monkeypatch.delitem(sys.modules, module)
    sys.path_importer_cache.clear()
    return run, rewards


def test_a_package_folder_beside_the_reviewed_module_is_refused_before_it_runs(tmp_path, monkeypatch, capsys):
    """inspection/reward_code/myrew/__init__.py beside the reviewed myrew.py wins the import: the gate closes
    naming it, and the trainer refuses before importing anything from there (the package's code never runs)."""
    from mcp_server.inspection.trained import RewardCodeChanged, reviewed_reward_funcs, unkept_reward_code

    run, rewards = _reward_run(tmp_path, "round6_pkgdir_reward", monkeypatch)
    package = run.reward_code / "round6_pkgdir_reward"
    package.mkdir()
    marker = tmp_path / "package-ran"
    (package / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                         "def nonempty_reward(completions, **kw):\n"
                                         "    return [0.25 for c in completions]\n")
    monkeypatch.setattr("sys.pycache_prefix", os.sys.pycache_prefix)
    monkeypatch.setattr("sys.dont_write_bytecode", os.sys.dont_write_bytecode)
    monkeypatch.setattr("sys.path", list(os.sys.path))
    with pytest.raises(RewardCodeChanged):
        reviewed_reward_funcs(run.dir)
    assert "round6_pkgdir_reward/" in capsys.readouterr().err and not marker.exists()
    monkeypatch.chdir(tmp_path / "ws")
    monkeypatch.setattr("sys.path", [str(tmp_path / "ws"), *os.sys.path])
    assert "round6_pkgdir_reward/" in unkept_reward_code(run, rewards)
    assert not marker.exists()


def test_the_trainer_imports_the_reviewed_source_not_a_forged_pyc(tmp_path, monkeypatch, capsys):
    """A .pyc in inspection/reward_code/__pycache__ compiled from other code, its header stamped with the reviewed
    source's mtime and size: the trainer imports the source whose hash the verdict pinned."""
    import importlib.util
    import py_compile
    import struct

    from mcp_server.inspection.trained import reviewed_reward_funcs

    module = "round6_pyc_reward"
    run, _ = _reward_run(tmp_path, module, monkeypatch)
    source = run.reward_code / f"{module}.py"
    size, mtime = source.stat().st_size, int(source.stat().st_mtime)
    evil = "def nonempty_reward(completions, **kw):\n    return [0.25 for c in completions]\n"
    evil += "#" * (size - len(evil) - 1) + "\n"
    (tmp_path / "evil.py").write_text(evil)
    py_compile.compile(str(tmp_path / "evil.py"), cfile=str(tmp_path / "evil.pyc"))
    forged = bytearray((tmp_path / "evil.pyc").read_bytes())
    forged[8:16] = struct.pack("<II", mtime & 0xFFFFFFFF, size & 0xFFFFFFFF)
    (run.reward_code / "__pycache__").mkdir()
    monkeypatch.setattr("sys.pycache_prefix", None)  # where a plain interpreter looks (an earlier trainer in this
    Path(importlib.util.cache_from_source(str(source))).write_bytes(bytes(forged))  # process moved the prefix)
    monkeypatch.setattr("sys.dont_write_bytecode", os.sys.dont_write_bytecode)
    monkeypatch.setattr("sys.path", list(os.sys.path))
    monkeypatch.setitem(os.sys.modules, module, None)
    monkeypatch.delitem(os.sys.modules, module)
    funcs, _ = reviewed_reward_funcs(run.dir)
    assert [f(completions=["a", "b"]) for f in funcs] == [[1.0, 1.0]]


# ---------------------------------------------------------------- the m3 audit (issue 48): rows its survivors lacked
def _reviewed_run(tmp_path: Path, config: dict | None = None, weights: tuple[float, ...] = (1.0,)) -> Run:
    """A run as inspect_rewards leaves it, constructed: samples, review.json with the hashes of review.md and
    review.jsonl, and train/rewards.json (one reward per weight); no sampling."""
    from mcp_server.rewards import reward_code_sha256
    from mcp_server.workspace import sha256_file

    run = _run(tmp_path, {"model_name_or_path": str(_model(tmp_path / "model")), **(config or {})})
    run.rewards.write_text(json.dumps([{"name": "format_reward", "params": {}, "weight": w} for w in weights]))
    rewards = [{"name": "format_reward", "params": {}, "weight": 1.0}]
    run.samples.parent.mkdir(parents=True, exist_ok=True)
    run.samples.write_text("".join(json.dumps({"id": i}) + "\n" for i in range(2)))
    sign_samples(run.dir)  # as the sampler signs what it wrote
    run.review_md.write_text("# review\n")
    run.review_jsonl.write_text("".join(json.dumps({"id": i, "score": 1.0}) + "\n" for i in range(2)))
    run.review.write_text(json.dumps({
        "result": {"samples_sha256": sha256_file(run.samples), "rewards": rewards,
                   "reward_code_sha256": reward_code_sha256(rewards), "route": "grpo"},
        "reviewed_ids": [0, 1], "review_md_sha256": sha256_file(run.review_md),
        "review_jsonl_sha256": sha256_file(run.review_jsonl)}))
    return run


@pytest.mark.parametrize("sheet", ["review.md", "review.jsonl"])
def test_a_review_sheet_edited_after_the_review_backs_no_verdict(tmp_path, sheet):
    """review.md or review.jsonl (the per-sample sheet) edited by hand after inspect_rewards: no verdict is
    recorded on it, and the refusal names the sheet (the gate's own row is the slow
    test_a_review_file_changed_closes_the_gate_naming_it)."""
    from mcp_server.inspection.gate import record_inspection_verdict
    from mcp_server.inspection.models import VerdictRequest

    run = _reviewed_run(tmp_path)
    path = run.dir / "inspection" / sheet
    path.write_text(path.read_text().replace("1.0", "0.0").replace("review", "edited review"))
    with pytest.raises(UserInputError, match=f"{sheet} is not the sheet inspect_rewards wrote"):
        record_inspection_verdict(VerdictRequest(run=str(run.dir), verdict="fail", reviewer="ana",
                                                 agree_with_rest=True))
    assert not run.verdict.exists()


@pytest.mark.parametrize(("configured", "same"), [([1.0, 2.0], True), ([1, 2], True), ([2.0, 1.0], False),
                                                  ([1.0], False), ([1.0, 2.0, 0.0], False)])
def test_reward_weights_are_matched_reward_by_reward(tmp_path, configured, same):
    """train/config.yaml's reward_weights against train/rewards.json's weights [1, 2]: the same weights in the same
    order are one; swapped between the rewards (TRL would weigh each reward by the other's) they are not, and a
    pass is refused naming reward_weights."""
    from mcp_server.inspection.gate import record_inspection_verdict
    from mcp_server.inspection.models import VerdictRequest

    run = _reviewed_run(tmp_path, {"reward_weights": configured}, weights=(1.0, 2.0))
    with pytest.raises(UserInputError) as refused:  # a constructed run: a pass is refused either way
        record_inspection_verdict(VerdictRequest(run=str(run.dir), verdict="pass", reviewer="ana",
                                                 agree_with_rest=True))
    assert ("train/config.yaml's reward_weights" in str(refused.value)) != same, (configured, str(refused.value))
    assert not run.verdict.exists()


# ---------------------------------------------------------------- a verdict against the review it signs
# A verdict.json whose hashes are right (samples, review.json) judged against that review: each field it restates
# (route, base rate, success rule, samples hash, reviewed ids, the reward-code hash) differing from the review's
# closes the gate naming that field; the review changed, gone, or its success rule changed each say so.
def _signed_run(tmp_path: Path) -> tuple[Run, dict, dict]:
    """(run, review, verdict) where the verdict restates its review exactly: the gate gets as far as the review
    sheets (review.md, which this constructed run lacks)."""
    import datetime as dt

    from mcp_server.workspace import sha256_file

    run = _run(tmp_path, {"model_name_or_path": str(_model(tmp_path / "model"))})
    run.rewards.write_text(json.dumps([{"name": "format", "params": {}, "weight": 1.0}]))
    run.samples.parent.mkdir(parents=True, exist_ok=True)
    run.samples.write_text("".join(json.dumps({"id": i}) + "\n" for i in range(4)))
    sign_samples(run.dir)  # as the sampler signs what it wrote
    review = {"reviewed_ids": [0, 1, 2, 3], "result": {
        "route": "grpo", "base_success_rate": 0.5, "success_rule": "total reward > 0",
        "samples_sha256": sha256_file(run.samples), "reward_code_sha256": REWARD}}
    run.review.write_text(json.dumps(review))
    verdict = {"verdict": "pass", "reviewer": "ana", "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(),
               "note": "", "pins": {"reward_code": REWARD}, "samples_sha256": sha256_file(run.samples),
               "review_sha256": sha256_file(run.review), "success_rule": "total reward > 0", "route": "grpo",
               "base_success_rate": 0.5, "reviewed_ids": [0, 1, 2, 3], "agree": 4, "disagree": 0,
               "sample_verdicts": [{"id": i, "agree": True} for i in range(4)]}
    run.verdict.write_text(json.dumps(verdict))
    return run, review, verdict


def _gate_reason(run: Run) -> str:
    from mcp_server.inspection.gate import check_inspection_gate

    gate = check_inspection_gate(run)
    assert not gate.passed
    return gate.reason


RESTATED = {  # the verdict's field -> (its forged value, what the gate says)
    "route": ("review_again", "its route is 'review_again' but the review's is 'grpo'"),
    "base_success_rate": (0.9, "its base_success_rate is 0.9 but the review's is 0.5"),
    "success_rule": ("total reward >= 0", "its success_rule is 'total reward >= 0'"),
    "reviewed_ids": ([0, 1, 2, 3, 4], "its reviewed_ids is [0, 1, 2, 3, 4]"),
    "pins": ({"reward_code": "1" * 64}, "its reward-code hash is not the reviewed reward's"),
}


def test_a_verdict_that_restates_its_review_gets_as_far_as_the_sheets(tmp_path):
    run, _, _ = _signed_run(tmp_path)
    assert "review.md is not the sheet inspect_rewards wrote" in _gate_reason(run)


@pytest.mark.parametrize("field", list(RESTATED))
def test_a_verdict_field_that_is_not_the_reviews_closes_the_gate(tmp_path, field):
    run, _, verdict = _signed_run(tmp_path)
    value, said = RESTATED[field]
    forged = {**verdict, field: value}
    if field == "reviewed_ids":  # a record that adds up on its own
        forged.update(agree=5, sample_verdicts=[{"id": i, "agree": True} for i in range(5)])
    run.verdict.write_text(json.dumps(forged))
    reason = _gate_reason(run)
    assert "is not a verdict on this review" in reason and said in reason, (field, reason)


def test_the_samples_hash_the_review_holds_is_compared(tmp_path):
    from mcp_server.workspace import sha256_file

    run, review, verdict = _signed_run(tmp_path)
    run.review.write_text(json.dumps({**review, "result": {**review["result"], "samples_sha256": "2" * 64}}))
    run.verdict.write_text(json.dumps({**verdict, "review_sha256": sha256_file(run.review)}))
    assert f"its samples_sha256 is '{verdict['samples_sha256']}' but the review's is '{'2' * 64}'" in \
        _gate_reason(run)


@pytest.mark.parametrize("change", ["success rule", "another field", "removed", "samples"])
def test_the_review_or_samples_changed_since_the_verdict_is_named(tmp_path, change):
    run, review, _ = _signed_run(tmp_path)
    if change == "success rule":
        run.review.write_text(json.dumps({**review, "result": {**review["result"], "success_rule": "any"}}))
        said = "the review is not the one the verdict signed (ana at"
        assert "the success rule changed ('total reward > 0' -> 'any')" in _gate_reason(run)
    elif change == "another field":
        run.review.write_text(json.dumps({**review, "result": {**review["result"], "base_success_rate": 0.75}}))
        said = "): review.json changed"
    elif change == "removed":
        run.review.unlink()
        said = "): review.json is gone"
    else:
        run.samples.write_text(run.samples.read_text() + json.dumps({"id": 4}) + "\n")
        said = "samples.jsonl changed since the verdict (ana at"
    assert said in _gate_reason(run), change


@pytest.mark.parametrize(("verdict", "rate", "said"), [
    ("fail", 0.5, "the verdict is 'fail' (ana at"), ("pass", 0.0, "never succeeded"),
    ("pass", 0.01, "review.md is not the sheet")])
def test_a_fail_or_a_zero_base_rate_closes_the_gate_whatever_else_holds(tmp_path, verdict, rate, said):
    run, review, record = _signed_run(tmp_path)
    from mcp_server.workspace import sha256_file

    run.review.write_text(json.dumps({**review, "result": {**review["result"], "base_success_rate": rate}}))
    run.verdict.write_text(json.dumps({**record, "verdict": verdict, "base_success_rate": rate,
                                       "review_sha256": sha256_file(run.review)}))
    assert said in _gate_reason(run), (verdict, rate)


# The per-sample record at its edges (VerdictRecord.problem, pass_problem): the closed gate names the problem, or
# gets past the record (to the review sheets) when the record adds up.
RECORD_EDGES = {  # name -> (fields, said; None: the record adds up)
    "one disagreement with a four-word note": ({"sample_verdicts": [{"id": i, "agree": i > 0} for i in range(4)],
                                                "agree": 3, "disagree": 1, "note": "the format is fine"}, None),
    "one disagreement with a three-word note": ({"sample_verdicts": [{"id": i, "agree": i > 0} for i in range(4)],
                                                 "agree": 3, "disagree": 1, "note": "format is fine"},
                                                "needs a note"),
    "more disagreements than agreements": ({"sample_verdicts": [{"id": i, "agree": i == 0} for i in range(4)],
                                            "agree": 1, "disagree": 3, "note": "a long enough note for it"},
                                           "is a fail"),
    "a fail that judges a subset": ({"verdict": "fail", "sample_verdicts": [{"id": 0, "agree": False}], "agree": 0,
                                     "disagree": 1}, "the verdict is 'fail'"),
    "a fail whose counts are not its verdicts": ({"verdict": "fail", "sample_verdicts": [{"id": 0, "agree": False}],
                                                  "agree": 1, "disagree": 0}, "counts do not match"),
    "a disagree count that is not its verdicts": ({"disagree": 1, "note": "one was a little generous"},
                                                  "counts do not match"),
    "the last sample judged twice": ({"sample_verdicts": [{"id": i, "agree": True} for i in (0, 1, 2, 3, 3)],
                                      "agree": 5}, "two verdicts"),
    "a reviewer of spaces": ({"reviewer": "  "}, "reviewer"),
    "a reviewer with an escape code": ({"reviewer": "ana\x1b[2J"}, "reviewer"),
    "a samples hash of 63 characters": ({"samples_sha256": "0" * 63}, "samples_sha256"),
    "no recorded time": ({"recorded_at": None}, "recorded_at"),
}


@pytest.mark.parametrize("edge", list(RECORD_EDGES))
def test_a_verdict_record_at_its_edges(tmp_path, edge):
    run, _, verdict = _signed_run(tmp_path)
    fields, said = RECORD_EDGES[edge]
    run.verdict.write_text(json.dumps({**verdict, **fields}))
    reason = _gate_reason(run)
    if said is None:
        assert "review.md is not the sheet" in reason, (edge, reason)
    else:
        assert said in reason, (edge, reason)


# ---------------------------------------------------------------- what the closed gate says changed (pins.changes)
# Each way a pinned part can differ between the verdict's pins and today's: the line names the part and what of it
# moved, a part present on one side only included.
def _data(*sources: tuple[str, str], **fields) -> dict:
    return {"sources": [{"source": s, "sha256": h} for s, h in sources], **fields}


CHANGE_ROWS = {  # name -> (old pins, new pins, every text the lines must hold)
    "a part only the verdict pinned": ({"script": "a", "agentic": {"env": 1}}, {"script": "a"},
                                       ["the environment and tools", "{\"env\": 1} -> null"]),
    "a part only today has": ({"script": "a"}, {"script": "a", "prompt_column": "q"},
                              ["the prompt column changed (null -> q)"]),
    "the script": ({"script": "a"}, {"script": "b"}, ["train/train.py changed"]),
    "a data file's content": ({"data": [_data(("/d/a.jsonl", "1"))]}, {"data": [_data(("/d/a.jsonl", "2"))]},
                              ["/d/a.jsonl: its content changed"]),
    "a data file added": ({"data": [_data(("/d/a.jsonl", "1"))]},
                          {"data": [_data(("/d/a.jsonl", "1"), ("/d/b.jsonl", "3"))]}, ["/d/b.jsonl added"]),
    "a data file no longer read": ({"data": [_data(("/d/a.jsonl", "1"), ("/d/b.jsonl", "3"))]},
                                   {"data": [_data(("/d/a.jsonl", "1"))]}, ["/d/b.jsonl no longer read"]),
    "a data entry's field": ({"data": [_data(("/d/a.jsonl", "1"), split="train")]},
                             {"data": [_data(("/d/a.jsonl", "1"), split="test")]}, ["split: train -> test"]),
    "a data entry's field only today has": ({"data": [_data(("/d/a.jsonl", "1"))]},
                                            {"data": [_data(("/d/a.jsonl", "1"), data_dir="x")]},
                                            ["data_dir: null -> x"]),
    "a data entry added": ({"data": [_data(("/d/a.jsonl", "1"))]},
                           {"data": [_data(("/d/a.jsonl", "1")), _data()]}, ["1 -> 2 data entries"]),
    "a model's files": ({"model": {"model": "m", "files_sha256": "1"}}, {"model": {"model": "m", "files_sha256": "2"}},
                        ["the model changed (its files changed (", "inode or ctime"]),
    "a model field only today has": ({"model": {"model": "m"}}, {"model": {"model": "m", "loads": {"subfolder": "s"}}},
                                     ["the model changed (loads: null -> {\"subfolder\": \"s\"})"]),
    "the sampling settings' files_sha256 is a field": ({"sampling": {"files_sha256": "1"}},
                                                       {"sampling": {"files_sha256": "2"}}, ["files_sha256: 1 -> 2"]),
    "the reward code": ({"reward_code": "1"}, {"reward_code": "2"}, ["the reward changed (a name, param or weight"]),
}


@pytest.mark.parametrize("row", list(CHANGE_ROWS))
def test_the_gate_says_what_of_a_pinned_part_changed(row):
    old, new, said = CHANGE_ROWS[row]
    lines = changes(old, new)
    assert len(lines) == 1 and all(s in lines[0] for s in said), (row, lines)
    assert changes(old, dict(old)) == [] and changes(new, dict(new)) == []


def test_every_part_that_changed_has_its_line_in_order():
    old = {"model": {"model": "m"}, "script": "a", "reward_code": "1"}
    new = {"model": {"model": "n"}, "script": "b", "reward_code": "2"}
    lines = changes(old, new, "its module changed")
    assert [line.split(" changed")[0] for line in lines] == ["the model", "train/train.py", "the reward"]
    assert lines[2] == "the reward changed (its module changed)"


# ---------------------------------------------------------------- which files under train/ are pinned
# train_files_pin: every file under train/ that no other pin covers (train.py imports from train/), and none that
# a launch or training writes there after the gate. Each row: output_dir -> the names pinned among TRAIN_LAYOUT.
TRAIN_LAYOUT = ("helper.py", "logs/stdout.log", "logs-attempt-2/stdout.log", "logsx/mod.py", "__pycache__/h.pyc",
                "pkg/__pycache__/m.pyc", "pkg/m.py", "sub/config.yaml", "launch.sh", "ckpt/checkpoint-1/w.bin",
                "empty/")
ALWAYS_PINNED = ["empty/", "helper.py", "logsx/", "logsx/mod.py", "pkg/", "pkg/m.py", "sub/", "sub/config.yaml"]


@pytest.mark.parametrize(("output_dir", "pinned"), [
    ("checkpoints", [*ALWAYS_PINNED, "ckpt/", "ckpt/checkpoint-1/", "ckpt/checkpoint-1/w.bin"]),
    ("train/ckpt", ALWAYS_PINNED),  # training's own checkpoints, inside train/
    ("train", [*ALWAYS_PINNED, "ckpt/", "ckpt/checkpoint-1/", "ckpt/checkpoint-1/w.bin"]),  # not all of train/
])
def test_the_files_under_train_that_are_pinned(tmp_path, output_dir, pinned):
    run = _run(tmp_path, {"model_name_or_path": "m", "output_dir": output_dir})
    for name in TRAIN_LAYOUT:
        path = run.dir / "train" / name
        if name.endswith("/"):
            path.mkdir(parents=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(name)
    found = pins_module.train_files_pin(run)
    assert sorted(found) == sorted(pinned), output_dir
    assert found["empty/"] == "directory" and found["helper.py"] != found["pkg/m.py"]


# ---------------------------------------------------------------- the gate before a verdict, and the verdict's door
@pytest.mark.parametrize(("state", "said"), [
    ("no rewards.json", "the run has no train/rewards.json"),
    ("no samples", "no samples: inspection/samples.jsonl does not exist"),
    ("a review routed to SFT first, on today's samples", "the last review found no prompt with a single success"),
    ("a review routed to SFT first, on other samples", "no verdict recorded"),
    ("a review routed to GRPO", "no verdict recorded"),
    ("a verdict that is not JSON", "cannot be read as a JSON object"),
    ("a verdict that is a JSON list", "cannot be read as a JSON object"),
    ("a verdict without its reviewer", "incomplete or malformed (reviewer)"),
])
def test_the_gate_before_a_verdict_says_where_the_run_is(tmp_path, state, said):
    from mcp_server.workspace import sha256_file

    run, review, verdict = _signed_run(tmp_path)
    run.verdict.unlink()
    route = "sft_first" if "SFT" in state else "grpo"
    samples = sha256_file(run.samples) if "today's" in state else "3" * 64
    run.review.write_text(json.dumps({**review, "result": {**review["result"], "route": route,
                                                           "samples_sha256": samples}}))
    if state == "no rewards.json":
        run.rewards.unlink()
    elif state == "no samples":
        run.samples.unlink()
    elif state == "a verdict that is not JSON":
        run.verdict.write_text("{pass")
    elif state == "a verdict that is a JSON list":
        run.verdict.write_text("[]")
    elif state == "a verdict without its reviewer":
        run.verdict.write_text(json.dumps({k: v for k, v in verdict.items() if k != "reviewer"}))
    assert said in _gate_reason(run), state


# An args file beside train.py (transformers' HfArgumentParser reads `<argv[0]>.args` over config.yaml): the launch,
# resume and the trainer refused it, the gate's own check (check_inspection_gate, the CLI's and MCP's) said nothing.
ARGS_FILES = {"train.args": "train/train.args", "another script's": "train/other.args",
              "a link to elsewhere": "train/train.args", "a link to nothing": "train/train.args"}


@pytest.mark.parametrize("state", ["a verdict on the review", "no verdict", "no samples"])
@pytest.mark.parametrize("form", list(ARGS_FILES))
def test_an_args_file_beside_the_training_script_closes_the_gate_naming_it(tmp_path, form, state):
    """Whatever else holds, the gate is closed, its reason names the file and its way on says to put the values in
    train/config.yaml and remove it: through the core and the CLI alike (the MCP tool calls the same function)."""
    from conftest import run_cli_json

    run, _, _ = _signed_run(tmp_path)
    if state != "a verdict on the review":
        run.verdict.unlink()
    if state == "no samples":
        run.samples.unlink()
    named = ARGS_FILES[form]
    path = run.dir / named
    if form.startswith("a link"):
        (tmp_path / "elsewhere.args").write_text("--temperature 0.5\n")
        path.symlink_to(tmp_path / ("elsewhere.args" if form == "a link to elsewhere" else "nothing.args"))
    else:
        path.write_text("--epsilon_high 5.0\n")
    reason = _gate_reason(run)
    assert f"{named} is an args file" in reason, (form, state, reason)
    proc, gate = run_cli_json("check-inspection-gate", str(run.dir), here=True)
    assert gate["passed"] is False and f"{named} is an args file" in gate["reason"], (form, state, gate)
    assert "train/config.yaml" in gate["how_to_clear"] and f"remove {named}" in gate["how_to_clear"], gate
    path.unlink()
    assert named not in _gate_reason(run)


@pytest.mark.slow  # starts the MCP server
def test_an_args_file_closes_the_gate_the_mcp_tool_answers(tmp_path):
    """The same row through the MCP server over stdio (check_inspection_gate, the tool a harness calls)."""
    import asyncio

    from conftest import call_mcp

    run, _, _ = _signed_run(tmp_path)
    (run.dir / "train" / "train.args").write_text("--epsilon_high 5.0\n")

    async def calls(client):
        return await client.call_tool("check_inspection_gate", {"run": str(run.dir)})

    gate = asyncio.run(call_mcp(calls)).structured_content
    assert gate["passed"] is False and "train/train.args is an args file" in gate["reason"], gate
    assert "remove train/train.args" in gate["how_to_clear"], gate


def _door_run(tmp_path: Path, reviewed=(8, 0, 2, 1, 7, 5), route: str = "grpo") -> Run:
    run = _reviewed_run(tmp_path)
    review = json.loads(run.review.read_text())
    run.review.write_text(json.dumps({**review, "reviewed_ids": list(reviewed),
                                      "result": {**review["result"], "route": route, "success_rule": "r",
                                                 "rewards_source": "train/rewards.json",
                                                 "base_success_rate": 0.5}}))
    return run


def _record(run: Run, verdict: str = "fail", **fields):
    from mcp_server.inspection.gate import record_inspection_verdict
    from mcp_server.inspection.models import VerdictRequest

    return record_inspection_verdict(VerdictRequest(run=str(run.dir), verdict=verdict, reviewer="ana", **fields))


@pytest.mark.parametrize(("request_fields", "field", "said"), [
    ({"sample_verdicts": [{"id": 3, "agree": False}]}, "sample_verdicts[0].id",
     "sample 3 is not in the review; reviewed ids are 0-2, 5, 7-8"),
    ({"sample_verdicts": [{"id": 8, "agree": False}, {"id": 0, "agree": True}, {"id": 8, "agree": True}]},
     "sample_verdicts[2].id", "sample 8 is listed twice"),
])
def test_the_verdicts_door_refuses_samples_that_were_not_reviewed_or_twice(tmp_path, request_fields, field, said):
    run = _door_run(tmp_path)
    with pytest.raises(UserInputError) as refused:
        _record(run, **request_fields)
    assert refused.value.field == field and said in str(refused.value), str(refused.value)
    assert not run.verdict.exists()


@pytest.mark.parametrize(("fields", "route", "field", "said"), [
    ({"sample_verdicts": [{"id": i, "agree": True} for i in (0, 1, 2, 5)]}, "grpo", "sample_verdicts",
     "missing 2: 7-8"),
    ({"sample_verdicts": [{"id": 0, "agree": False}], "agree_with_rest": True}, "grpo", "note", "needs a note"),
    ({"sample_verdicts": [{"id": i, "agree": False} for i in (0, 1, 2)], "agree_with_rest": True,
      "note": "the misses are only formatting noise"}, "grpo", "verdict", "disagrees with 3 of the 6"),
    ({"agree_with_rest": True}, "sft_first", "verdict", "do SFT first"),
])
def test_a_pass_that_cannot_be_one_is_refused_naming_the_field(tmp_path, fields, route, field, said):
    run = _door_run(tmp_path, route=route)
    with pytest.raises(UserInputError) as refused:
        _record(run, "pass", **fields)
    assert refused.value.field == field and said in str(refused.value), (field, str(refused.value))
    assert not run.verdict.exists()


def test_a_fail_records_each_sample_verdict_in_id_order_with_its_counts(tmp_path):
    run = _door_run(tmp_path)
    result = _record(run, sample_verdicts=[{"id": 8, "agree": False, "note": "scored 1, wrong"},
                                           {"id": 2, "agree": False}], agree_with_rest=True)
    record = json.loads(run.verdict.read_text())
    assert [v["id"] for v in record["sample_verdicts"]] == [0, 1, 2, 5, 7, 8]
    assert (record["agree"], record["disagree"], result.agree, result.disagree) == (4, 2, 4, 2)
    assert record["sample_verdicts"][-1]["note"] == "scored 1, wrong" and record["reviewed"] == 6
    assert not result.gate.passed and "the verdict is 'fail'" in result.gate.reason
    partial = _record(run, sample_verdicts=[{"id": 5, "agree": False}])  # a fail may judge only some
    assert (partial.agree, partial.disagree) == (0, 1)
    record = json.loads(run.verdict.read_text())
    assert (record["agree"], record["disagree"], record["reviewed"]) == (0, 1, 6)


def _marker_script(tmp_path: Path, monkeypatch) -> Path:
    """train/train.py that leaves train/ran when it runs, with verified_script's process state (sys.path, argv,
    __main__, no script hash) restored after the row."""
    script = tmp_path / "train" / "train.py"
    script.parent.mkdir()
    script.write_text("import pathlib\npathlib.Path(__file__).with_name('ran').write_text('ran')\n")
    monkeypatch.delenv("LLM_FINETUNING_SCRIPT_SHA256", raising=False)
    monkeypatch.setattr("sys.path", list(os.sys.path))
    monkeypatch.setattr("sys.argv", list(os.sys.argv))
    monkeypatch.setitem(os.sys.modules, "__main__", os.sys.modules["__main__"])
    return script


# ---------------------------------------------------------------- the trainer's allowed roots, as prefixes (m8)
# Where a file or a searched folder lies, relative to the recorded site-packages R, and whether it is inside R: the
# boundaries of the prefix comparison verified_script makes (a folder named R plus anything, R's parent, R itself).
ROOT_PLACES = {"R/x": True, "R/pkg/x": True, "R-shadow/x": False, "Rx/x": False, "R.old/x": False,
               "parent/x": False, "R": True}
# How the verdict recorded R (TRAINING_PATHS_ENV): as written, with a trailing separator, through a link to it.
ROOT_RECORDS = ("as written", "trailing separator", "through a link")


def _root_place(tmp_path: Path, place: str) -> Path:
    base = tmp_path / "lib"
    folder = {"R": base / "site-packages", "Rx": base / "site-packagesx", "R-shadow": base / "site-packages-shadow",
              "R.old": base / "site-packages.old", "parent": base}[place.split("/")[0]]
    return folder.joinpath(*place.split("/")[1:-1])


def _recorded_root(tmp_path: Path, how: str) -> str:
    real = tmp_path / "lib" / "site-packages"
    real.mkdir(parents=True, exist_ok=True)
    if how == "through a link":
        link = tmp_path / "site-link"
        link.symlink_to(real)
        return str(link)
    return str(real) + (os.sep if how == "trailing separator" else "")


@pytest.mark.parametrize("how", ROOT_RECORDS)
@pytest.mark.parametrize("place", list(ROOT_PLACES))
def test_the_trainers_allowed_roots_are_folders_not_name_prefixes(tmp_path, monkeypatch, place, how):
    """The trainer's origin checks (foreign_libraries, foreign_modules, foreign_path_entries) against the recorded
    site-packages R: a package, a module or a searched folder under R is allowed; one in a folder whose name only
    begins with R's (R-shadow, Rx, R.old) or in R's parent is foreign, however R was recorded (m8: a shadow trl in
    .../site-packages-shadow/ passed a bare prefix test)."""
    import importlib.machinery
    import types

    from mcp_server.inspection.loader_env import TRAINER_PACKAGES, TRAINING_PATHS_ENV
    from mcp_server.training.trainer.verified_script import foreign_libraries, foreign_modules, foreign_path_entries

    monkeypatch.setenv(TRAINING_PATHS_ENV, _recorded_root(tmp_path, how))
    folder = _root_place(tmp_path, place)
    inside = ROOT_PLACES[place]
    packages = {}
    for name in TRAINER_PACKAGES:  # each package the trainer imports, found at `place`
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / "__init__.py").write_text("")
        module = types.ModuleType(name)
        module.__file__, module.__path__ = str(folder / name / "__init__.py"), [str(folder / name)]
        packages[name] = module
    (folder / "m8_probe.py").write_text("")
    probe = types.ModuleType("m8_probe")
    probe.__file__ = str(folder / "m8_probe.py")
    monkeypatch.setitem(os.sys.modules, "m8_probe", probe)
    monkeypatch.setitem(os.sys.path_importer_cache, str(folder), importlib.machinery.FileFinder(str(folder)))
    with monkeypatch.context() as faked:  # the trainer's packages swapped in for the one call that reads them
        for name, module in packages.items():
            faked.setitem(os.sys.modules, name, module)
        libraries = foreign_libraries(imported=True)
    assert (libraries == []) == inside and (len(libraries) == len(TRAINER_PACKAGES) or inside), (place, how, libraries)
    assert any(m.startswith("m8_probe (") for m in foreign_modules()) != inside, (place, how)
    assert (str(folder) in foreign_path_entries()) != inside, (place, how)


# ---------------------------------------------------------------- the trainer's trusted roots x files and links (m10)
# Every folder sysconfig names for an installation (sysconfig.get_path_names: the interpreter's own stdlib and
# site-packages are trusted, its scripts, headers and data folders are not) and the training paths the verdict
# recorded (TRAINING_PATHS_ENV), each placed in its own folder, x how a module file (or a searched folder) is
# reached from there: a regular one, a link within the root, a link in the root leading out (Debian's
# /usr/lib/python3.X/sitecustomize.py -> /etc/python3.X/), a link elsewhere leading in, and outside altogether.
# The rule, per check: a site hook, an imported module or a searched folder is the installation's when it lies
# under one of its roots as written OR as resolved; a package the trainer imports (foreign_libraries) only as
# resolved, under the recorded roots (m10: the link-out hook refused every launch on a system Python).
INSTALLED = ("stdlib", "platstdlib", "purelib", "platlib")
REACHED = {  # how: (where the name is, where it resolves to)
    "a regular file": ("inside", "inside"), "a link within the root": ("inside", "inside"),
    "a link in the root leading out": ("inside", "outside"), "a link outside leading in": ("outside", "inside"),
    "a link outside leading elsewhere": ("outside", "outside"), "a regular file outside": ("outside", "outside"),
}


def _reached(root: Path, outside: Path, how: str, name: str, folder: bool) -> Path:
    """`name` (a file, or a folder when `folder`) reached as `how` says, relative to `root`; returns the path the
    import system would hold."""
    def make(path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir() if folder else path.write_text("")
        return path
    if how == "a regular file":
        return make(root / name)
    if how == "a regular file outside":
        return make(outside / name)
    named, target = {"a link within the root": (root / name, root / "real" / name),
                     "a link in the root leading out": (root / name, outside / "real" / name),
                     "a link outside leading in": (outside / name, root / "real" / name),
                     "a link outside leading elsewhere": (outside / name, outside / "real" / name)}[how]
    make(target)
    named.parent.mkdir(parents=True, exist_ok=True)
    named.symlink_to(target, target_is_directory=folder)
    return named


@pytest.mark.parametrize("how", list(REACHED))
@pytest.mark.parametrize("root_name", [*sysconfig.get_path_names(), "recorded"])
def test_the_trainers_origin_checks_trust_each_root_as_written_or_as_resolved(tmp_path, monkeypatch, root_name,
                                                                               how):
    import importlib.machinery
    import types

    from mcp_server.inspection.loader_env import TRAINER_PACKAGES, TRAINING_PATHS_ENV
    from mcp_server.training.trainer import verified_script as vs

    paths = {name: tmp_path / "install" / name for name in sysconfig.get_path_names()}
    recorded = tmp_path / "recorded" / "site-packages"
    for folder in (*paths.values(), recorded):
        folder.mkdir(parents=True)
    root = recorded if root_name == "recorded" else paths[root_name]
    outside = tmp_path / "elsewhere"
    hook = _reached(root, outside, how, "sitecustomize.py", folder=False)
    probe = _reached(root, outside, how, "m10_probe.py", folder=False)
    searched = _reached(root, outside, how, "searched", folder=True)
    trl = _reached(root, outside, how, "trl", folder=True)
    (trl / "__init__.py").write_text("")
    modules = {"sitecustomize": hook, "usercustomize": hook, "m10_probe": probe}
    name_in, resolves_in = (where == "inside" for where in REACHED[how])
    trusted = root_name in INSTALLED or root_name == "recorded"
    with monkeypatch.context() as faked:
        faked.setattr(sysconfig, "get_paths", lambda *a, **k: {k: str(v) for k, v in paths.items()})
        faked.setenv(TRAINING_PATHS_ENV, str(recorded))
        for name, path in modules.items():
            module = types.ModuleType(name)
            module.__file__ = str(path)
            faked.setitem(os.sys.modules, name, module)
        faked.setitem(os.sys.path_importer_cache, str(searched), importlib.machinery.FileFinder(str(searched)))
        package = types.ModuleType("trl")
        package.__file__, package.__path__ = str(trl / "__init__.py"), [str(trl)]
        faked.setitem(os.sys.modules, "trl", package)
        hooks, foreign, entries = vs.foreign_site_hooks(), vs.foreign_modules(), vs.foreign_path_entries()
        libraries = vs.foreign_libraries(imported=True)
    assert "trl" in TRAINER_PACKAGES
    row = (root_name, how)
    assert (hooks == []) == (root_name in INSTALLED and (name_in or resolves_in)), (row, hooks)
    assert len(hooks) in (0, 2), hooks  # sitecustomize and usercustomize alike
    assert (not any(m.startswith("m10_probe (") for m in foreign)) == (trusted and (name_in or resolves_in)), row
    assert (str(searched) not in entries) == (trusted and (name_in or resolves_in)), (row, entries)
    assert (not any(m.startswith("trl (") for m in libraries)) == (root_name == "recorded" and resolves_in), \
        (row, libraries)


# ---------------------------------------------------------------- samples the sampler did not write (round 12, F2)
F2_RIGHT = "<reasoning>1 + 1 = 2</reasoning><answer>2</answer>"
F2_WRONG = "<reasoning>1 + 1 = 3</reasoning><answer>3</answer>"


def _all_right(run: Run) -> None:
    """Every completion of samples.jsonl rewritten to the right answer (round 12's repro), the meta left."""
    rows = [json.loads(line) for line in run.samples.read_text().splitlines()]
    run.samples.write_text("".join(json.dumps({**r, "completion": F2_RIGHT}) + "\n" for r in rows))


def _meta_edited(run: Run, **changed) -> None:
    from mcp_server.workspace import sha256_file

    meta = {**json.loads(run.samples_meta.read_text()), "samples_sha256": sha256_file(run.samples), **changed}
    run.samples_meta.write_text(json.dumps({k: v for k, v in meta.items() if v is not None}))


NOT_SAMPLED = "inspection/samples.jsonl is not"  # how each refusal begins: the file named
# each way x (what it does to the run, what the refusal names)
FORGED_SAMPLES = {
    "rewritten": (lambda run, *_: _all_right(run), "is not the file sample_completions wrote"),
    "rewritten, meta's sha256 updated": (lambda run, *_: (_all_right(run), _meta_edited(run)),
                                         "samples.meta.json has no valid signature"),
    "rewritten, meta's mac removed": (lambda run, *_: (_all_right(run), _meta_edited(run, mac=None)),
                                      "samples.meta.json has no valid signature"),
    "rewritten, meta removed": (lambda run, *_: (_all_right(run), run.samples_meta.unlink()),
                                "samples.meta.json is missing"),
}


def _restated(run: Run, verdict: bool) -> None:
    """review.json (and verdict.json) rewritten to name today's samples.jsonl, every pin taken again: the rest of
    the chain as a forger who can write the workspace makes it."""
    from mcp_server.workspace import sha256_file

    review = json.loads(run.review.read_text())
    review["result"]["samples_sha256"] = sha256_file(run.samples)
    run.review.write_text(json.dumps(review))
    if verdict:
        record = json.loads(run.verdict.read_text())
        record.update(samples_sha256=sha256_file(run.samples), review_sha256=sha256_file(run.review),
                      pins=run_pins(run, record["reward_code_sha256"]))
        run.verdict.write_text(json.dumps(record))


@pytest.mark.parametrize("door", ["inspect_rewards", "record_inspection_verdict", "check_inspection_gate"])
@pytest.mark.parametrize("forgery", sorted(FORGED_SAMPLES))
def test_samples_the_sampler_did_not_write_back_no_review_verdict_or_gate(workspace, tiny_model, door, forgery):
    """Round 12 F2: samples.jsonl rewritten after sampling (every completion right) and samples.meta.json's sha256
    made to match had the review show 100% base success and the gate open. The sampler signs samples.meta.json (the
    samples' digest in it, the key outside the workspace): each door refuses samples it does not vouch for, naming
    the file, at whichever step the forgery lands (the review and the verdict restated by hand after it)."""
    from support import hand_made_run
    from mcp_server.inspection.gate import check_inspection_gate, record_inspection_verdict
    from mcp_server.inspection.models import InspectRequest, VerdictRequest
    from mcp_server.inspection.review import inspect_rewards

    forge, said = FORGED_SAMPLES[forgery]
    run = Run(hand_made_run(workspace, tiny_model, "forged", [[F2_RIGHT] + [F2_WRONG] * 3] * 13, ["2"] * 13))
    verdict = VerdictRequest(run=str(run.dir), verdict="pass", reviewer="ana", agree_with_rest=True)
    if door == "inspect_rewards":
        forge(run, workspace, tiny_model)
        with pytest.raises(UserInputError) as refused:
            inspect_rewards(InspectRequest(run=str(run.dir)))
        words = str(refused.value)
        assert refused.value.field == "run" and NOT_SAMPLED in words and said in words, words
        assert not run.review.exists()
        return
    inspect_rewards(InspectRequest(run=str(run.dir)))
    if door == "check_inspection_gate":
        assert record_inspection_verdict(verdict).gate.passed  # the honest chain opens it
    forge(run, workspace, tiny_model)
    _restated(run, verdict=door == "check_inspection_gate")
    if door == "record_inspection_verdict":
        with pytest.raises(UserInputError) as refused:
            record_inspection_verdict(verdict)
        words = str(refused.value)
        assert refused.value.field == "run" and NOT_SAMPLED in words and said in words, words
        assert not run.verdict.exists()
        return
    gate = check_inspection_gate(run.dir)
    assert not gate.passed and NOT_SAMPLED in gate.reason and said in gate.reason, gate
    assert "sample_completions" in gate.how_to_clear, gate


def test_the_trainer_reads_only_the_request_json_the_gate_checked(tmp_path, monkeypatch):
    """train/request.json (the guard mode off/warn/stop, read by the trainer after the gate, round 19): the launchers
    pass its pinned sha256 (verdict_env) and the trainer refuses another file there, naming it, instead of training
    on with the default mode (a request it cannot read is only said)."""
    from mcp_server.recipe.recorded import REQUEST_SHA_ENV, RequestChanged
    from mcp_server.training.launchers.base import verdict_env
    from mcp_server.training.trainer.guard import guard_mode

    run = _run(tmp_path, {"model_name_or_path": str(_model(tmp_path / "model"))})
    run.request.write_text(json.dumps({"guard": "stop"}))
    run.verdict.parent.mkdir(parents=True, exist_ok=True)
    run.verdict.write_text(json.dumps({"verdict": "pass", "pins": run_pins(run, REWARD)}))
    env = verdict_env(run.verdict.read_text())
    assert env[REQUEST_SHA_ENV] == hashlib.sha256(run.request.read_bytes()).hexdigest()
    monkeypatch.setenv(REQUEST_SHA_ENV, env[REQUEST_SHA_ENV])
    assert guard_mode(run) == "stop"
    run.request.write_text(json.dumps({"guard": "off"}))  # after the gate, before the trainer reads it
    with pytest.raises(RequestChanged, match="train/request.json changed after the inspection verdict"):
        guard_mode(run)

"""What a run trains on, read the way its trainer reads it: one loader for train/train.py and for sampling.

The trainer (training.script_support) and sample_completions both parse train/config.yaml with TRL's own parser
(`trl grpo`'s dataclasses), load the rows with the same `load_dataset`/`get_dataset` call (every `datasets`
entry, every data file, the directory globbing datasets does), rename the same prompt column (train.py's
PROMPT_COLUMN, the one place it is written) and resolve the model in the run directory, where training runs.
`fingerprint` is what a verdict vouches for of all that: the rows' content after loading, the prompt column,
the resolved settings (generation_kwargs and reward_weights included) and the model as resolved. Sampling records
it in samples.meta.json ("trained"), the verdict pins it, and the trainer compares its own
(inspection.trained.check_reviewed_inputs) before it trains.

The datasets cache cannot carry rows nobody reviewed: every load here goes through a fresh, empty cache folder (a
poisoned cache under the run, restored data files around it, would otherwise train on cached rows). Heavy
imports (TRL, datasets) happen inside the functions: the light server imports this module's names only.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import re
from pathlib import Path

from mcp_server.config.loader import parse_config, train_dataset  # noqa: F401 - train.py and sampling read these

from mcp_server.errors import UserInputError
from mcp_server.config.fields import pinned
from mcp_server.inspection.pins import (GLOB_CHARS, SAMPLING_KEYS, _data_files, _entry_base, hub_snapshot,
                                        model_pin)
from mcp_server.model_ref import resolve_model
from mcp_server.runs import Run
from mcp_server.workspace import written_digest

PROMPT_LINE = re.compile(r'^PROMPT_COLUMN = "(?P<column>[^"\n]*)"$', re.MULTILINE)
# Fields the settings fingerprint leaves out: the machine's precision switches (a config made for a GPU is sampled
# where it parses; the gate pins them in the config file) and every field config.fields declares unpinned.
MACHINE_KEYS = frozenset({"bf16", "fp16", "tf32", "use_cpu", "bf16_full_eval", "fp16_full_eval"})
ALWAYS_SETTINGS = (*SAMPLING_KEYS, "reward_weights", "max_prompt_length", "num_iterations", "beta", "loss_type")


def prompt_column(run: Run) -> str:
    """The column train/train.py renames to 'prompt' (its PROMPT_COLUMN), else 'prompt'."""
    try:
        found = PROMPT_LINE.search(run.script.read_text(encoding="utf-8"))
    except OSError:
        found = None
    return found.group("column") if found and found.group("column") else "prompt"


def rows_sha256(dataset) -> str:
    """sha256 of every row as loaded (column names and values, in order)."""
    digest = hashlib.sha256(json.dumps(dataset.column_names).encode())
    for batch in dataset.with_format(None).iter(batch_size=1024):
        digest.update(json.dumps(batch, sort_keys=True, default=str, ensure_ascii=False).encode())
    return digest.hexdigest()


def resolved_settings(config: dict, *parsed) -> dict:
    """The settings as TRL resolved them (defaults filled in): every sampling field, reward_weights, and each
    field the config sets that a verdict pins; from the first parsed dataclass that has it."""
    keys = sorted(set(ALWAYS_SETTINGS) | {k for k in config if pinned(k) and k not in MACHINE_KEYS})
    settings = {}
    for key in keys:
        holder = next((p for p in parsed if hasattr(p, key)), None)
        if holder is not None and not key.startswith("dataset"):  # the rows' hash covers the data fields
            settings[key] = json.loads(json.dumps(getattr(holder, key), sort_keys=True, default=str))
    return settings


# from_pretrained's arguments that choose which of the model's files load (transformers' PreTrainedModel
# .from_pretrained): sampling loads with them as the trainer does, and the model pin records them (issue 48: a
# `subfolder` in model_init_kwargs trained other weights than were sampled).
WEIGHT_KWARGS = ("subfolder", "variant", "gguf_file", "use_safetensors")


def weight_kwargs(init_kwargs: dict | None) -> dict:
    """The file-choosing part of model_init_kwargs (WEIGHT_KWARGS) that is set."""
    return {k: (init_kwargs or {})[k] for k in WEIGHT_KWARGS if (init_kwargs or {}).get(k) not in (None, "")}


def loaded_revision(model_args, training_args) -> str | None:
    """The revision TRL loads: model_init_kwargs' own `revision` when set (config.loader fills it from
    model_revision, and a config's model_init_kwargs override it), else model_revision."""
    init = getattr(training_args, "model_init_kwargs", None) or {}
    return init.get("revision") or model_args.model_revision


def trained_model(name: str, revision: str | None, run: Run, init_kwargs: dict | None = None) -> dict:
    """The model as the trainer (running in the run directory) resolves it: a local directory by its files
    (its path relative to the run when inside it), else a hub id and revision with the files of the local
    cache's snapshot (pins.hub_snapshot: the trainer loads that folder), and the model_init_kwargs that choose
    which files load (WEIGHT_KWARGS)."""
    with contextlib.chdir(run.dir):
        pin = model_pin(str(name), revision)
    pin.pop("commit", None)  # which snapshot a machine's cache holds is the gate's to check; its files are here
    path = Path(pin["model"])
    if path.is_absolute() and path.is_relative_to(run.dir.resolve()):
        pin["model"] = str(path.relative_to(run.dir.resolve()))
    loads = weight_kwargs(init_kwargs)
    if loads:
        pin["loads"] = loads
    return pin


def pinned_after_load(pin: dict, run: Run) -> dict:
    """A hub model's trained pin taken again once sampling loaded it: a model no cache held before is pinned by
    the snapshot that load downloaded (what the trainer then loads), not left without files. Others as they are."""
    if pin.get("files_sha256") is not None or "revision" not in pin:
        return pin
    return trained_model(pin["model"], None if pin["revision"] == "main" else pin["revision"], run, pin.get("loads"))


def loadable_model(name: str, revision: str | None, run: Run) -> str:
    """What the trainer hands GRPOTrainer to load: a local directory as resolved in the run directory, or the
    cached snapshot folder of a hub model (never the name: the hub's main or another cache may hold other
    weights at launch); the name itself only when no cache holds it (then the pin has no files and the
    trainer's check refuses)."""
    with contextlib.chdir(run.dir):
        ref = resolve_model(str(name))
    if Path(ref).is_dir():
        return str(Path(ref).resolve())
    snapshot = hub_snapshot(ref, revision)
    return str(snapshot) if snapshot else ref


def fingerprint(run: Run, dataset, config: dict, column: str, script_args, training_args, model_args) -> dict:
    """What the verdict vouches for of what trains (samples.meta.json "trained", the verdict's pin)."""
    return {
        "rows": len(dataset), "rows_sha256": rows_sha256(dataset), "prompt_column": column,
        "settings": resolved_settings(config, training_args, model_args, script_args),
        "model": trained_model(model_args.model_name_or_path, loaded_revision(model_args, training_args), run,
                               getattr(training_args, "model_init_kwargs", None)),
    }


def missing_data(run: Run, config: dict | None = None) -> UserInputError | None:
    """The refusal for a local data file train/config.yaml names that is not there (moved or deleted since the run
    was emitted), naming the field (`datasets[i].data_files`, or `dataset_name`), the path and the way on; None
    when every local one is there (a hub data set is the loader's to find). Issue 49: a moved file reached the
    user as `unexpected FileNotFoundError`."""
    config = run.read_config() if config is None else config
    gone = []
    if isinstance(config.get("dataset_name"), str) and Path(config["dataset_name"]).expanduser().is_absolute():
        path = Path(config["dataset_name"]).expanduser()
        gone = [] if path.exists() else [("dataset_name", path)]
    for i, entry in enumerate(config.get("datasets") or []):
        base = _entry_base(entry.get("path"), entry.get("data_dir"), run) if isinstance(entry, dict) else None
        for pattern in _data_files(entry.get("data_files")) if base is not None else []:
            full = Path(pattern).expanduser() if Path(pattern).expanduser().is_absolute() else base / pattern
            there = (glob.glob(str(full), recursive=True) if any(c in pattern for c in GLOB_CHARS)
                     else full.exists())
            gone += [] if there else [(f"datasets[{i}].data_files", full)]
    if not gone:
        return None
    field, path = gone[0]
    return UserInputError(field, f"{path} (in {run.config}) is not there: moved or deleted since the run was "
                          "emitted. Put the file back at that path, or emit a new run on its new place "
                          "(emit_grpo_config's `dataset`); a run's data path is not edited in place (the "
                          "inspection verdict pins the rows it reviewed).")


def load_training_inputs(run: Run, cache_dir: str | Path, argv: list[str] | None = None,
                         fingerprinted: bool = True, held: dict | None = None) -> dict:
    """The run's training inputs read as train/train.py reads them, in the run directory: {dataset (prompt column
    renamed 'prompt'), training_args, model_args, fingerprint}; the rows are prepared in `cache_dir` (fresh and
    empty, kept while they are used). A config made for a GPU parses here with its precision switches off (they
    are no part of the fingerprint). `fingerprinted` False: no fingerprint (the model's files are not hashed; the
    row probes need the rows alone, inspection.row_probes). `held`: what the caller itself just wrote, as it holds
    it in memory ({"config": train/config.yaml's mapping, path: a data file's bytes}): read from there, never from
    the files, which a racer could have replaced since (round 18, b03: the re-filter's kept.jsonl)."""
    held = dict(held or {})
    values = held.pop("config", None)
    config = values or run.read_config()
    values = json.loads(json.dumps(values)) if values else None  # TRL's parser turns its entries into objects
    if missing := missing_data(run, config):
        raise missing
    column = prompt_column(run)
    argv = ["--config", str(run.config), *(argv or [])]
    with contextlib.chdir(run.dir):
        try:
            script_args, training_args, model_args, dataset_args = parse_config(argv, values=values)
        except ValueError:  # bf16/fp16 this machine lacks
            try:
                script_args, training_args, model_args, dataset_args = parse_config(
                    [*argv, "--bf16", "false", "--fp16", "false"], values=values)
            except ValueError as exc:
                raise UserInputError("run", f"{run.config} does not parse here as TRL parses it for training: "
                                     f"{exc}") from None
        copies = _held_copies(run, dataset_args, held, Path(cache_dir))
        dataset = train_dataset(script_args, dataset_args, column, cache_dir)
    if any(hashlib.sha256(copy.read_bytes()).hexdigest() != digest for copy, digest in copies.items()):
        raise UserInputError("run", f"a copy of the data in {cache_dir} changed while it was read: nothing recorded")
    return {"dataset": dataset, "training_args": training_args, "model_args": model_args,
            "fingerprint": fingerprint(run, dataset, config, column, script_args, training_args, model_args)
            if fingerprinted else None}


def _own_path(path: Path) -> Path:
    """`path` with its folder resolved, its last part as named (a link put there is not followed)."""
    return Path(path).parent.resolve() / Path(path).name


def _held_copies(run: Run, dataset_args, held: dict, cache_dir: Path) -> dict[Path, str]:
    """Each data file of `held` ({path: the bytes the caller wrote there}) that a `datasets` entry names, named
    instead by a copy of those bytes written in `cache_dir` (the caller's fresh folder): {copy: its sha256}.
    Refused (UserInputError) when one is named by no entry (its rows would be read from the run's file)."""
    wanted = {_own_path(path): data for path, data in held.items()}
    copies: dict[Path, str] = {}

    def swap(name, base: Path):
        full = Path(str(name)).expanduser()
        data = wanted.get(_own_path(full if full.is_absolute() else base / full))
        if data is None:
            return name
        copy = cache_dir / f"held-{len(copies)}" / full.name
        copy.parent.mkdir()
        copies[copy] = written_digest(copy, data)
        return str(copy)

    for entry in dataset_args.datasets or []:
        base = _entry_base(entry.path, entry.data_dir, run)
        files = entry.data_files
        if base is None or files is None:
            continue
        each = (lambda v: [swap(f, base) for f in v] if isinstance(v, (list, tuple)) else swap(v, base))
        entry.data_files = {k: each(v) for k, v in files.items()} if isinstance(files, dict) else each(files)
    if len(copies) < len(wanted):
        raise UserInputError("run", f"{run.config} names none of {', '.join(map(str, wanted))} as a data file: "
                             "their rows would be read back from the files")
    return copies

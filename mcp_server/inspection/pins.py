"""What an inspection verdict vouches for, as fingerprints ("pins") that the gate compares on every check.

A verdict vouches for the model, the data, the sampling settings, the reward (its specs, code and the local
modules that code imports, plus the config's reward_weights/reward_funcs), train/train.py and the review the
person read (which holds the success rule). `config_pins` reads the parts that train/config.yaml decides;
`run_pins` adds the reward code and the script. `changes` names every part that differs between two pin sets.

Everything else in train/config.yaml is pinned too ("config"), except the fields config.fields declares unpinned:
those that cannot change what is sampled or how it is scored (where checkpoints and logs go, how often, the
optimizer and its schedule, how long training runs, how a batch is laid out over devices, steps and memory).
Every file under train/ that no other pin covers is pinned by name and content ("train_files"): train.py runs
with train/ first on sys.path, so a train/mcp_server/ or train/datasets.py would shadow what was reviewed
(train.py also drops train/ from its path; the pin covers scripts emitted before that). The files a launch writes
there (launch.sh, launch.slurm, accelerate.yaml, logs/) are not pinned: they are the launch's, written after the
gate.

What cannot be pinned, and so is not: environment variables a reward reads, a module a reward imports lazily
inside the function (one it imports at its module's import is followed, by whatever name: rewards.sources), anything
a reward fetches over the network (a judge endpoint), a hub data set's content (pinned by name, config and split),
and the installed packages (TRL, transformers). A reviewer who relies on those says so in the verdict's note.

A local model directory is pinned by its resolved path (relative to the run when inside it) and all its files,
hidden ones included (content hash up to 64 MiB a file, size and mtime above, so a 15 GB checkpoint is not re-read
on every gate check); a hub model by id, revision, the commit the local cache resolves it to and that snapshot's
files (the trainer loads the snapshot, not the name). Local data is pinned by content: a `datasets` entry's
data_files in each form (a string, a list, a mapping of splits, a glob by the files it matches, resolved against
the entry's path and data_dir in the run directory) and every other key of the entry as written; a hub data set by
name, config, split and the data_dir/data_files it is read with (the content cannot be read offline).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from functools import lru_cache
from pathlib import Path

from mcp_server.agentic.sources import agentic_pin
from mcp_server.config.fields import fields_in, pinned
from mcp_server.errors import UserInputError
from mcp_server.evidence import samples_meta_read
from mcp_server.inspection.loader_env import LOADER_PART, loader_change, loader_env_pin
from mcp_server.interpreter import training_python
from mcp_server.model_ref import resolve_model
from mcp_server.rewards import reads
from mcp_server.runs import Run
from mcp_server.userfiles import open_regular
from mcp_server.workspace import WHOLE_FILE_BYTES, files_digest, large_file_pin, sha256_file

# train/config.yaml's fields that decide what a sample looks like, and those that change what the trainer does
# with the rewards' scores (config.fields declares each field's group).
SAMPLING_KEYS = fields_in("sampling")
REWARD_CONFIG_KEYS = fields_in("rewards")
# The config fields the model and data pins already cover (by what they resolve to).
MODEL_DATA_KEYS = ("model_name_or_path", "model_revision", "dataset_name", "dataset_config", "datasets")
# Files under train/ that other pins cover, or that a launch writes after the gate.
TRAIN_FILES_UNPINNED = ("config.yaml", "train.py", "rewards.json", "request.schema.json",
                        "launch.sh", "launch.slurm", "accelerate.yaml")
TRAIN_DIRS_UNPINNED = ("logs", "logs-attempt-", "__pycache__")
PART_NAMES = {
    "model": "the model", "data": "the data set", "sampling": "the sampling settings in train/config.yaml",
    "reward_config": "reward_weights/reward_funcs in train/config.yaml",
    "reward_code": "the reward",
    "script": "train/train.py", "prompt_column": "the prompt column",
    "agentic": "the environment and tools (train/agentic.json, their source files, the turn limit)",
    "config": "other fields of train/config.yaml", "train_files": "files under train/ beside train.py",
    "trained": "what train/train.py's loader read for the samples (samples.meta.json 'trained')",
    "samples_meta": "inspection/samples.meta.json (how the samples were drawn)",
    "training_python": "the training interpreter (LLM_FINETUNING_PYTHON)",
    "loader_env": LOADER_PART,
    "reward_reads": "a file the reward reads (by a path in its code: rewards.reads)",
}
PYTHON_VARIABLE = "LLM_FINETUNING_PYTHON"


def _tree(path: Path) -> list[Path]:
    """Every file under a model directory, hidden ones included: from_pretrained reads a `subfolder` (or a
    custom-code module, a chat template) wherever model_init_kwargs point, hidden folders too (issue 48)."""
    return sorted(p for p in path.rglob("*") if p.is_file())


def model_pin(model: str, revision: str | None = None) -> dict:
    """The model as training would load it: a resolved local directory and its files, or a hub id + revision
    with the files of the snapshot the local cache resolves it to (`hub_snapshot`)."""
    ref = resolve_model(str(model))
    path = Path(ref)
    if path.is_dir():
        return {"model": str(path.resolve()), "files_sha256": files_digest(path, _tree(path))}
    return _hub_model_pin(ref, revision)


def model_content(pin) -> str | None:
    """What a model pin (model_pin) says of the model's content, apart from where it lives: its files' digest (a
    local folder's, or the cached hub snapshot's); None when unknown (a hub model no cache holds). Equal for two
    pins only when every weight, config and tokenizer file is (a file over WHOLE_FILE_BYTES by its stat): a
    baseline counts for a run's base only then (issue 48, round 10 F3)."""
    return pin.get("files_sha256") if isinstance(pin, dict) and isinstance(pin.get("files_sha256"), str) else None


def hub_snapshot(ref: str, revision: str | None) -> Path | None:
    """The local cache's snapshot folder of hub model `ref` at `revision` (a branch, tag or commit; None: main),
    never the network; None when the cache holds none. The trainer loads this folder, not the name: what the
    hub's main or another HF_HOME holds at launch is not what was pinned (issue 48)."""
    if str(ref).startswith((".", "/", "~")):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(str(ref), "config.json", revision=revision or None)
    except Exception:  # no huggingface_hub, an invalid repo id or revision, an unreadable cache: not cached
        return None
    return Path(cached).parent if isinstance(cached, str) else None


def _hub_model_pin(ref: str, revision: str | None) -> dict:
    snapshot = hub_snapshot(ref, revision)  # .../snapshots/<commit>/ when downloaded before
    pin = {"model": ref, "revision": revision or "main", "commit": snapshot.name if snapshot else None}
    # the snapshot's files by content: a blob overwritten in place, or another cache, is another model
    pin["files_sha256"] = files_digest(snapshot, _tree(snapshot)) if snapshot else None
    return pin


def data_pin(source: str, split: str | None = None, config_name: str | None = None) -> dict:
    """One data source: a local file or directory by content (every file in it, hidden ones and large ones
    included: data is read whole, unlike model weights), else a hub name."""
    path = Path(str(source)).expanduser()
    if path.is_file():
        return {"source": str(path.resolve()), "sha256": sha256_file(path)}
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
        return {"source": str(path.resolve()), "split": split, "sha256": files_digest(path, files, whole_up_to=None)}
    return _named_data_pin(source, split, config_name)


def _named_data_pin(source, split, config_name, **more) -> dict:
    """A data set by name (its content cannot be read offline): the name, config and split, and each other
    argument the loader passes with it (data_dir, data_files) when set."""
    return {"source": str(source), "config": config_name, "split": split, **{k: v for k, v in more.items() if v}}


def _at_run(value, run: Run) -> str | None:
    """A config path as training resolves it (it runs in the run directory): absolute, or inside the run; None
    for a relative name the run directory does not hold, which training reads as a hub name (whatever the
    server's own folder holds under that name)."""
    path = Path(str(value)).expanduser()
    if path.is_absolute():
        return str(path)
    return str(run.dir / path) if (run.dir / path).exists() else None


def _config_model_pin(value, revision, run: Run) -> dict:
    if str(value) == "tiny":
        return model_pin("tiny", revision)
    local = _at_run(value, run)
    return model_pin(local, revision) if local else _hub_model_pin(str(value), revision)


def config_model_pin(run: Run, config: dict) -> dict:
    """train/config.yaml's model as training resolves it in the run directory, pinned (config_pins' "model")."""
    return _inside(_config_model_pin(config["model_name_or_path"], config.get("model_revision"), run), "model", run)


def _config_data_pin(value, run: Run, split=None, config_name=None) -> dict:
    if str(value) == "tiny":
        return data_pin("tiny", split, config_name)
    local = _at_run(value, run)
    return data_pin(local, split, config_name) if local else _named_data_pin(value, split, config_name)


def _config_data(config: dict, run: Run) -> list[dict]:
    """Every data source train/config.yaml trains on (dataset_name, or each `datasets` mixture entry)."""
    if config.get("dataset_name"):
        return [_inside(_config_data_pin(config["dataset_name"], run, config.get("dataset_train_split"),
                                         config.get("dataset_config")), "source", run)]
    pins = []
    for entry in config.get("datasets") or []:
        if not isinstance(entry, dict):
            pins.append({"entry": repr(entry)})
            continue
        files = _data_files(entry.get("data_files"))
        base = _entry_base(entry.get("path"), entry.get("data_dir"), run)
        if files and base is not None:  # datasets resolves data_files (globs too) against path/data_dir
            sources = [source for f in files for source in _matched(f, base, run)]
        elif files:
            sources = [_named_data_pin(entry.get("path"), entry.get("split"), entry.get("name"),
                                       data_dir=entry.get("data_dir"), data_files=files)]
        else:
            local = _at_run(entry.get("path"), run) if entry.get("path") is not None else None
            sources = [data_pin(local, entry.get("split"), entry.get("name")) if local else _named_data_pin(
                entry.get("path"), entry.get("split"), entry.get("name"), data_dir=entry.get("data_dir"))]
        sources = [{**source, "matches": [_inside(m, "source", run) for m in source["matches"]]} if "matches" in
                   source else _inside(source, "source", run) for source in sources]
        # every other key of the entry as written (path, name, data_dir, split, columns, fraction, ...)
        pins.append({**{k: v for k, v in sorted(entry.items()) if k != "data_files"}, "sources": sources})
    return pins


# The characters that make a data_files entry a glob (datasets' resolve_pattern: fsspec glob syntax).
GLOB_CHARS = "*?["


def _data_files(files) -> list[str]:
    """A datasets entry's data_files in every form datasets takes (a string, a list, a mapping of splits to
    either), as one list of patterns."""
    if isinstance(files, dict):
        return [f for value in files.values() for f in _data_files(value)]
    if isinstance(files, (list, tuple)):
        return [str(f) for f in files]
    return [str(files)] if files else []


def _entry_base(path, data_dir, run: Run) -> Path | None:
    """The local folder datasets resolves an entry's data_files against: `path` (a builder name such as "json"
    or a local directory) joined with data_dir, in the run directory; None for a hub data set."""
    if path is not None and _at_run(path, run) is None and "/" in str(path):
        return None  # a hub repository: its files are resolved on the hub
    folder = Path(_at_run(path, run)) if path is not None and _at_run(path, run) else run.dir
    folder = folder if folder.is_dir() else run.dir
    return folder / data_dir if data_dir else folder


def _matched(pattern: str, base: Path, run: Run) -> list[dict]:
    """One data_files pattern pinned by what it matches now, each file by content (a glob is not pinned as
    text: a file added, removed or renamed under it changes the pin)."""
    path = Path(pattern).expanduser()
    full = path if path.is_absolute() else base / path
    if any(c in pattern for c in GLOB_CHARS):  # hidden files too: more than datasets reads, never less
        found = sorted({Path(p) for p in glob.glob(str(full), recursive=True, include_hidden=True)
                        if Path(p).is_file()})
        return [{"pattern": pattern, "matches": [data_pin(str(p)) for p in found]}]
    if full.exists():
        return [data_pin(str(full))]
    return [_named_data_pin(pattern, None, None)]


def _inside(pin: dict, key: str, run: Run) -> dict:
    """A model or data path inside the run directory, pinned relative to it: a moved run keeps its pins."""
    path = Path(str(pin.get(key)))
    if path.is_absolute() and path.is_relative_to(run.dir.resolve()):
        return {**pin, key: str(path.relative_to(run.dir.resolve()))}
    return pin


def config_pins(run: Run, config: dict | None = None) -> dict:
    """What train/config.yaml decides (`config`: as the caller read it, else read here): model, data, sampling
    settings, reward weights. A run without a config has nothing to vouch for (UserInputError('run'))."""
    config = run.read_config() if config is None else config
    if not config.get("model_name_or_path"):
        raise UserInputError(
            "run", f"{run.config} does not exist or names no model_name_or_path: a verdict vouches for a training "
            "config, so emit it first (emit_grpo_config), then sample and inspect with it"
        )
    return {
        "model": config_model_pin(run, config),
        "data": _config_data(config, run),
        "sampling": {k: config.get(k) for k in SAMPLING_KEYS},
        "reward_config": {k: config.get(k) for k in REWARD_CONFIG_KEYS},
        "config": {k: config[k] for k in sorted(config) if pinned(k)  # config.fields: what cannot change a sample
                   and k not in SAMPLING_KEYS + REWARD_CONFIG_KEYS + MODEL_DATA_KEYS},
    }


def train_files_pin(run: Run, config: dict | None = None, read: dict | None = None) -> dict:
    """Every file under train/ that no other pin covers, by name and content (a file named there could be
    imported by train.py: train/ is its sys.path[0]). {} when there is none. `config`: as config_pins; `read`:
    {name: sha256} of the records beside the config as the caller read them (a launch's RunSpec: request.json's
    bytes as its target was read from, not a second read)."""
    read = read or {}
    train = run.script.parent
    if not train.is_dir():
        return {}
    # checkpoints written by training, when output_dir is a directory inside train/ (not train/ itself)
    output = run.output_dir(run.read_config() if config is None else config).resolve()
    if output == train.resolve() or not output.is_relative_to(train.resolve()):
        output = None
    pinned = {}
    for path in sorted(train.rglob("*")):
        parts = path.relative_to(train).parts
        if any(parts[0] == d or (d.endswith("-") and parts[0].startswith(d)) for d in TRAIN_DIRS_UNPINNED) or any(
                p == "__pycache__" for p in parts) or (output and path.resolve().is_relative_to(output)):
            continue
        if len(parts) == 1 and parts[0] in TRAIN_FILES_UNPINNED:
            continue
        name = "/".join(parts)
        if path.is_dir():  # a directory alone is a namespace package: `import train/<name>` works without files
            pinned[name + "/"] = "directory"
        elif name in read:
            pinned[name] = read[name]
        elif path.is_file():
            pinned[name] = sha256_file(path) if path.stat().st_size <= WHOLE_FILE_BYTES else \
                large_file_pin(path.stat())
    return pinned


def process_pins(run: Run) -> dict:
    """What the verdict pins of the process that records it or launches (its training interpreter, its loader's
    variables): a launch's gate, run in a worker (worker.apart), judges the launching process's, not the worker's."""
    # what ld.so and glibc obey before the interpreter runs a line (inspection.loader_env, issue 48)
    return {"training_python": training_python_pin(), "loader_env": loader_env_pin(cwd=str(run.dir))}


def run_pins(run: Run, reward_code_sha256: str, config: dict | None = None, here: dict | None = None,
             meta_read: tuple | None = None, read: dict | None = None) -> dict:
    """config_pins plus the reward code hash (computed by the caller from train/rewards.json) and train/train.py.
    `config`: train/config.yaml as the caller read it (a launch's RunSpec), else read here; `here`: the caller's
    process_pins, else this process's; `meta_read`: samples.meta.json as the caller read and checked it
    (evidence.samples_meta_read), else read here; `read`: as train_files_pin."""
    pins = config_pins(run, config)
    pins["reward_code"] = reward_code_sha256
    pins["script"] = sha256_file(run.script) if run.script.is_file() else None
    agentic = agentic_pin(run)
    if agentic is not None:
        pins["agentic"] = agentic
    pins["train_files"] = train_files_pin(run, config, read)
    # What sampling read through the trainer's loader (inspection.training_inputs), which the trainer compares
    # with its own at the point of use, and the record of how the samples were drawn.
    # Only the sampler's signed record is read for what it says; the pin is the digest of the bytes that were read.
    record, digest, _ = samples_meta_read(run) if meta_read is None else meta_read
    pins["trained"] = (record or {}).get("trained")
    pins["samples_meta"] = digest
    pins.update(process_pins(run) if here is None else here)  # a relative file a loader variable names: the run's
    read = reward_reads(run)
    if read:  # the files the rewards opened while inspect_rewards scored (rewards.reads), as they are now
        pins["reward_reads"] = reads.now(read)
    return pins


def reward_reads(run: Run) -> dict:
    """The files the rewards read at review (review.json's pins, rewards.reads), {} when none."""
    recorded = (_json_or_none(run.review) or {}).get("reward_reads")
    return recorded if isinstance(recorded, dict) else {}


def training_python_pin(python: str | None = None) -> dict | None:
    """The training interpreter the verdict is recorded under (`python`, else interpreter.training_python():
    LLM_FINETUNING_PYTHON, else the server's own or the prepared one), None when there is none: its path as named
    (absolute, its folder resolved: a venv's python links to the base interpreter, and the venv is what differs),
    the file it resolves to and that file's sha256 (a wrapper script's bytes too). The launch gate refuses another
    one before it starts anything, and train/launch.sh (train/launch.slurm) before it runs it (issue 48: a wrapper
    named after the verdict ran before the trainer's own checks)."""
    python = python if python is not None else training_python()
    if not python:
        return None
    found = shutil.which(python) if os.sep not in python else python
    if not found:
        return {"path": python, "realpath": None, "sha256": None}
    absolute = os.path.abspath(found)
    real = os.path.realpath(absolute)
    try:
        stat = os.stat(real)
        digest = _file_sha256(real, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    except OSError:
        digest = None
    return {"path": os.path.join(os.path.realpath(os.path.dirname(absolute)), os.path.basename(absolute)),
            "realpath": real, "sha256": digest}


@lru_cache(maxsize=8)  # the gate asks on every check; a rewritten file has another inode, size or ctime
def _file_sha256(path: str, *stat_key) -> str:
    return sha256_file(Path(path))


def describe_python(pin) -> str:
    """A training interpreter pin in words: its path, what it resolves to and the start of its sha256."""
    if not isinstance(pin, dict):
        return "none recorded (a verdict recorded before the training interpreter was pinned)" if pin is None \
            else _short(pin)
    real = f" -> {pin.get('realpath')}" if pin.get("realpath") != pin.get("path") else ""
    digest = str(pin.get("sha256") or "unreadable")[:12]
    return f"{pin.get('path')}{real} (sha256 {digest})"


def python_change(before, after) -> str:
    """The gate's line for a training interpreter that is not the one the verdict was recorded under."""
    return (f"{PART_NAMES['training_python']} changed: the verdict was recorded under {describe_python(before)}, "
            f"{PYTHON_VARIABLE} now names {describe_python(after)}")


def python_how(before) -> str:
    """The cheapest way on for a changed training interpreter."""
    back = f"set {PYTHON_VARIABLE} back to {before['path']}" if isinstance(before, dict) and before.get(
        "path") else f"unset {PYTHON_VARIABLE}"
    return (f"record the verdict again under this interpreter (record_inspection_verdict; the review and the samples "
            f"stay valid), or {back} (its file unchanged) and launch again")


def _json_or_none(path: Path) -> dict | None:
    try:
        with open_regular(path, encoding="utf-8") as handle:
            value = json.loads(handle.read())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 160 else text[:157] + "..."


# The pinned parts a new verdict can follow with the same samples: a reward change rescores what was sampled and
# changes nothing about how it was drawn (record_inspection_verdict checks the samples' config_pins, which hold no
# reward code, against the config: gate._check_samples_back_a_pass). Every other part is what sampling read (the
# model, data, sampling and other config fields, reward_weights/reward_funcs: config_pins; train.py and the files
# beside it, which its loader runs: "trained"; the prompt column; the agentic environment), so it needs new samples.
SAMPLES_STAY_VALID = frozenset({"reward_code", "reward_reads"})


def _sources(entries) -> dict[str, str]:
    """source file -> sha256 of a data pin (a list of entries, each with its sources)."""
    out = {}
    for entry in entries if isinstance(entries, list) else []:
        for source in (entry.get("sources") or []) if isinstance(entry, dict) else []:
            if isinstance(source, dict) and source.get("source"):
                out[str(source["source"])] = source.get("sha256")
    return out


def _data_diff(before, after) -> str:
    """What changed in the data pin, by file and field, not as JSON."""
    old, new = _sources(before), _sources(after)
    said = [f"{f}: " + ("not there (moved or deleted)" if new[f] is None and old[f] and not Path(f).exists() else
                       "its content changed") for f in old if f in new and old[f] != new[f]]
    said += [f"{f} added" for f in new if f not in old] + [f"{f} no longer read" for f in old if f not in new]
    entries = [(b, a) for b, a in zip(before, after) if isinstance(b, dict) and isinstance(a, dict)] if isinstance(
        before, list) and isinstance(after, list) else []
    for b, a in entries:
        said += [f"{k}: {_short(b.get(k))} -> {_short(a.get(k))}" for k in dict.fromkeys([*b, *a])
                 if k != "sources" and b.get(k) != a.get(k)]
    if isinstance(before, list) and isinstance(after, list) and len(before) != len(after):
        said.append(f"{len(before)} -> {len(after)} data entries")
    return "; ".join(said) or f"{_short(before)} -> {_short(after)}"


def _field_diff(key: str, before: dict, after: dict) -> str:
    said = []
    for k in dict.fromkeys([*before, *after]):
        if before.get(k) == after.get(k):
            continue
        if key == "model" and k == "files_sha256":
            said.append(f"its files changed (the content of a file up to {WHOLE_FILE_BYTES >> 20} MiB; for a larger "
                        "one its size, mtime, inode or ctime: rewritten or replaced, even with its mtime put back)")
        else:
            said.append(f"{k}: {_short(before.get(k))} -> {_short(after.get(k))}")
    return "; ".join(said)


def changes(old: dict, new: dict, reward_detail: str | None = None) -> list[str]:
    """One line per pinned part that differs, naming it and (briefly) what it was and is: the file and field, never
    a JSON blob. `reward_detail`: what of the reward changed, where the caller can tell (the files, the specs)."""
    lines = []
    for key in dict.fromkeys([*old, *new]):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        name = PART_NAMES.get(key, key)
        if key == "data":
            lines.append(f"{name} changed ({_data_diff(before, after)})")
        elif key == "training_python":
            lines.append(python_change(before, after))
        elif key == "reward_reads":
            lines.append(f"{name} changed: " + "; ".join(reads.differences(before, after) or [_short(after)]))
        elif key == "loader_env":
            lines.append(f"{name} changed: " + "; ".join(loader_change(before, after) or [
                f"{_short(before)} -> {_short(after)}"]))
        elif isinstance(before, dict) and isinstance(after, dict):
            lines.append(f"{name} changed ({_field_diff(key, before, after)})")
        elif key == "reward_code":
            lines.append(f"the reward changed ({reward_detail})" if reward_detail else
                         "the reward changed (a name, param or weight in train/rewards.json, its code, or a local "
                         "module it imports)")
        elif key == "script":
            lines.append(f"{name} changed")
        else:
            lines.append(f"{name} changed ({_short(before)} -> {_short(after)})")
    return lines

"""What a save wrote, by digest, recorded where the checkpoint cannot rewrite it (issue 48: "a resume can start from
weights the run never wrote"; a fifth round overwrote the weights and rewrote the digest inside the checkpoint).

The progress callback, after the Trainer's last file of checkpoint-N (on_save), and train_and_save, after the
final model, call `record_save`: it writes the digest into the checkpoint (a copy, for a person reading the folder)
and appends the same files by sha256 to the run's own ledger, train/logs/saves.jsonl, tagged with the launch id.
The ledger is what counts: a checkpoint is complete only with its line there (runrecord.complete_checkpoint), a
resume, a promotion and an export load only what that line lists (launch._resume_refusals, promote), and a run
reads "succeeded" only with the final save's line of its own launch (runrecord.success_problems).
`write_checkpoint_digest` alone (a digest rewritten inside a checkpoint) makes nothing complete.
Imported by the trainer process and the server alike.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from pathlib import Path

from mcp_server.evidence import sign_run, unrecorded, valid_run
from mcp_server.runs import LAUNCH_ID_ENV, Run, read_json_if_present
from mcp_server.training.trainer.written import written_through
from mcp_server.workspace import atomic_write_json, open_append_nofollow, sha256_file

CHECKPOINT_DIGEST = "llm-finetuning-digest.json"
MAX_SAVES_BYTES = 16 * 1024 * 1024  # the ledger is a line per save: a larger one is not the trainer's


def _checkpoint_files(folder: Path, final: bool = False) -> list[Path]:
    """The files of a save: a checkpoint's, every file under it; the final model's, the files directly in
    output_dir (its checkpoint-N folders are saves of their own)."""
    found = folder.iterdir() if final else folder.rglob("*")
    return sorted(p for p in found if p.is_file() and p.name != CHECKPOINT_DIGEST)


def _digest(folder: Path, final: bool = False) -> dict[str, dict]:
    return {p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
            for p in _checkpoint_files(folder, final)}


def write_checkpoint_digest(folder: Path, step: int | None = None) -> Path:
    """<checkpoint>/llm-finetuning-digest.json: every file the save left, its size and sha256 (written atomically).
    A copy for the reader: what counts is the run's ledger (record_save)."""
    return atomic_write_json(folder / CHECKPOINT_DIGEST, {"step": step, "files": _digest(folder)})


def save_key(run: Run, folder: Path) -> str:
    """How the ledger names a save's folder: relative to the run when inside it, else its resolved path."""
    real = Path(folder).resolve()
    home = run.dir.resolve()
    return real.relative_to(home).as_posix() if real.is_relative_to(home) else str(real)


class SaveLeadsOut(SystemExit):
    """A save whose folder no longer resolves inside the run directory: refused, the trainer exits (exit 3, as its
    other refusals) and the run fails, never "succeeded"."""


def refuse_save_outside(run: Run, folder: Path) -> None:
    """SaveLeadsOut, naming the link, when `folder` (output_dir, a checkpoint of it) does not resolve to a folder
    inside the run directory. The trainer checks output_dir when it starts only; round 12 (D1) moved checkpoints/
    away and put a link to a folder elsewhere in its place mid-training: the next checkpoints, the final model and
    TRL's model card (README.md, written into output_dir) landed there, overwriting files, and the run read
    "succeeded". Called before each save (the progress callback) and by record_save after it."""
    folder = Path(os.path.abspath(folder))  # as the Trainer saves: relative to the current directory
    try:
        real, home = folder.resolve(), run.dir.resolve()
    except (OSError, RuntimeError):  # a link loop
        real, home = None, None
    if real is not None and real != home and real.is_relative_to(home):
        return
    link = next((p for p in [folder, *folder.parents] if p.is_symlink()), None)
    how = f"through the link {link} (to {os.readlink(link)})" if link is not None else f"(to {real or '?'})"
    print(f"llm-finetuning: refusing to save: {folder} leads outside the run directory {run.dir} {how}; nothing "
          "more is saved there and the run fails. Replace the link with the run's own folder, then resume_training "
          "from a checkpoint this run saved", file=sys.stderr, flush=True)
    raise SaveLeadsOut(3)


def _written_through(folder: Path, recursive: bool) -> list[str]:
    """The entries of `folder` a save would write through rather than into the run: a symbolic link, anything not a
    regular file or folder (a FIFO, a socket, a device), a file with another hard link (a name elsewhere, maybe
    outside the workspace, for the same bytes). Folders below are walked with `recursive` (a checkpoint's), never
    through a link."""
    found = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in sorted(dirs + files):
            path = Path(root) / name
            try:
                info = os.lstat(path)
            except OSError:
                continue
            kind = written_through(info)  # the launch gate's own test of an entry (trainer/written.py)
            if kind == "link":
                found.append(f"{path} is a symbolic link (to {os.readlink(path)})")
            elif kind == "special":
                found.append(f"{path} is not a regular file")
            elif kind == "shared":
                found.append(f"{path} has {info.st_nlink} hard links (a name elsewhere for the same file)")
        if not recursive:
            break
    return found


def refuse_save_through(run: Run, folder: Path, recursive: bool = True) -> None:
    """SaveLeadsOut, naming the entry, when `folder` (a checkpoint about to be saved, recursive; output_dir, where
    the final model and TRL's model card go, its own entries only) holds an entry a save would write through
    (_written_through): round 20 (b04) planted checkpoint-N/ as a real folder of links to files outside the
    workspace, and links as output_dir's README.md and config.json, after the launch gate: transformers and TRL
    open() those names and wrote the outside files. Called before each save and after it (record_save)."""
    folder = Path(os.path.abspath(folder))
    found = _written_through(folder, recursive) if folder.is_dir() and not folder.is_symlink() else []
    if found:
        print(f"llm-finetuning: refusing to save: {'; '.join(found[:4])}: a save writes only the run's own files "
              f"in {folder}, never through a link; nothing more is saved and the run fails. Remove it, then "
              "resume_training from a checkpoint this run saved", file=sys.stderr, flush=True)
        raise SaveLeadsOut(3)


class SaveNotTrained(SystemExit):
    """A save whose files are not what the trainer held in memory when it saved (a weight or state file replaced as
    it was written): no ledger line, the trainer exits (exit 3) and the run fails, never "succeeded"."""


def _from_memory(folder: Path, held: dict) -> tuple[dict[str, tuple[str, int]], list[str]]:
    """The save's files the trainer holds in memory (`held`: model, optimizer, lr_scheduler, state), each read once
    and compared with memory: ({name: (sha256, bytes) of that read}, why a file is not what is in memory)."""
    from mcp_server.inspection.loaded_weights import weights_read
    from mcp_server.training.trainer.resumed_state import saved_state_read

    read, problems = {}, []
    if held.get("model") is not None:
        read, problems = weights_read(held["model"], folder, "replaced as they were saved")
    more, wrong = saved_state_read(held.get("optimizer"), held.get("lr_scheduler"), folder)
    read, problems = {**read, **more}, problems + wrong
    state, path = held.get("state"), folder / "trainer_state.json"
    if dataclasses.is_dataclass(state) and path.is_file():  # a TrainerState
        data = path.read_bytes()  # TrainerState.save_to_json's bytes, from the state in memory
        if data != (json.dumps(dataclasses.asdict(state), indent=2, sort_keys=True) + "\n").encode("utf-8"):
            problems.append("trainer_state.json: not the trainer's state in memory")
        read["trainer_state.json"] = (hashlib.sha256(data).hexdigest(), len(data))
    from mcp_server.inspection.private_copy import configs_read, tokenizer_read

    for found in (configs_read(held.get("model"), folder), tokenizer_read(held.get("tokenizer"), folder)):
        read, problems = {**read, **found[0]}, problems + found[1]
    return read, problems


def sharded(args) -> bool:
    """A DeepSpeed or FSDP run: rank 0 holds a shard only and the Trainer saves the weights through the engine's own
    files, so its saves are hashed from disk (record_save without `held`; named in docs/development.md)."""
    env = (os.environ.get("ACCELERATE_USE_DEEPSPEED", ""), os.environ.get("ACCELERATE_USE_FSDP", ""))
    return bool(getattr(args, "deepspeed", None) or getattr(args, "fsdp", None)) or "true" in (e.lower() for e in env)


def record_save(run: Run, folder: Path, step: int | None = None, final: bool = False, **held) -> dict:
    """The trainer's record of one save: the checkpoint's own digest (not for the final model), then one line
    appended to train/logs/saves.jsonl (never through a link: Run.inside, O_NOFOLLOW) with its files, the step,
    whether it is the final model and this launch's id. A folder that leads outside the run is refused
    (refuse_save_outside): no line, the trainer exits. `held` (model, optimizer, lr_scheduler, state: what the
    trainer saved from, and tokenizer): each such file's sha256 is that of one read whose tensors or state equal
    memory's (round 18: a weight file replaced as it was saved was hashed from disk and signed), the config files and
    the tokenizer's too; one that is not is refused (SaveNotTrained, exit 3, no line). The line names the files so
    checked (`from_memory`)."""
    refuse_save_outside(run, folder)
    refuse_save_through(run, folder, recursive=not final)
    read, problems = _from_memory(folder, held) if held else ({}, [])
    if problems:
        print(f"llm-finetuning: refusing to record the save {folder}: its files are not what the trainer held in "
              f"memory: {'; '.join(problems[:4])}. Nothing vouches for it and the "
              "run fails; resume from an earlier checkpoint this run recorded", file=sys.stderr, flush=True)
        raise SaveNotTrained(3)
    files = _digest(folder, final)
    for name, (sha, size) in read.items():
        if name in files:  # as read when compared with memory, not hashed again from disk
            files[name] = {"bytes": size, "sha256": sha}
    if not final:
        atomic_write_json(folder / CHECKPOINT_DIGEST, {"step": step, "files": files})
    line = {"save": save_key(run, folder), "step": step, "final": final, "files": files}
    if held:
        line["from_memory"] = sorted(name for name in read if name in files)
    tag = os.environ.get(LAUNCH_ID_ENV)
    if tag:
        line["launch_id"] = tag
    line = sign_run(run, run.saves, line)  # the key outside the workspace: a line added by hand is no one's
    run.logs.mkdir(parents=True, exist_ok=True)
    with open_append_nofollow(run.inside(run.saves)) as handle:
        handle.write((json.dumps(line) + "\n").encode("utf-8"))
    return line


def _valid_files(files) -> bool:
    return isinstance(files, dict) and bool(files) and all(
        isinstance(v, dict) and isinstance(v.get("bytes"), int) and isinstance(v.get("sha256"), str)
        for v in files.values())


def read_saves(run: Run, rejected: list[str] | None = None) -> list[dict]:
    """The ledger's lines, in order; none when it is missing, a link (or under one), not a file or oversized. A
    damaged line is skipped, and so is one without the trainer's signature (evidence.py): named in `rejected`."""
    path = run.saves
    if path.is_symlink() or run.logs.is_symlink() or not path.is_file():
        return []
    try:
        if path.stat().st_size > MAX_SAVES_BYTES:
            return []
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    out = []
    for number, raw in enumerate(lines, 1):
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if not (isinstance(value, dict) and isinstance(value.get("save"), str) and _valid_files(value.get("files"))):
            continue
        if valid_run(run, path, value):
            out.append(value)
        elif rejected is not None:
            rejected.append(unrecorded(run.saves.relative_to(run.dir).as_posix(), number))
    return out


def recorded_save(run: Run, folder: Path, final: bool = False) -> dict | None:
    """The ledger's last line for `folder` (the latest save there), None when the run's trainer never recorded it."""
    key = save_key(run, folder)
    found = [s for s in read_saves(run) if s["save"] == key and bool(s.get("final")) == final]
    return found[-1] if found else None


def checkpoint_digest(folder: Path) -> dict[str, dict] | None:
    """The files the checkpoint's own digest lists ({relative path: {bytes, sha256}}), None when there is none or
    it is damaged."""
    value = read_json_if_present(Path(folder) / CHECKPOINT_DIGEST)
    files = value.get("files") if isinstance(value, dict) else None
    return files if _valid_files(files) else None


def checkpoint_problems(run: Run, folder: Path, contents: bool = False, final: bool = False) -> list[str]:
    """Why `folder` is not a save the run recorded (train/logs/saves.jsonl): no line for it (a save cut short, or
    not written by the run's trainer), its own digest rewritten since, a listed file missing or of another size, a
    file the save did not write; with `contents`, a file whose sha256 differs (resume, promote and export check
    it: weights the run never wrote are never loaded). [] when it holds."""
    folder = Path(folder)
    seen = recorded_save(run, folder, final)
    if seen is None:
        rejected: list[str] = []
        key = save_key(run, folder)
        found = [s for s in read_saves(run, rejected) if s["save"] == key]  # to name the lines it could not trust
        why = f"; {rejected[-1]}" if rejected and not found else ""
        return [f"no record of this save in {run.saves.relative_to(run.dir)} (the save did not finish, or the "
                f"run's trainer did not write it){why}"]
    files = seen["files"]
    problems = []
    own = checkpoint_digest(folder)
    if not final and own is not None and own != files:
        problems.append(f"its {CHECKPOINT_DIGEST} is not the digest the trainer recorded (rewritten since the save)")
    present = {p.relative_to(folder).as_posix(): p for p in _checkpoint_files(folder, final)}
    for name, saved in files.items():
        path = present.get(name)
        if path is None:
            problems.append(f"{name} is missing")
        elif path.stat().st_size != saved["bytes"]:
            problems.append(f"{name} has {path.stat().st_size} bytes, not the {saved['bytes']} saved")
        elif contents and sha256_file(path) != saved["sha256"]:
            problems.append(f"{name} is not the file saved (sha256 {saved['sha256'][:12]} at the save)")
    problems += [f"{name} was not written by the save" for name in present if name not in files]
    return problems


def recorded_files_problems(run: Run, folder: Path, files: dict[str, str], final: bool = False) -> list[str]:
    """Why `files` ({relative: sha256}: workspace.tree_files of `folder`, the hashes a load is then checked against,
    checked_load) are not the save the run's ledger recorded: no line for it, a file of another sha256, a file the
    save did not write (the final model's subfolders aside: its line lists the files directly in output_dir)."""
    seen = recorded_save(run, Path(folder), final)
    if seen is None:
        return [f"no record of this save in {run.saves.relative_to(run.dir)}"]
    problems = []
    for name, sha in files.items():
        if name == CHECKPOINT_DIGEST or (final and "/" in name):
            continue
        saved = seen["files"].get(name)
        if saved is None:
            problems.append(f"{name} was not written by the save")
        elif saved["sha256"] != sha:
            problems.append(f"{name} is not the file saved (sha256 {saved['sha256'][:12]} at the save)")
    return problems

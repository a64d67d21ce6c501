"""What a checkpoint's save wrote, by digest: the progress callback writes it into each checkpoint-N/ it saved
(on_save, after the Trainer's last file), so a checkpoint is complete only with it (runrecord.complete_checkpoint)
and a resume loads only what the run wrote (launch._resume_refusals checks every file's sha256): issue 48, "a
resume can start from weights the run never wrote". Imported by the trainer process and the server alike.
"""

from __future__ import annotations

from pathlib import Path

from mcp_server.runs import read_json_if_present
from mcp_server.workspace import atomic_write_json, sha256_file

CHECKPOINT_DIGEST = "llm-finetuning-digest.json"


def _checkpoint_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != CHECKPOINT_DIGEST)


def write_checkpoint_digest(folder: Path, step: int | None = None) -> Path:
    """<checkpoint>/llm-finetuning-digest.json: every file the save left, its size and sha256 (written last,
    atomically: its presence says the save ended)."""
    files = {p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
             for p in _checkpoint_files(folder)}
    return atomic_write_json(folder / CHECKPOINT_DIGEST, {"step": step, "files": files})


def checkpoint_digest(folder: Path) -> dict[str, dict] | None:
    """The files the digest lists ({relative path: {bytes, sha256}}), None when there is none or it is damaged."""
    value = read_json_if_present(Path(folder) / CHECKPOINT_DIGEST)
    files = value.get("files") if isinstance(value, dict) else None
    ok = isinstance(files, dict) and files and all(
        isinstance(v, dict) and isinstance(v.get("bytes"), int) and isinstance(v.get("sha256"), str)
        for v in files.values())
    return files if ok else None


def checkpoint_problems(folder: Path, contents: bool = False) -> list[str]:
    """Why `folder` is not a checkpoint the run saved: no digest (a save cut short, or not written by the run's
    trainer), a listed file missing or of another size, a file the save did not write; with `contents`, a file
    whose sha256 differs (resume checks it: weights the run never wrote are never loaded). [] when it holds."""
    folder = Path(folder)
    files = checkpoint_digest(folder)
    if files is None:
        return [f"no {CHECKPOINT_DIGEST} (the save did not finish, or the run's trainer did not write it)"]
    problems = []
    present = {p.relative_to(folder).as_posix(): p for p in _checkpoint_files(folder)}
    for name, seen in files.items():
        path = present.get(name)
        if path is None:
            problems.append(f"{name} is missing")
        elif path.stat().st_size != seen["bytes"]:
            problems.append(f"{name} has {path.stat().st_size} bytes, not the {seen['bytes']} saved")
        elif contents and sha256_file(path) != seen["sha256"]:
            problems.append(f"{name} is not the file saved (sha256 {seen['sha256'][:12]} at the save)")
    problems += [f"{name} was not written by the save" for name in present if name not in files]
    return problems

"""The keyed record (issue 48, forged results): every evidence record that decides whether a run succeeded, what a
resume, a promotion or an export may load, and which baseline counts carries `mac`, an HMAC-SHA256 under a key
kept outside any workspace, over the record, the folder it belongs to and the file that holds it. A forger who can
write the workspace but cannot read the key (an agent or model-written code confined to it) writes files that read
as absent: "not recorded by llm-finetuning on this machine". A process of the same user that reads the key can
still forge (docs/development.md, "Evidence").

The key: `$LLM_FINETUNING_STATE_DIR/evidence.key`, else `$XDG_STATE_HOME/llm-finetuning/evidence.key`, else
`~/.local/state/llm-finetuning/evidence.key`: 32 bytes from `secrets`, folder 0700, file 0600, created at first
use (a temporary file linked into place: never half of one). A SLURM node reads the same path (a shared home).

`python -m mcp_server.evidence exit RC` (train/launch.sh and train/launch.slurm, when the training command ends):
the launcher's signed exit record, train/logs/exit.json, beside the plain exit-code a person reads."""

from __future__ import annotations

import datetime as _dt
import hashlib
import hmac
import json
import os
import secrets
import sys
from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server.workspace import atomic_write_json, workspace_root

STATE_ENV = "LLM_FINETUNING_STATE_DIR"
KEY_NAME = "evidence.key"
KEY_BYTES = 32
MAC = "mac"
_cache: dict[tuple, bytes] = {}
# In the keyless worker (worker_keyless): its caller, asked whether a record is valid; this process has no key.
ORACLE = None


class EvidenceKeyError(UserInputError):
    """The key cannot be read, made or used where it is."""

    def __init__(self, message: str):
        super().__init__("evidence_key", message)


def key_path() -> Path:
    """Where the key lives (module docstring), never checked for existence."""
    if os.environ.get(STATE_ENV):
        folder = Path(os.environ[STATE_ENV]).expanduser()
    elif os.environ.get("XDG_STATE_HOME"):
        folder = Path(os.environ["XDG_STATE_HOME"]).expanduser() / "llm-finetuning"
    else:
        folder = Path.home() / ".local" / "state" / "llm-finetuning"
    return Path(os.path.abspath(folder)) / KEY_NAME


def key_candidates() -> list[Path]:
    """Every path the key may have here, whichever variable is set: what the keyless worker hides."""
    home = Path.home() / ".local" / "state" / "llm-finetuning" / KEY_NAME
    paths = [key_path(), home]
    if os.environ.get("XDG_STATE_HOME"):
        paths.append(Path(os.environ["XDG_STATE_HOME"]).expanduser() / "llm-finetuning" / KEY_NAME)
    return [Path(os.path.abspath(p)) for p in paths]


def _where() -> str:
    return f"{key_path()} (set {STATE_ENV} to the folder that holds it)"


def _checked_path() -> Path:
    path = key_path()
    try:
        real, home = path.resolve(), workspace_root()
    except OSError as exc:
        raise EvidenceKeyError(f"cannot resolve the evidence key's path {path}: {exc}") from None
    if real.is_relative_to(home):
        raise EvidenceKeyError(f"the evidence key {path} lies inside the workspace {home}: anything that writes the "
                               f"workspace could read it and forge a run's records. Set {STATE_ENV} to a folder "
                               "outside the workspace")
    return path


def state_dir() -> Path:
    """The folder of the key, outside the workspace (EvidenceKeyError otherwise): the launchers keep there what the
    workspace must not reach, as the trainer's package folder (launchers.base.trainer_pythonpath)."""
    return _checked_path().parent


def _read(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        stat = os.fstat(fd)
        cached = _cache.get((str(path), stat.st_ino, stat.st_mtime_ns, stat.st_size))
        if cached is not None:
            return cached
        data = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) != KEY_BYTES:
        raise EvidenceKeyError(f"the evidence key {path} holds {len(data)} bytes, not {KEY_BYTES}: remove it (every "
                               "record signed with it then reads as unrecorded) or restore it")
    _cache[(str(path), stat.st_ino, stat.st_mtime_ns, stat.st_size)] = data
    return data


def _create(path: Path) -> None:
    folder = path.parent
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if made:
        os.chmod(folder, 0o700)
    tmp = folder / f".{KEY_NAME}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, secrets.token_bytes(KEY_BYTES))
        os.fsync(fd)
        os.close(fd)
        try:
            os.link(tmp, path)  # atomic and exclusive: another process's key, made first, wins
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)


def key(create: bool = False) -> bytes:
    """The 32-byte key; made first when `create` and there is none. EvidenceKeyError naming the path and the
    variable when it cannot be read (or lies inside the workspace)."""
    if ORACLE is not None:
        raise EvidenceKeyError("this process imports workspace code no one has reviewed yet and never holds the "
                               "evidence key (the keyless worker: worker_keyless); it signs nothing")
    path = _checked_path()
    try:
        return _read(path)
    except FileNotFoundError:
        if not create:
            raise EvidenceKeyError(f"no evidence key at {_where()}: launch_training makes it; a SLURM node reads it "
                                   "through a shared home") from None
    except OSError as exc:
        raise EvidenceKeyError(f"cannot read the evidence key {_where()}: {exc.strerror or exc}") from None
    try:
        _create(path)
        return _read(path)
    except OSError as exc:
        raise EvidenceKeyError(f"cannot create the evidence key {_where()}: {exc.strerror or exc}") from None


def _canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("utf-8")


def _mac(secret: bytes, scope: Path | str, file: str, record: dict) -> str:
    """The mac of `record` in `file` of `scope` (a folder, resolved here; a str: already resolved)."""
    body = {k: v for k, v in record.items() if k != MAC}
    where = scope if isinstance(scope, str) else str(Path(os.path.abspath(scope)).resolve())
    payload = _canonical({"scope": where, "file": file, "record": body})
    return hmac.new(secret, payload, hashlib.sha256).hexdigest()


def run_lines_verifier(run, path: Path, secret: bytes):
    """valid_run for many records of one file (a run's progress log: thousands of lines per read), the folder
    resolved once: a function of a record, True when it carries the mac written for it there."""
    where, file = str(Path(os.path.abspath(run.dir)).resolve()), run_file(run, path)

    def check(record) -> bool:
        return (isinstance(record, dict) and isinstance(record.get(MAC), str)
                and hmac.compare_digest(record[MAC], _mac(secret, where, file, record)))
    return check


def sign(scope: Path, file: str, record: dict, create: bool = False, default=str) -> dict:
    """`record` (made plain JSON, as it will be read back) with its `mac` over the scope folder (a run directory,
    eval/), the file's path in it and the record, the launch id inside it."""
    return _signed(key(create), scope, file, record, default)


def _signed(secret: bytes, scope: Path | str, file: str, record: dict, default) -> dict:
    plain = json.loads(json.dumps({k: v for k, v in record.items() if k != MAC}, default=default))
    return {**plain, MAC: _mac(secret, scope, file, plain)}


def run_lines_signer(run, path: Path, default=str):
    """sign_run for many records of one file (a progress log written whole), the key read and the folder resolved
    once: a function of a record, the record signed as sign_run signs it."""
    secret, where, file = key(), str(Path(os.path.abspath(run.dir)).resolve()), run_file(run, path)
    return lambda record: _signed(secret, where, file, record, default)


def valid(scope: Path, file: str, record, secret: bytes | None = None) -> bool:
    """Whether `record` carries the mac llm-finetuning on this machine wrote for it there. False without a key."""
    if not isinstance(record, dict) or not isinstance(record.get(MAC), str):
        return False
    if secret is None and ORACLE is not None:  # the keyless worker: its caller checks the mac
        where = scope if isinstance(scope, str) else str(Path(os.path.abspath(scope)).resolve())
        return ORACLE({"op": "valid", "scope": where, "file": file, "record": record}).get("valid") is True
    if secret is None:
        try:
            secret = key()
        except UserInputError:
            return False
    return hmac.compare_digest(record[MAC], _mac(secret, scope, file, record))


def key_problem() -> str | None:
    """Why no record can be verified here (no key, an unreadable one), None when the key reads."""
    if ORACLE is not None:
        problem = ORACLE({"op": "problem"}).get("problem")
        return problem if isinstance(problem, str) else None
    try:
        key()
    except UserInputError as exc:
        return str(exc).removeprefix("evidence_key: ")
    return None


def unrecorded(file: str, line: int | None = None) -> str:
    """The words every reader uses for a record it treats as absent."""
    where = f"{file} line {line}" if line is not None else file
    why = key_problem()
    return (f"not recorded by llm-finetuning on this machine: {where} has no valid signature"
            + (f" ({why})" if why else ""))


# sample_completions' record of the samples it wrote (inspection/sample_files.py), signed for what it is, not under
# the run's path: a moved run keeps its samples
SAMPLES_SIGNED_BY, SAMPLES_SIGNED_AS = "sample_completions", "samples.meta.json"


def signed_samples_meta(run) -> tuple[dict | None, str | None]:
    """(the run's inspection/samples.meta.json as the sampler signed it, None) or (None, why it is not read: missing,
    unreadable, or a record the sampler did not sign, edited or written by hand). The one read of that record for
    every reader of what it measured (the samples' vouching, emission's measured max_completion_length, the
    launch's memory plan at the longest prompt): a forged record changes nothing any of them computes."""
    record, _, why = samples_meta_read(run)
    return (record, None) if why is None else (None, why)


def samples_meta_read(run) -> tuple[dict | None, str | None, str | None]:
    """(the signed record or None, the sha256 of the bytes read or None when there were none, why it is not the
    sampler's or None): one read of inspection/samples.meta.json, so what a verdict checks and what it pins are the
    same bytes (a record swapped between a check and a second read pins nothing; issue 48)."""
    meta = run.samples_meta
    if not meta.is_file():
        return None, None, f"{run_file(run, meta)} is missing; run sample_completions again (it writes and signs both)"
    try:
        data = meta.read_bytes()
    except OSError:
        return None, None, f"{unrecorded(run_file(run, meta))}; run sample_completions again"
    try:
        record = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        record = None
    digest = hashlib.sha256(data).hexdigest()
    if not valid(SAMPLES_SIGNED_BY, SAMPLES_SIGNED_AS, record):
        return None, digest, f"{unrecorded(run_file(run, meta))}; run sample_completions again"
    return record, digest, None


def samples_not_vouched(run, data: bytes | None) -> str | None:
    """Why `data`, the run's inspection/samples.jsonl's bytes as read (None: absent, not a file, unreadable), are
    not what the sampler wrote: no samples.meta.json, a record the sampler did not sign, or another file's digest.
    None when its signed record vouches for them. The one check for every reader of the samples (the inspection's
    doors, the memory planner's shorter_completions)."""
    samples, meta = run.samples, run.samples_meta
    name = run_file(run, samples)
    record, why = signed_samples_meta(run)
    if record is None:
        return f"{name} is not vouched for by the sampler: {why}"
    if data is None or hashlib.sha256(data).hexdigest() != record.get("samples_sha256"):
        return (f"{name} is not the file sample_completions wrote (its sha256 is not the one the sampler signed in "
                f"{run_file(run, meta)}): completions written or edited by hand back no review; run "
                "sample_completions again")
    return None


def run_scope(run) -> Path:
    return run.dir


def run_file(run, path: Path) -> str:
    """A run's evidence file as its records name it: its path inside the run directory."""
    return Path(os.path.abspath(path)).relative_to(Path(os.path.abspath(run.dir))).as_posix()


def sign_run(run, path: Path, record: dict, create: bool = False, default=str) -> dict:
    return sign(run.dir, run_file(run, path), record, create, default)


def valid_run(run, path: Path, record, secret: bytes | None = None) -> bool:
    return valid(run.dir, run_file(run, path), record, secret)


def _launch_entry(run_dir: Path) -> tuple[Path, str]:
    """Where the launch ledger entry of `run_dir` lives (beside the key, outside every workspace) and the resolved
    folder it names."""
    folder = str(Path(os.path.abspath(run_dir)).resolve())
    name = hashlib.sha256(folder.encode("utf-8")).hexdigest() + ".json"
    return _checked_path().parent / "launches" / name, folder


def record_launch(run_dir: Path, launch_id: str, job_id: str | None = None, job_comment: str | None = None,
                  trained: dict | None = None) -> Path:
    """The launcher's record of the run's current launch id (issue 48, seventh round: run.json is in the workspace
    and unsigned, so a forger rewrote its launch_id to replay an earlier launch's signed records). Kept beside the
    key, outside the workspace, signed: what a workspace writer cannot write, copy back or remove. Each launch
    replaces it: a local launch before its process starts; a SLURM launch before sbatch, then again with the
    scheduler's `job_id` (and the job's ownership token, `job_comment`) bound into it once sbatch answers: the job
    whose state is this launch's. `trained`: what the launch passed its gates with and trains (the config's,
    reward code's and verdict's sha256, the verdict and its reviewer: launchers.base.trained_record), what an
    export's model card reports (issue 48 round 14: never the files as they are at export). The earlier launches
    of the run (since its emission) keep theirs, under `earlier` (earlier_launches)."""
    earlier = earlier_launches(_entry(run_dir) or {}, launch_id)
    body = {"launch_id": launch_id, **({"job_id": str(job_id)} if job_id is not None else {}),
            **({"job_comment": job_comment} if job_comment is not None else {}),
            **({"trained": trained} if trained is not None else {}), **({"earlier": earlier} if earlier else {})}
    return _write_entry(run_dir, body, "the launch", "nothing was started")


def earlier_launches(value: dict, launch_id: str | None = None) -> dict:
    """launch id -> what it trained, of each launch the signed entry `value` (_entry) names other than `launch_id`:
    its `earlier` ones and its own. A resumed run's earlier checkpoints were saved by those, and export with what
    they trained (evaluation/provenance.py). An entry tampered with, or an emission's, names none."""
    if "mac" not in value or not isinstance(value.get("launch_id"), str) or not value["launch_id"]:
        return {}
    earlier = value.get("earlier") if isinstance(value.get("earlier"), dict) else {}
    out = {k: v for k, v in earlier.items() if isinstance(k, str) and isinstance(v, dict) and k != launch_id}
    if value["launch_id"] != launch_id and isinstance(value.get("trained"), dict):
        out[value["launch_id"]] = value["trained"]
    return out


def record_emission(run_dir: Path) -> Path:
    """The emission of a run at `run_dir`: its ledger entry replaced by one that names no launch (issue 48, round
    12 F1: the entry is keyed by the path and outlived a deleted run, so an earlier run's signed records, run.json
    and checkpoints copied into a run emitted again there read as this run's, "succeeded, step 4/4"). Until
    launch_training records a launch of it, no launch's record is this run's (runstate.derive_state: not launched);
    a trainer started by hand (`python train/train.py`, untagged) still is."""
    stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return _write_entry(run_dir, {"emitted_at": stamp}, "the emission", "nothing was emitted")


def _write_entry(run_dir: Path, body: dict, what: str, then: str) -> Path:
    path, folder = _launch_entry(run_dir)
    record = sign(Path(folder), "launch", {**body, "run_dir": folder}, create=True)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        return atomic_write_json(path, record)
    except OSError as exc:
        raise EvidenceKeyError(f"cannot record {what} in {path.parent} (beside the evidence key {_where()}): "
                               f"{exc.strerror or exc}; {then}") from None


def launch_record(run_dir: Path) -> dict | None:
    """The launcher's record of `run_dir`'s current launch (record_launch: launch_id; job_id and job_comment for
    a SLURM job; trained, and the earlier launches' under `earlier`), None when it recorded none (never launched by
    launch_training on this machine, or no key). A tampered entry reads as {"launch_id": ""}: no record is of that
    launch, no job is its job. A run emitted since its path's last launch (record_emission) has none:
    emitted_since_launch says when."""
    value = _entry(run_dir)
    if value is None or "mac" not in value:
        return value
    if "launch_id" not in value and isinstance(value.get("emitted_at"), str):  # emitted since: no launch recorded
        return None
    launch_id = value.get("launch_id")
    earlier = earlier_launches(value, launch_id)
    return {"launch_id": launch_id if isinstance(launch_id, str) else "",
            **{k: value[k] for k in ("job_id", "job_comment") if isinstance(value.get(k), str)},
            **({"trained": value["trained"]} if isinstance(value.get("trained"), dict) else {}),
            **({"earlier": earlier} if earlier else {})}


def _entry(run_dir: Path) -> dict | None:
    """The ledger entry of `run_dir` as signed, None without one, {"launch_id": ""} for one tampered with."""
    try:
        path, folder = _launch_entry(run_dir)
    except UserInputError:
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"launch_id": ""}
    if not valid(Path(folder), "launch", value) or value.get("run_dir") != folder:
        return {"launch_id": ""}
    return value


def emitted_since_launch(run_dir: Path) -> str | None:
    """When the run at `run_dir` was emitted, if no launch was recorded since (record_emission): any record of a
    launch there (tagged with a launch id, or a run.json) is of an earlier run at this path. None otherwise."""
    value = _entry(run_dir) or {}
    return value["emitted_at"] if "launch_id" not in value and isinstance(value.get("emitted_at"), str) else None


def recorded_launch(run_dir: Path) -> str | None:
    """The launch id the launcher recorded for `run_dir` (launch_record), None when it recorded none; "" for a
    tampered entry."""
    record = launch_record(run_dir)
    return None if record is None else record["launch_id"]


def write_exit(run_dir: Path, code: int) -> Path:
    """train/logs/exit.json: the launcher's signed record of how the training command ended, tagged with the
    launch id it was started with."""
    from mcp_server.runs import LAUNCH_ID_ENV, Run

    run = Run(Path(run_dir))
    record = {"exit_code": int(code)}
    if os.environ.get(LAUNCH_ID_ENV):
        record["launch_id"] = os.environ[LAUNCH_ID_ENV]
    return atomic_write_json(run.inside(run.exit_record), sign_run(run, run.exit_record, record))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] != "exit" or not argv[1].lstrip("-").isdigit():
        print("usage: python -m mcp_server.evidence exit RC (in the run directory)", file=sys.stderr)
        return 2
    try:
        write_exit(Path.cwd(), int(argv[1]))
    except (UserInputError, OSError) as exc:
        print(f"llm-finetuning: the exit record was not signed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

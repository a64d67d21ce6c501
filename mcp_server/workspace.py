"""Where files go: the workspace root, run directories, path safety and atomic writes."""

from __future__ import annotations

import datetime as _dt
import errno
import hashlib
import json
import os
import re
import stat as _stat
import tempfile
import unicodedata
from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server.userfiles import NotRegularFile, not_regular, sha256_file


def workspace_root() -> Path:
    """`LLM_FINETUNING_WORKSPACE` when set, else the current directory."""
    return Path(os.environ.get("LLM_FINETUNING_WORKSPACE") or current_directory()).resolve()


def current_directory() -> str:
    """os.getcwd(), or an error saying the directory is gone: a command run in a directory deleted after (or
    before) it started in it (issue 48, round 13 N1: the CLI then waited forever on its worker)."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        raise UserInputError("cwd", "the current directory no longer exists (deleted while a shell or harness was "
                                    "in it): cd to an existing directory and run the command again") from None


# The workspace-level folders the project writes, each with what it holds (issue 48, round 10 D1: `ws/eval ->
# /tmp/elsewhere` sent goldens, a baseline and its signed ledger line outside the workspace, `ws/runs -> ...` a
# whole emitted run). Each is named through workspace_folder, which refuses one that is, or resolves through, a
# link leading outside the workspace. A file written at the workspace's top (WORKSPACE_FILES) is replaced by a
# rename, never written through a link in its place (atomic_write_bytes).
WORKSPACE_FOLDERS = {
    "runs": "the run directories (emit_grpo_config, sample_completions, launches, promotions)",
    "eval": "baselines, goldens, drift records and their signed ledger (evaluate_model, promote_checkpoint)",
    "agentic-demo-warm-start": "the agentic demo's warm start (llm-finetuning demo --agentic)",
}
WORKSPACE_FILES = ("env-report.json", "agentic-demo-train.jsonl")


def leads_outside(path: Path, root: Path) -> tuple[Path | None, bool]:
    """(where `path` resolves, whether that is outside `root`, itself resolved); a link loop (in either) is
    (None, True). The one check that a path resolves inside a folder: the workspace's (linked_out,
    workspace_folder, refuse_run_dir_outside) and a run's (runs.Run.leads_outside: its files written, its log read)."""
    try:
        real, home = Path(path).resolve(), Path(root).resolve()
    except (OSError, RuntimeError):
        return None, True
    return real, not real.is_relative_to(home)


def workspace_folder(name: str) -> Path:
    """<workspace>/<name>, a folder of WORKSPACE_FOLDERS: UserInputError naming it when it is a symbolic link, or
    resolves through one, to a place outside the workspace (nothing is written then). A link to a folder inside
    the workspace is followed."""
    root = workspace_root()
    path = root / name
    real, outside = leads_outside(path, root)
    if outside:
        what = f"a symbolic link to {os.readlink(path)}" if path.is_symlink() else f"resolves to {real or '?'}"
        raise UserInputError(name, f"the workspace folder {path} ({WORKSPACE_FOLDERS[name]}) is {what}, outside "
                             f"the workspace {root}: nothing is written through it. Replace the link with a folder "
                             f"(move what it holds into {path}), or set LLM_FINETUNING_WORKSPACE to the folder that "
                             "holds it")
    return path


def runs_root() -> Path:
    return workspace_folder("runs")


def eval_root() -> Path:
    """`eval/` beside `runs/`: baselines, goldens and drift measurements outlive runs."""
    return workspace_folder("eval")


def baseline_hashes() -> dict[str, str]:
    """sha256 of every written baseline (eval/baseline-*.json), by file name. A launch records them in run.json, and
    promote_checkpoint refuses a baseline that no longer hashes to what its run recorded (one edited by hand)."""
    folder = eval_root()
    return {p.name: sha256_file(p) for p in sorted(folder.glob("baseline-*.json"))} if folder.is_dir() else {}


def find_existing(text: str | Path) -> Path | None:
    """An existing path a person or an agent named, resolved: an absolute path as is; a relative one under the
    workspace root, then under runs/ (a run's name), then under the current directory (a CLI user's habit). The
    workspace comes first so a relative path means the same through the MCP door, whose current directory is the
    harness's, as on the command line. None when none exists; never the current directory for an empty string."""
    raw = Path(str(text)).expanduser()
    if not str(text).strip():
        return None
    candidates = [raw] if raw.is_absolute() else [workspace_root() / raw, runs_root() / raw, Path.cwd() / raw]
    for path in candidates:
        try:
            if path.exists():
                return path.resolve()
        except OSError:  # a name too long for the file system: no such path
            continue
    return None


def located(text: str | None, names=()) -> str | None:
    """A path a request names, absolute where find_existing finds it (the workspace, runs/, the current directory):
    what a worker that works in the run directory reads (issue 49: `sample-completions RUN --dataset plain.jsonl`
    looked for the file in the run). A name in `names` ('tiny'), a hub name, or None, as given."""
    if text is None or text in names:
        return text
    found = find_existing(text)
    return str(found) if found else text


def refuse_linked_out(text: str | Path, field: str = "run") -> None:
    """UserInputError(field) when a relative name under the workspace or runs/ leads, through a link, outside the
    workspace (round 11: runs/<run> linked to a folder elsewhere had sampling and the review written there)."""
    raw = Path(str(text)).expanduser()
    if not str(text).strip() or raw.is_absolute():
        return
    root = workspace_root()
    for path in (root / raw, root / "runs" / raw):
        why = linked_out(path, root) if path.exists() else None
        if why:
            raise UserInputError(field, f"{why}. Give the run's own path, or move it into runs/")


def linked_out(path: Path, root: Path | None = None) -> str | None:
    """Why `path` is not read: it leads, through a link, outside the workspace (`root`), or is a link loop; None
    when it resolves inside. The check refuse_linked_out makes, and list_runs for each entry of runs/."""
    root = root or workspace_root()
    real, outside = leads_outside(path, root)
    if not outside:
        return None
    where = f"(to {real})" if real is not None else "(a loop of links)"
    return f"{path} leads outside the workspace {root} {where} through a link: nothing is read or written through it"


def refuse_run_outside(run, what: str):
    """`run` (a runs.Run), or UserInputError('run') when its directory (links followed) is not inside the workspace:
    `what` (export_model, promote_checkpoint) writes into the run, and nothing outside the workspace is written
    (round 19: an absolute path to another workspace's run had export/ written there)."""
    root = workspace_root()
    real, outside = leads_outside(Path(run.dir), root)
    if outside:
        raise UserInputError("run", f"{run.dir} is outside the workspace {root}: {what} writes into the run, and "
                             "nothing outside the workspace is written. Set LLM_FINETUNING_WORKSPACE to the "
                             "workspace that holds the run (or run the command there)")
    return run


def refuse_run_dir_outside(path: Path, field: str = "run_dir") -> None:
    """UserInputError(field) unless `path` (resolved: links followed) is a folder strictly inside the workspace
    that is not one of its own folders (WORKSPACE_FOLDERS: runs/, eval/, ...). Round 12 (D3): `emit-config
    --run-dir /tmp/x` wrote a run (train/, data/) outside the workspace, and `--run-dir .` made the workspace's root
    a run."""
    root = workspace_root()
    real, outside = leads_outside(Path(path), root)
    if not outside and real != root and real not in {root / name for name in WORKSPACE_FOLDERS}:
        return
    what = ("the workspace itself" if real == root else f"the workspace's own {real.name}/ folder" if not outside
            else f"outside the workspace {root}")
    raise UserInputError(field, f"{path} is {what}: a run directory is a folder inside the workspace, such as "
                         f"{root / 'runs'}/<run> (emit without run_dir makes one there); give a run's folder there")


def dated_run(text: str | Path) -> Path | None:
    """The one run under runs/ that `text` names without its date: emit_grpo_config names a run
    `<YYYY-MM-DD>-<run_name>[-n]` (issue 49's sixth walk: `--run-name upper-small` made 2026-12-06-upper-small, then
    `sample-completions upper-small` found no run). None when none; UserInputError('run') when several."""
    from mcp_server.errors import UserInputError, short

    name, root = str(text).strip(), runs_root()
    if not name or "/" in name or os.sep in name or not root.is_dir():
        return None
    pattern = re.compile(rf"\d{{4}}-\d{{2}}-\d{{2}}-{re.escape(slugify(name))}(-\d+)?")
    found = sorted(p.name for p in root.iterdir() if p.is_dir() and pattern.fullmatch(p.name))
    if len(found) > 1:
        raise UserInputError("run", f"'{short(name)}' names {len(found)} runs ({', '.join(found)}): give one's full "
                             "name")
    return (root / found[0]).resolve() if found else None


def slugify(text: str) -> str:
    """A readable directory name: letters and digits of any script kept (NFKC, lower case), the rest as '-'.
    Only a name with no letter or digit at all (emoji, punctuation) becomes 'run'."""
    text = unicodedata.normalize("NFKC", text).lower()
    slug = re.sub(r"[\W_]+", "-", text).strip("-")
    return slug[:48].strip("-") or "run"


# Cyrillic and Greek letters drawn like Latin ones (after NFKC and lower case): a run named with one of them looks
# exactly like a run named in Latin letters.
LOOKALIKES = str.maketrans("аеіјкорсухѕһԁԛԝӏүαορικνυχγ", "aeijkopcyxshdqwlyaopikvuxy")


def skeleton(name: str) -> str:
    """What a name looks like: NFKC, lower case, look-alike Cyrillic/Greek letters read as the Latin ones."""
    return unicodedata.normalize("NFKC", name).lower().translate(LOOKALIKES)


def unique_run_name(slug: str, date: _dt.date | None = None) -> str:
    """`<YYYY-MM-DD>-<slug>`, or `-2`, `-3`, ... when a run of that name, or of a name that looks the same (a
    Cyrillic `е` for a Latin `e`), exists: a new run never lands on an earlier one, nor looks like one."""
    base = f"{(date or _dt.date.today()).isoformat()}-{slugify(slug)}"
    root = runs_root()
    taken = {skeleton(p.name) for p in root.iterdir()} if root.is_dir() else set()
    name, n = base, 1
    while (root / name).exists() or skeleton(name) in taken:
        n += 1
        name = f"{base}-{n}"
    return name


def new_run_dir(slug: str, date: _dt.date | None = None) -> Path:
    """A new, empty `runs/<YYYY-MM-DD>-<slug>[-n]/` (unique_run_name), created here."""
    while True:
        path = runs_root() / unique_run_name(slug, date)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir()
            return path
        except FileExistsError:  # another process took the name between the check and the mkdir
            continue


def atomic_write_text(path: Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """Write to a temporary file beside `path`, then rename: readers never see half a file. The temporary file is
    a fresh name (mkstemp: O_CREAT|O_EXCL|O_NOFOLLOW), never a file or link already there."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def written_digest(path: Path, data: bytes | str) -> str:
    """`data` written to `path` (atomic_write_bytes) and the sha256 of those bytes as produced in memory: what a
    tool signs or pins of a file it writes, never the file read back (round 18: samples.jsonl, kept.jsonl replaced
    between the write and a hash of the file had the signed record vouch for the replacement). A file that no
    longer holds them is refused where it is next used, naming it."""
    data = data.encode("utf-8") if isinstance(data, str) else data
    atomic_write_bytes(path, data)
    return hashlib.sha256(data).hexdigest()


def refuse_foreign(field: str, files: dict, tool: str) -> None:
    """The one rule for a file a tool writes into a run folder (round 15, D1/D2; emission's own is issue 48's, the
    plot's round 14's): a file already at a path is replaced only when a tool wrote it, as `files`' check of that
    path says (path -> ours(path): the file's own mark, or the record the tool kept of it). A person's own file of
    that name, or anything there that is no regular file, is refused before anything is written: UserInputError
    (`field`) naming each file and what to do."""
    theirs = []
    for path, ours in files.items():
        what = not_regular(path)
        if what or (path.exists() and not ours(path)):
            theirs.append(f"{path} ({what or 'not a file ' + tool + ' wrote: your own?'})")
    if theirs:
        raise UserInputError(field, f"{tool} would overwrite {'; '.join(theirs)}: nothing was written. Move "
                             f"{'it' if len(theirs) == 1 else 'them'} aside (or rename), then run {tool} again")


def json_with(*keys: str):
    """A check for refuse_foreign: the file is a JSON object holding `keys` (the shape the tool writes)."""
    def ours(path: Path) -> bool:
        try:
            with open(path, "rb") as handle:
                value = json.loads(handle.read(64 << 20))
        except (OSError, ValueError):
            return False
        return isinstance(value, dict) and all(key in value for key in keys)
    return ours


def text_with(mark: str):
    """A check for refuse_foreign: the file's first 64 KiB hold `mark` (the header the tool writes)."""
    def ours(path: Path) -> bool:
        try:
            with open(path, "rb") as handle:
                return mark.encode() in handle.read(64 << 10)
        except OSError:
            return False
    return ours


def open_append_nofollow(path: Path):
    """`path` opened for appending (binary), created if missing, never through a link: a symbolic link planted
    where a log goes (train/logs/stdout.log -> a file elsewhere) is an OSError (ELOOP); a hard link (a second name
    of a file elsewhere: `ln ~/.bashrc train/logs/stdout.log`, issue 48 round 9), a pipe or a device is a
    NotRegularFile naming the file and what it is, judged on the descriptor opened (never a write elsewhere)."""
    fd = open_own_file(path, os.O_WRONLY | os.O_APPEND)
    return os.fdopen(fd, "ab")


def open_own_file(path: Path, flags: int, create: bool = True) -> int:
    """A descriptor on `path` (opened with `flags`, created if missing when `create`) only when it is the run's own
    file: never through a symbolic link (O_NOFOLLOW: NotRegularFile naming it), and a hard link (a second name of a
    file elsewhere), a pipe, a device or a folder is a NotRegularFile naming the file and what it is, judged on the
    descriptor before a byte is written. Every writer that writes in place (a log appended to, the run's launch
    lock: round 17, b02, `ln -s ~/notes <run>/.launch.lock` had launch_training truncate the notes) opens so."""
    try:
        fd = os.open(path, flags | (os.O_CREAT if create else 0) | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                     0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR) or (exc.errno == errno.ENXIO and os.path.islink(path)):
            what = "a symbolic link" if os.path.islink(path) else "a folder"
            raise NotRegularFile(exc.errno, f"{path} is {what}: not opened, never written through") from None
        raise
    try:
        found = os.fstat(fd)
        what = (None if _stat.S_ISREG(found.st_mode) else not_regular(path) or "not a regular file") or (
            f"a file with {found.st_nlink} names (a hard link: a write would reach the other names)"
            if found.st_nlink > 1 else None)
        if what:
            raise NotRegularFile(errno.EMLINK, f"{path} is {what}: not written")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def atomic_save_figure(fig, path: Path, **savefig_kwargs) -> Path:
    """A matplotlib figure as a PNG, written atomically like every other file."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", **savefig_kwargs)
    return atomic_write_bytes(path, buffer.getvalue())


def json_text(data) -> str:
    """A JSON record's text as atomic_write_json writes it."""
    return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"


def atomic_write_json(path: Path, data) -> Path:
    return atomic_write_text(path, json_text(data))


# Above this, a file is pinned by its stat instead of content: hashing model weights at every gate check would
# cost seconds per GB. Size and mtime alone were not enough (round 7: weights rewritten in place, mtime put back
# with `touch -r`, passed the gate): the pin holds the inode and ctime too, which no user can set back.
WHOLE_FILE_BYTES = 64 << 20


def large_file_pin(stat: os.stat_result) -> str:
    """A file over WHOLE_FILE_BYTES as a pin: size, mtime, inode and ctime. Any rewrite (in place, or another file
    renamed over it) changes the ctime or the inode, even with the mtime restored; a copy or a move elsewhere is
    another inode, so it reads as changed too (inspect again)."""
    return f"{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ino}:{stat.st_ctime_ns}"


def files_digest(root: Path, files: list[Path], whole_up_to: int | None = WHOLE_FILE_BYTES) -> str:
    """One sha256 over `files` (under `root`): each one's path relative to `root` and its content's sha256, or its
    stat (large_file_pin) when it is over `whole_up_to` bytes (None: every file by content)."""
    digest = hashlib.sha256()
    for path in files:
        stat = path.stat()
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        if whole_up_to is None or stat.st_size <= whole_up_to:
            digest.update(sha256_file(path).encode())
        else:
            digest.update(large_file_pin(stat).encode())
    return digest.hexdigest()


# Not the model a folder holds: training state (optimizer, scheduler, RNG, trainer bookkeeping, DeepSpeed
# shards) and the intermediate checkpoint-N/ folders an output_dir keeps beside its final model.
NOT_THE_MODEL = ("optimizer.pt", "scheduler.pt", "trainer_state.json", "training_args.bin", "rng_state",
                 "global_step", "zero_to_fp32.py", "latest", "checkpoint-", ".")


def sha256_tree(folder: Path) -> str:
    """sha256 of a saved model's content: every file's relative path and sha256, in order, except the
    training state and intermediate checkpoints (NOT_THE_MODEL). Equal for a copy or a moved folder; any changed
    weight, config or
    tokenizer file changes it."""
    return tree_digest(tree_files(folder))


def tree_files(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of the files sha256_tree hashes, in its order."""
    folder = Path(folder)
    return {path.relative_to(folder).as_posix(): sha256_file(path)
            for path in sorted(p for p in folder.rglob("*") if p.is_file())
            if not path.relative_to(folder).parts[0].startswith(NOT_THE_MODEL)}


def tree_digest(files: dict[str, str]) -> str:
    """sha256_tree's digest of `files` (tree_files)."""
    digest = hashlib.sha256()
    for rel, sha in files.items():
        digest.update(f"{rel}\0{sha}\n".encode())
    return digest.hexdigest()


def archive_problem(run_dir: Path) -> str | None:
    """Why <run_dir>/archive/ cannot take what an archive flag moves aside (round 7: a link to /elsewhere moved the
    run's record, logs and checkpoints out of the workspace): a symbolic link, or a folder resolving outside the
    run. None when it can (absent, or a real folder inside the run)."""
    path = Path(run_dir) / "archive"
    try:
        outside = not path.resolve().is_relative_to(Path(run_dir).resolve())
    except (OSError, RuntimeError):  # a link loop
        outside = True
    if not path.is_symlink() and not outside:
        return None
    where = os.readlink(path) if path.is_symlink() else str(path.resolve())
    return (f"{path} is a symbolic link (to {where}) or leads outside the run: nothing is archived through it "
            "(the run's record, logs and checkpoints would leave the run); replace it with a directory, or remove it")

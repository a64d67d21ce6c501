"""What trains is what was reviewed: the training process's own check, at the point of use, of its inputs.

`check_reviewed_inputs` runs after the trainer's loader has read the rows and TRL has parsed the config: the
rows' content, the prompt column, the resolved settings (generation_kwargs, reward_weights) and the model as
resolved in the run directory must be the verdict's "trained" pin (what sampling read through the same loader,
inspection.training_inputs), every reviewed sample's prompt and columns must be a row of that data, and an
agentic run's environment and tool code and a run's train/dynamic_sampling.json must be what the verdict pinned.
Anything else exits (status 3) before the model loads, saying what differs: a file swapped after launch_training
and put back later, a poisoned cache, another prompt column or generation setting cannot train unseen.

launch_training passes the reward-code hash the verdict pinned (LLM_FINETUNING_REWARD_CODE_SHA256) to the
training process and records it in run.json. train/train.py builds its rewards with `reviewed_reward_funcs`,
which hashes the reward code as the process imports it, before and after building the functions, and exits
before training when either hash differs from the reviewed one: a helper edited after launch_training (and put
back later) cannot train unseen. Run by hand, without the launcher, the hash comes from the verdict; with no
verdict at all the script says its rewards were not reviewed and trains (the launcher never starts such a run).

What passes the check is what trains (issue 48): the rows are in memory (config.loader), the model loads from the
folder whose files were hashed (a hub model's cached snapshot), its tensors in memory are compared with them once
loaded (`confirm_loaded_model`), a resume_from_checkpoint outside the run's output_dir is refused (and the checkpoint
is hashed against the saves ledger right before it loads: script_support.confirm_resume_checkpoint), a pinned
field set on the command line after --config is refused (`_command_line_overrides`), and under
launch_training the verdict must be the bytes its gate judged (VERDICT_SHA_ENV) and train/train.py the bytes the
verdict pinned (training.trainer.verified_script).

A dotted reward is imported from the directory a command runs in (the trainer: the run directory), so recording
a verdict copies the local modules its rewards run (`keep_reviewed_code`) into inspection/reward_code/,
`reviewed_reward_funcs` imports from there first, and the gate stays closed while that copy is not the code under
review (`unkept_reward_code`): the trainer imports exactly the reviewed bytes.

The files a reward opens by a path in its code are checked against the verdict's pins before the first step, at
every open during a reward call and at the end of every call (rewards.reads); not covered: a module a reward imports
lazily, at call time. What no pin names (an environment variable, a file's mtime, a process's output, the clock) is
checked by its effect: `reviewed_reward_funcs` replays the review with the functions it returns (inspection.replay:
the reviewed samples scored again in this process, then again at every logging step and after the last; a score
other than review.jsonl's exits, status 3, naming the reward).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from mcp_server.inspection import replay, trainer_read
from mcp_server.inspection.reward_copy import copy_changes  # by file (issue 48, round 15)
from mcp_server.inspection.row_probes import DROPPED, data_updates, row_after_refilters
from mcp_server.inspection.private_copy import PlantedFile, write_private
from mcp_server.rewards import build_reward_funcs, reads, reward_code_sha256
from mcp_server.rewards.registry import reward_code_files
from mcp_server.rewards.source_only import install_source_only
from mcp_server.errors import UserInputError
from mcp_server.runs import DYNAMIC_SAMPLING_FILE, Run, output_outside
from mcp_server.userfiles import package_switches
from mcp_server.workspace import WHOLE_FILE_BYTES, large_file_pin

REWARD_SHA_ENV = "LLM_FINETUNING_REWARD_CODE_SHA256"
# The sha256 of inspection/verdict.json as launch_training's gate judged it: the trainer refuses other bytes.
VERDICT_SHA_ENV = "LLM_FINETUNING_VERDICT_SHA256"
# True, in this process only, while sample_trajectories builds an agentic run's trainer to sample with it:
# sampling is not training, so the checks report and never refuse (the samples it draws get their own verdict).
# Never an environment variable: a launching shell, a config's env: block or a site hook could set one (issue 48).
_SAMPLING = [False]


@contextlib.contextmanager
def sampling():
    """The checks below report and never refuse inside this block (sample_trajectories' trainer, this process)."""
    before = _SAMPLING[0]
    _SAMPLING[0] = True
    try:
        yield
    finally:
        _SAMPLING[0] = before


def sampling_now() -> bool:
    return _SAMPLING[0]


class InputsChanged(SystemExit):
    """What this process would train on is not what the verdict reviewed."""


class RewardCodeChanged(SystemExit):
    """The reward code this process would train with is not the code the verdict reviewed."""


def reviewed_reward_sha256(run: Run, verdict: dict | None = None) -> str | None:
    """The hash the launcher passed, else the one the run's verdict (`verdict`: as read) pinned (None: neither)."""
    passed = os.environ.get(REWARD_SHA_ENV, "").strip()
    if passed or verdict is None:
        return passed or verdict_reward_sha256(run)
    value = verdict["pins"].get("reward_code")
    return value if isinstance(value, str) else None


def _verdict_bytes(run: Run) -> bytes | None:
    """inspection/verdict.json's bytes, None when there is none."""
    try:
        return run.verdict.read_bytes()
    except OSError:
        return None


def _verdict(run: Run, bound: bool = False, data: bytes | None | bool = False) -> dict | None:
    """inspection/verdict.json, read once (bytes hashed and parsed from one read; `data`: those bytes as the
    caller read them, None for no verdict). `bound` (the trainer's check): started by launch_training, those bytes
    must be the ones its gate judged (VERDICT_SHA_ENV); a verdict swapped after the gate, with pins forged to match
    other inputs, is refused (InputsChanged), never believed."""
    if data is False:
        data = _verdict_bytes(run)
    passed = os.environ.get(VERDICT_SHA_ENV, "").strip() if bound else ""
    if passed and (data is None or hashlib.sha256(data).hexdigest() != passed):
        print("llm-finetuning: refusing to train: inspection/verdict.json is not the verdict launch_training's gate "
              "judged (replaced, edited or removed since). Record the verdict again, then launch again.",
              file=sys.stderr, flush=True)
        raise InputsChanged(3)
    try:
        verdict = json.loads(data) if data is not None else None
    except ValueError:
        return None
    return verdict if isinstance(verdict, dict) and isinstance(verdict.get("pins"), dict) else None


def verdict_reward_sha256(run: Run) -> str | None:
    """The reward-code hash the run's verdict pinned (None: no readable verdict)."""
    value = (_verdict(run) or {"pins": {}})["pins"].get("reward_code")
    return value if isinstance(value, str) else None


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)


def _samples_not_in(dataset, verdict: dict, agentic: bool, data: bytes | None) -> list[str]:
    """The reviewed samples whose prompt or columns are not their row of the data that trains (a sample written
    by hand, or drawn from other data), or that are not the samples the verdict signed (`data`: samples.jsonl's
    bytes, read once: the bytes hashed are the lines compared; None: removed, not a regular file, unreadable)."""
    try:
        text = data.decode("utf-8") if data is not None else ""
    except UnicodeDecodeError:
        data, text = None, ""
    if data is None or hashlib.sha256(data).hexdigest() != verdict.get("samples_sha256"):
        return ["inspection/samples.jsonl is not the samples the verdict signed"]
    bad = []
    for line in text.splitlines():
        sample = json.loads(line) if line.strip() else None
        if sample is None:
            continue
        index = row_after_refilters(sample.get("row_index"), verdict)
        if index is DROPPED:  # a re-filter the verdict records dropped its row: it no longer trains
            continue
        row = dataset[index] if isinstance(index, int) and 0 <= index < len(dataset) else None
        columns = {k: v for k, v in (row or {}).items() if k != "prompt"}
        # An agentic sample's prompt is the one TRL's tool loop rendered (tools added): its columns say the row.
        prompt_differs = row is not None and not agentic and \
            _canonical(row["prompt"]) != _canonical(sample.get("prompt"))
        if row is None or prompt_differs or _canonical(columns) != _canonical(sample.get("columns")):
            bad.append(str(sample.get("id")))
    return [f"samples {', '.join(bad[:8])}{' ...' if len(bad) > 8 else ''} are not rows of the data that trains "
            "(prompt or columns differ)"] if bad else []


def check_reviewed_inputs(run_dir: str | Path, dataset, column: str, script_args, training_args,
                          model_args) -> dict:
    """The trainer's point-of-use check (see the module's doc); returns what it fingerprinted. Raises
    InputsChanged (exit status 3, one line saying what differs) when it is not what the verdict reviewed. It
    judges the run as train.py's parse_config read it (inspection.trainer_read: the bytes TRL parsed), else reads
    the run once itself."""
    run = Run(Path(run_dir))
    built = trainer_read.spec_for(run.dir, training_args)
    spec = built or trainer_read.read_run(run)
    try:
        return _check(run, spec, built is not None, dataset, column, script_args, training_args, model_args)
    except BaseException:
        trainer_read.drop(run)
        raise


def _check(run: Run, spec, built: bool, dataset, column: str, script_args, training_args, model_args) -> dict:
    from mcp_server.agentic.sources import agentic_pin
    from mcp_server.inspection.training_inputs import fingerprint

    config = spec.values
    switches = package_switches(config)
    if switches:  # TrlParser exported them before this check: they would switch it off (issue 48)
        print(f"llm-finetuning: refusing to train: train/config.yaml's env: block sets {', '.join(switches)}, "
              "which switches this check; remove it", file=sys.stderr, flush=True)
        raise InputsChanged(3)
    outside = [] if sampling_now() else _foreign_output(run, training_args)
    if outside:
        print(f"llm-finetuning: refusing to train: {outside[0]}", file=sys.stderr, flush=True)
        raise InputsChanged(3)
    now = fingerprint(run, dataset, config, column, script_args, training_args, model_args)
    data, samples = _verdict_bytes(run), replay.read_bytes(run.samples)
    if built:  # the reward-code check (and its replay) that follows in this build reads none of it again
        trainer_read.hand_on(run, trainer_read.Checked(spec, data, samples, dataset))
    verdict = _verdict(run, bound=True, data=data)
    if sampling_now():
        return now
    if verdict is None:
        print("llm-finetuning: no inspection verdict pins what this run trains on (not started by "
              "launch_training): its data and settings were not reviewed", file=sys.stderr, flush=True)
        return now
    expected = _patched(verdict["pins"].get("trained"), verdict)
    if not isinstance(expected, dict):
        differs = ["the verdict pins nothing of what trains (its samples were not drawn through the trainer's "
                   "loader): sample_completions on the run, inspect_rewards and a new verdict"]
    else:
        differs = [f"{key}: {_brief(now.get(key))} (reviewed: {_brief(expected.get(key))})"
                   for key in dict.fromkeys([*expected, *now]) if _canonical(now.get(key)) !=
                   _canonical(expected.get(key))]
        differs += _samples_not_in(dataset, verdict, spec.agentic is not None, samples)
    differs += _foreign_resume(run, training_args)
    differs += _command_line_overrides(spec, script_args, training_args, model_args)
    if spec.agentic is not None and _canonical(agentic_pin(run, spec.agentic, config)) != \
            _canonical(verdict["pins"].get("agentic")):
        differs.append("the environment or tools (train/agentic.json or their source) changed")
    pinned_files = verdict["pins"].get("train_files")
    if isinstance(pinned_files, dict) and _sampling_file_pin(run, spec) != pinned_files.get(DYNAMIC_SAMPLING_FILE):
        differs.append(f"train/{DYNAMIC_SAMPLING_FILE} (dynamic sampling) changed")
    if differs:
        print("llm-finetuning: refusing to train: what this process would train on is not what the inspection "
              "verdict reviewed: " + "; ".join(differs) + ". Put it back, or sample and inspect again and record a "
              "new verdict, then launch again.", file=sys.stderr, flush=True)
        raise InputsChanged(3)
    _run_from_verified(run, model_args, training_args, now)
    return now


# Pinned fields a launcher passes on the command line itself: the checkpoint to continue (launch.resume_training,
# the Slurm requeue), which _foreign_resume and confirm_resume_checkpoint check against the run's saves.
LAUNCHER_ARGS = frozenset({"resume_from_checkpoint"})


def _command_line_overrides(spec, *parsed) -> list[str]:
    """Pinned fields whose value TRL resolved differs from what train/config.yaml alone resolves to: set on the
    trainer's command line (`train.py --config train/config.yaml --epsilon_high 5.0`) or in train/train.args (read
    by HfArgumentParser), which the settings fingerprint (only the fields the config sets) would not see (issue 48).
    Field by field over TRL's parsed dataclasses, every pinned field but the precision switches and LAUNCHER_ARGS;
    arguments not parsed by TRL (a test's namespace) are not compared."""
    import dataclasses

    from mcp_server.config.fields import pinned
    from mcp_server.config.loader import parse_config as parse_values
    from mcp_server.inspection.training_inputs import MACHINE_KEYS

    if not any(dataclasses.is_dataclass(p) for p in parsed):
        return []
    try:
        alone = parse_values([], values=spec.values, args_file=False)  # no train/train.args either (round 8)
    except (ValueError, TypeError, SystemExit) as exc:
        return [f"train/config.yaml does not parse without the command line's arguments ({exc}): pass only "
                "--config train/config.yaml (and --resume_from_checkpoint), set the rest in the config"]
    named = []
    for got, base in zip(parsed, alone[:3]):
        if not dataclasses.is_dataclass(got):
            continue
        for field in dataclasses.fields(base):
            key = field.name
            if key in MACHINE_KEYS or key in LAUNCHER_ARGS or key in named or not pinned(key) or \
                    not hasattr(got, key):
                continue
            if _canonical(getattr(got, key)) != _canonical(getattr(base, key)):
                named.append(key)
    if not named:
        return []
    return [f"the command line sets {', '.join(named)} (arguments after --config, or train/train.args, which "
            "transformers' parser reads too; pinned: config.yaml and the verdict decide them); remove them, or set "
            "them in train/config.yaml, sample and inspect again"]


def _foreign_output(run: Run, training_args) -> list[str]:
    why = output_outside(run.dir, getattr(training_args, "output_dir", None))
    return [why + "; set output_dir: checkpoints (relative to the run directory)"] if why else []


def _foreign_resume(run: Run, training_args) -> list[str]:
    """Only a checkpoint this run wrote (under its output_dir) continues what the verdict reviewed (issue 48)."""
    resume = getattr(training_args, "resume_from_checkpoint", None)
    if resume in (None, "", False):
        return []
    output = (run.dir / str(training_args.output_dir)).resolve()
    where = (run.dir / str(resume)).resolve()
    if str(resume).lower() != "true" and (where == output or not where.is_relative_to(output)):
        return [f"resume_from_checkpoint: {_brief(str(resume))} is not a checkpoint of this run's output_dir "
                f"({_brief(str(training_args.output_dir))}): its weights were not reviewed"]
    return []


# The model pin the check verified, and the folder the trainer loads (set by _run_from_verified).
VERIFIED: dict = {}


def _run_from_verified(run: Run, model_args, training_args, pin: dict) -> None:
    """Load what was verified: a hub model from the cached snapshot whose files the check hashed, never by name
    (the hub's main or another cache may hold other weights by the time it loads)."""
    from mcp_server.inspection.training_inputs import loadable_model, loaded_revision

    revision = loaded_revision(model_args, training_args)
    loads = loadable_model(model_args.model_name_or_path, revision, run)
    VERIFIED.update(run=str(run.dir), model=pin.get("model"), loads=loads, name=model_args.model_name_or_path,
                    revision=revision)
    model_args.model_name_or_path = loads


def confirm_loaded_model(trainer) -> None:
    """After GRPOTrainer loaded the model, before the first step: the tensors in memory (policy, separate reference
    model) are the verified files' bytes, read from one open fd per file (loaded_weights: a weight file swapped in
    between the check and the load, and put back, is refused). A no-op when the check did not run."""
    if not VERIFIED or sampling_now():
        return
    from mcp_server.inspection.loaded_weights import loaded_weight_problems

    pin = VERIFIED["model"] or {}
    models = [m for m in (getattr(trainer, "model", None), getattr(trainer, "ref_model", None)) if m is not None]
    problems = loaded_weight_problems(models, VERIFIED["loads"], pin.get("files_sha256"), pin.get("loads"))
    if problems:
        print(f"llm-finetuning: refusing to train: {'; '.join(problems)}. Put the model's files back, then launch "
              "again.", file=sys.stderr, flush=True)
        raise InputsChanged(3)


def _sampling_file_pin(run: Run, spec) -> str | None:
    """train/dynamic_sampling.json as the verdict's train_files pin holds it (pins.train_files_pin: its sha256, a
    large file's stat: workspace.large_file_pin), from the spec's read (None: the run has none)."""
    sha = spec.sidecar_sha256.get(DYNAMIC_SAMPLING_FILE)
    if sha is None:
        return None
    found = run.dynamic_sampling.stat()
    return sha if found.st_size <= WHOLE_FILE_BYTES else large_file_pin(found)


def _patched(trained, verdict: dict):
    """The verdict's "trained" pin with the settings a resume after a guard stop patched (its pin_updates) and the
    rows of the last re-filter resume_training recorded (its data_updates: inspection.refilter)."""
    if not isinstance(trained, dict) or not isinstance(trained.get("settings"), dict):
        return trained
    settings = dict(trained["settings"])
    for update in verdict.get("pin_updates") or []:
        patch = update.get("patch") if isinstance(update, dict) else None
        if isinstance(patch, dict):
            settings.update({k: json.loads(_canonical(v)) for k, v in patch.items() if k in settings})
    rows = {}
    for update in data_updates(verdict):
        rows = {"rows": update.get("rows"), "rows_sha256": update.get("rows_sha256")}
    return {**trained, "settings": settings, **rows}


def _brief(value) -> str:
    text = _canonical(value)
    return text if len(text) <= 160 else text[:157] + "..."


def _refuse_unreviewed_entries(run: Run, verdict: dict | None) -> None:
    """RewardCodeChanged when inspection/reward_code/ holds an entry that is not a file the verdict's copy listed
    (REWARD_FILES; a verdict recorded before that list: a folder beside a module of the same name)."""
    listed = (verdict or {}).get(REWARD_FILES)
    if isinstance(listed, list):
        extra = unreviewed_entries(run, [str(r) for r in listed])
    else:
        extra = [f"{p.relative_to(run.reward_code).as_posix()}/" for p in run.reward_code.rglob("*")
                 if p.is_dir() and p.name != CACHE_DIR and p.with_suffix(".py").is_file()]
    if extra:
        print(f"llm-finetuning: refusing to train: {run.reward_code.relative_to(run.dir)} holds "
              f"{', '.join(extra[:8])}, which is not reward code the inspection verdict reviewed (it could be "
              "imported instead of, or by, the reviewed code). Remove it, or record the verdict again, then launch "
              "again.", file=sys.stderr, flush=True)
        raise RewardCodeChanged(3)


def reviewed_reward_funcs(run_dir: str | Path) -> tuple[list, str]:
    """The run's reward functions (train/rewards.json) and their code's hash; raises RewardCodeChanged (exit
    status 3, one line saying what to do) when that code is not the reviewed code. The rewards and the verdict are
    the ones this build's point-of-use check read (inspection.trainer_read), else read here once."""
    run = Run(Path(run_dir))
    checked = trainer_read.take(run)
    samples, dataset = (checked.samples, checked.dataset) if checked is not None else (None, None)
    if checked is not None and checked.spec.rewards is not None:
        rewards, data = checked.spec.rewards, checked.verdict
    else:
        rewards, data = json.loads(run.rewards.read_text()), _verdict_bytes(run)
    verdict = _verdict(run, bound=True, data=data)
    if run.reward_code.is_dir() and not sampling_now():  # the reviewed copy first (module doc)
        _refuse_unreviewed_entries(run, verdict)  # before anything is imported from there
        _source_imports()
        sys.path.insert(0, str(run.reward_code))
    expected = reviewed_reward_sha256(run, verdict or {"pins": {}})
    watch = None if expected is None or sampling_now() else reads.checking(  # the files it reads (rewards.reads)
        (verdict or {}).get("pins", {}).get("reward_reads"), RewardCodeChanged)
    with reads.recording(watch) if watch else contextlib.nullcontext():
        before = reward_code_sha256(rewards)  # imports the reward modules, then reads their source
        funcs = build_reward_funcs(rewards)
        after = reward_code_sha256(rewards)
    if expected is None or sampling_now():
        print(f"llm-finetuning: the reward code ({after[:12]}) has no reviewed hash to check against (no verdict, "
              "not started by launch_training): its scores were not reviewed", file=sys.stderr, flush=True)
        return funcs, after
    if not before == after == expected:
        seen = (f"({after[:16]})" if before == after else f"(sha256 {before[:16]} as imported, {after[:16]} once its "
                "functions were built: it changed while it loaded)")
        print(f"llm-finetuning: refusing to train: the reward code {seen} is not the code the inspection verdict "
              f"reviewed ({expected[:16]}); a reward, its parameters or a module it imports changed since;"
              f"{''.join(f' {line};' for line in copy_changes(run, verdict))} Put it back, or sample and inspect "
              "again and record a new verdict, then launch again.", file=sys.stderr, flush=True)
        raise RewardCodeChanged(3)
    funcs = reads.watch_all(funcs, watch)
    replay.replay_review(run, rewards, funcs, verdict, samples, dataset)  # the review's scores, here and now
    return funcs, after


def keep_reviewed_code(run: Run, rewards: list, shas: dict | None = None) -> list[str]:
    """inspection/reward_code/: a copy of the local modules `rewards` run, made when a verdict is recorded (the
    module's doc); replaced whole, never half-written; removed when the rewards run no local module. Returns the
    copy's files (relative paths): the verdict records them (REWARD_FILES), the trainer refuses any other entry.
    `shas` is filled with each file's sha256 as copied (reward_copy.REWARD_SHAS), never the copy read back."""
    files = reward_code_files(rewards)
    (shas if shas is not None else {}).update({r: hashlib.sha256(data).hexdigest() for r, data in files.items()})
    target = run.inside(run.reward_code)
    staging = Path(tempfile.mkdtemp(prefix=".reward_code-", dir=target.parent))
    try:
        for relative, data in files.items():  # created there: a link planted in it is never written through
            try:
                write_private(staging, relative, data)
            except PlantedFile as exc:
                raise UserInputError("verdict", f"{exc}; nothing was recorded, record the verdict again") from exc
        old = target.with_name(staging.name + ".old")
        if target.exists():
            target.rename(old)
        if files:
            staging.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return sorted(files)


def unkept_reward_code(run: Run, rewards: list) -> list[str]:
    """The local reward modules (relative paths) that inspection/reward_code/ does not hold as they are now, then
    every entry of it that is none of them (unreviewed_entries): what the trainer would not import as reviewed.
    Empty: the copy is the code under review."""
    files = reward_code_files(rewards)
    listed = (_verdict(run) or {}).get(REWARD_FILES)  # the read-only server follows no import: the verdict's list
    return [relative for relative, data in files.items()
            if not (run.reward_code / relative).is_file() or (run.reward_code / relative).read_bytes() != data] + \
        unreviewed_entries(run, [*files, *(listed if isinstance(listed, list) else [])])


# The verdict's list of the reviewed copy's files (keep_reviewed_code): what the trainer checks reward_code/ against
# before it imports anything from there.
REWARD_FILES = "reward_code_files"
CACHE_DIR = "__pycache__"  # bytecode Python writes beside a source; the trainer never reads it (_source_imports)


def unreviewed_entries(run: Run, reviewed) -> list[str]:
    """Each entry of inspection/reward_code/ that is not one of the `reviewed` files (relative paths) nor a folder
    holding one, named with a trailing / for a folder: a package folder beside a reviewed module wins its import,
    another module could be imported by a reviewed one (issue 48). __pycache__ folders are never read."""
    root = run.reward_code
    if not root.is_dir():
        return []
    wanted = {Path(r).as_posix() for r in reviewed}
    folders = {parent.as_posix() for r in wanted for parent in Path(r).parents if parent != Path(".")}
    extra = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath).relative_to(root)
        for name in sorted(dirnames):
            relative = (here / name).as_posix()
            if name != CACHE_DIR and relative not in folders:
                extra.append(relative + "/")
        dirnames[:] = [n for n in dirnames if n != CACHE_DIR and (here / n).as_posix() in folders]
        extra += [(here / n).as_posix() for n in sorted(filenames) if (here / n).as_posix() not in wanted]
    return extra


def _source_imports() -> None:
    """From here on this process imports user modules from their source, never from bytecode: a .pyc put in
    reward_code/__pycache__ with the reviewed source's mtime and size in its header would run instead of the
    hashed source (issue 48). The one mechanism every import of user code goes through (rewards.source_only)."""
    install_source_only()

"""emit_grpo_config: request -> recipe + variant + target -> validated files in a run directory.

Writes train/config.yaml (TrlParser YAML, accepted by `trl grpo --config`), train/rewards.json, train/train.py,
train/request.json and train/request.schema.json (runs.Run names them). Every file is written atomically.
train/train.py is the run's trainer template (emission.agentic.TRAINER_TEMPLATES: training/trainer/train_template.py, or
training/trainer/train_agentic_template.py for a run with an environment or tools, which also gets train/agentic.json)
with the run's name and prompt column filled in: the template lives with the training code it imports;
emission only copies its text.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import os
import re
import shutil
import tempfile
import textwrap
from pathlib import Path

import yaml

from mcp_server.config import FIELD
from mcp_server.dataset import check_prompt_column, read_file, reset_rows
from mcp_server.emission.agentic import (TRAINER_TEMPLATES, agentic_record, refuse_unparsed_template, trainer_name,
                                         turn_cost)
from mcp_server.emission.fit import cpu_time, launch_text, model_size_b
from mcp_server.emission.naming import default_run_name
from mcp_server.emission.per_step import step_batch
from mcp_server.emission.steps import Given, build
from mcp_server.errors import UserInputError, closest_names, did_you_mean
from mcp_server.evidence import record_emission
from mcp_server.gpus import resolve_target
from mcp_server.memory.verdict import validate
from mcp_server.model_ref import TINY, hub_problem, is_moe, resolve_model
from mcp_server.recipe.models import EmitResult, GRPORecipeRequest
from mcp_server.recipe.recorded import RecordedRequest, record as record_request
from mcp_server.recipe.runspec import RunSpec
from mcp_server.config.fields import SECTIONS, group_of
from mcp_server.config.target import Target
from mcp_server.recipe.thinking import is_hybrid_thinking
from mcp_server.recipe.trl_fields import installed_aliases, trl_defaults
from mcp_server.recipe import dynamic_sampling
from mcp_server.recipe.variants import choose_variant
from mcp_server.rewards.dotted import required_columns
from mcp_server.rewards.registry import REGISTRY, column_fix
from mcp_server.runs import Run
from mcp_server.userfiles import foreign_review_files, not_regular
from mcp_server.tiny import jsonl_text, split_task, write_jsonl
from mcp_server.workspace import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    find_existing,
    refuse_run_dir_outside,
    runs_root,
    unique_run_name,
    workspace_root,
)

DATA_FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


@dataclasses.dataclass(frozen=True)
class DataSet:
    fields: dict  # TrlParser keys: a local file a `datasets` mixture entry, a hub name `dataset_name`
    prompts: int | None = None  # the training prompts when known offline (the tiny task's or a local file's)


def _dataset_fields(request: GRPORecipeRequest, run: Run) -> DataSet:
    """The request's data set as the config names it, its columns checked."""
    if request.dataset == TINY:
        train_rows, _ = split_task()
        path = write_jsonl(train_rows, run.train_data)
        # Relative to the run (train.py runs there): a moved or copied run reads its own copy.
        relative = str(path.relative_to(run.dir))
        return DataSet({FIELD.datasets: [{"path": "json", "data_files": relative, "split": "train"}]}, len(train_rows))
    path = Path(request.dataset).expanduser()
    if path.exists():
        if path.is_file():
            fmt = DATA_FORMATS.get(path.suffix.lower())
            if fmt is None:
                raise UserInputError("dataset", f"{path}: unsupported file type; use {', '.join(DATA_FORMATS)}")
            rows = _check_columns(path, request)
            data_file = path.resolve()
            if data_file.is_relative_to(run.dir.resolve()):  # the run's own data: relative, moves with it
                data_file = data_file.relative_to(run.dir.resolve())
            return DataSet({FIELD.datasets: [{"path": fmt, "data_files": str(data_file), "split": "train"}]}, rows)
        if not path.is_dir():  # a device or a pipe: no data set, and reading it may never end
            raise UserInputError("dataset", f"{request.dataset} is not a regular file or a directory; give a "
                                 f"{', '.join(DATA_FORMATS)} file, a directory of them, a hub name or 'tiny'")
        return DataSet({FIELD.datasets: [{"path": str(path.resolve()), "split": request.dataset_split}]})
    if request.dataset.startswith((".", "/", "~")):
        raise UserInputError("dataset", f"no such file or directory: {request.dataset}")
    if path.suffix.lower() in DATA_FORMATS:  # names a data file that is not here: a typo, not a hub data set
        raise UserInputError("dataset", f"no such file: {request.dataset} (relative to {Path.cwd()}); a hub data "
                             "set is named owner/name, without a file suffix")
    fields = {FIELD.dataset_name: request.dataset, FIELD.dataset_train_split: request.dataset_split}
    if request.dataset_config:
        fields[FIELD.dataset_config] = request.dataset_config
    return DataSet(fields)


# Columns a registry reward reads -> the parameter renaming it (its factory's `Column` ones; TRL passes the others).
COLUMN_PARAMS = {column: param for reward in REGISTRY.values() for param, column in reward.column_params.items()}


def reward_columns(request: GRPORecipeRequest, dirs=()) -> dict[str, str]:
    """{data set column: the reward that reads it}: for a registry reward, only what it reads is required (a code
    reward reads `tests`, never `answer`); for a dotted-path reward, its parameters without a default that TRL does
    not supply (TRL fills them from the columns of their names; walk 12: emission said VALID, the rehearsal failed),
    its module found where an import looks, else in `dirs`."""
    needed = {}
    for spec in request.rewards:
        entry = REGISTRY.get(spec.name)
        if entry is None and "." in spec.name and not spec.params:  # params on one: refused by validation's rule
            needed.update((column, spec.name) for column in required_columns(spec.name, dirs) or [])
        for column in entry.info.columns if entry else []:
            if column not in COLUMN_PARAMS or (column == "schema" and "schema" in spec.params):
                continue  # TRL's own inputs (prompts, completion_ids), or a schema given as a parameter
            default = request.answer_column if column == "answer" else column
            name = spec.params.get(COLUMN_PARAMS[column], default)
            if name:
                needed[name] = spec.name
    return needed


def _check_columns(path: Path, request: GRPORecipeRequest) -> int:
    """Read the whole local file the way inspection does: every row parses, prompts are text or chat
    messages, and the prompt column and the columns the rewards read exist. Returns its rows."""
    rows = read_file(path)
    check_prompt_column(rows, request.prompt_column)
    for column, reward in reward_columns(request, [path.resolve().parent]).items():
        if column not in rows[0]:
            registry = reward in REGISTRY
            field = "answer_column" if registry and column == request.answer_column else "rewards"
            how = (" Name the column that holds the answers with `emit-config --answer-column NAME` "
                   "(emit_grpo_config's answer_column)" if field == "answer_column" else
                   "" if registry else f" To fix: {column_fix(reward, column)}.")
            raise UserInputError(field, f"column '{column}', which {reward} reads, is not in {path} "
                                 f"(columns: {', '.join(rows[0])}).{did_you_mean(closest_names(column, list(rows[0])))}"
                                 + how)
    return len(rows)


def resolve(request: GRPORecipeRequest, run: Run) -> Given:
    """What the request resolves to before any step runs (emission.steps.Given), each refusal in this order."""
    model = resolve_model(request.model)
    moe = is_moe(model)
    variant, reason = choose_variant(request.variant, request.symptom, moe, request.override_reason)
    gpu, _ = resolve_target(request.gpu)
    # a GPU target: never a layout the memory plan has not checked (an unknown architecture is refused)
    size_b = model_size_b(model, None if gpu is None else f"{request.num_gpus}x {request.gpu}")
    if size_b is None and not Path(model).is_dir():  # a CPU run loads it here: a name nothing knows is refused,
        problem = hub_problem(model)  # before TRL is imported (walk 10: a typo waited 18 s for TRL, then this)
        if problem:
            raise UserInputError("model", problem)
    record = agentic_record(request)
    refuse_unparsed_template(record, model)
    if request.thinking and not is_hybrid_thinking(model):
        raise UserInputError("thinking", f"'{request.model}' has no enable_thinking switch in its chat template; "
                             "leave thinking empty for it")
    data = _dataset_fields(request, run)  # its columns read and refused, too, before TRL is imported
    try:
        defaults, aliases = trl_defaults(), installed_aliases()
    except UserInputError:  # no training interpreter: write every value; validation says TRL's checks did not run
        defaults, aliases = {}, {}
    cost = turn_cost(record, model, reset_rows(data.fields, run.dir, request.prompt_column))
    # TRL last: every refusal above needs no TRL, so none waits on its import or follows the CLI's "loading TRL" line
    try:
        defaults, aliases = trl_defaults(), installed_aliases()
    except UserInputError:  # no training interpreter: write every value; validation says TRL's checks did not run
        defaults, aliases = {}, {}
    return Given(request=request, run=run, model=model, moe=moe, variant=variant, variant_reason=reason, gpu=gpu,
                 trl_defaults=defaults, size_b=size_b, agentic=record, turn_cost=cost, data=data.fields,
                 prompts=data.prompts, dynamic_sampling=dynamic_sampling.settings(request, variant, record is not None),
                 aliases=aliases)


def render_yaml(values: dict, header: str, why: dict | None = None) -> str:
    """YAML grouped by topic, with a header saying what it is and how to run it, and each value's reason as a
    comment above it."""
    why = why or {}
    sections = (*SECTIONS, ("grpo", "GRPO / training"))  # config.fields: each field's group
    groups: dict[str, dict] = {name: {} for name, _ in sections}
    for key, value in values.items():
        group = group_of(key)
        groups[group if group in groups else "grpo"][key] = value
    parts = [header]
    for name, title in sections:
        if groups[name]:
            lines = [f"# --- {title}"]
            for key, value in groups[name].items():
                if why.get(key):
                    lines += textwrap.wrap(why[key], 116, initial_indent="# ", subsequent_indent="#   ")
                lines.append(yaml.safe_dump({key: value}, sort_keys=False, default_flow_style=False).rstrip("\n"))
            parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def emit_grpo_config(request: GRPORecipeRequest) -> EmitResult:
    """Into `run_dir` when given (refused when it holds anything launched), else into a new run directory
    that appears only once every file is written and the config validates: a failed or NOT VALID emission leaves
    nothing behind (issue 49), and a run_dir as it was."""
    if request.run_dir:
        return _emit_into_folder(request)
    slug = request.run_name or default_run_name(request.model, request.dataset)
    made_root = not runs_root().exists()
    runs_root().mkdir(parents=True, exist_ok=True)
    staging = _staging_folder()
    try:
        while True:
            final = runs_root() / unique_run_name(slug)
            result = _emit(request, Run(staging), Run(final))
            if not result.validation.valid:  # no run directory for a NOT VALID emission (issue 49)
                shutil.rmtree(staging, ignore_errors=True)
                if made_root:
                    with contextlib.suppress(OSError):
                        runs_root().rmdir()
                return _nothing_kept(result, f"no run directory was created ({final.name} does not exist)")
            (staging / STAGING_MARK).unlink(missing_ok=True)  # a run now (a crash from here on leaves it be)
            try:
                os.rename(staging, final)  # fails when another emission took the name meanwhile: next name
            except OSError:
                if not final.exists():
                    raise
                (staging / STAGING_MARK).write_text(STAGING_TEXT, encoding="utf-8")
                continue
            try:  # a launch recorded for an earlier run at this path is not this run's (evidence.record_emission)
                record_emission(final)
            except BaseException:
                shutil.rmtree(final, ignore_errors=True)
                raise
            return result
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if made_root:  # a first emission that failed leaves no empty runs/ either
            with contextlib.suppress(OSError):
                runs_root().rmdir()
        raise


def _emit_into_folder(request: GRPORecipeRequest) -> EmitResult:
    """Emission into an existing run_dir: refused when it holds anything launched or files no emission wrote;
    one emission at a time (round 16, D5); a NOT VALID or failed one puts the folder back as it was."""
    # A relative run_dir is resolved now (workspace first), whatever directory the emit ran from.
    run_dir = find_existing(request.run_dir)
    if run_dir is None or not run_dir.is_dir():
        raise UserInputError("run_dir", f"no such directory: {request.run_dir} (looked under {workspace_root()}, "
                             "its runs/ and the current directory)")
    refuse_run_dir_outside(run_dir)  # a run is written inside the workspace, never at its root (round 12, D3)
    run = Run(run_dir)
    with _one_emission_into(run_dir):
        launched = run.launched_evidence()
        if launched:
            raise UserInputError(
                "run_dir", f"{run_dir} holds a launched run ({', '.join(launched)}): emitting into it would rewrite "
                "what was launched. Emit without run_dir for a new run, or resume_training to continue this one")
        _refuse_overwriting_own_files(run, request)
        undo = _undo_emission_into(run)
        try:
            result = _emit(request, run, run)
            if result.validation.valid:  # whatever was launched here before is not this recipe's (evidence.py)
                record_emission(run.dir)
        except BaseException:
            undo()
            raise
        if not result.validation.valid:  # nothing of it stays: the folder is as the person had it
            undo()
            return _nothing_kept(result, f"{run.dir} is as it was")
        return result


@contextlib.contextmanager
def _one_emission_into(run_dir: Path):
    """An exclusive flock on the folder itself for the whole emission into it, from its first check to its last
    write or undo (round 16, D5: a NOT VALID emission's undo put back the snapshot it took before another
    emission, which had reported success, wrote). A second emission is refused at once, nothing written; the
    folder gains no file (the lock is on its own descriptor) and the kernel drops the lock with its holder."""
    fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserInputError("run_dir", f"another emission into {run_dir} is under way (emit_grpo_config or "
                                 "emit-config with this run_dir): nothing was written by this one; emit again once "
                                 "it has ended") from None
        yield
    finally:
        os.close(fd)


STAGING = re.compile(r"\.emit-(\d+)-")  # runs/.emit-<pid>-<random>: an emission's folder until it is whole


STAGING_MARK = ".llm-finetuning-staging"  # inside each staging folder: what says emission made it
STAGING_TEXT = "an emission's staging folder: removed once its process is gone\n"


def _staging_folder() -> Path:
    """A new hidden runs/.emit-<pid>-* folder (all_runs lists no hidden folder), marked as emission's (STAGING_MARK),
    after removing those of emissions whose process is gone (round 15: a SIGKILLed emit-config left its staging
    folder for good). Only a marked folder is removed (round 16, D2: a person's own folder named so was deleted); a
    live process's is left, whatever it is."""
    for folder in runs_root().glob(".emit-*"):
        found = STAGING.match(folder.name)
        if found and folder.is_dir() and not folder.is_symlink() and not _alive(int(found.group(1))) \
                and _marked(folder):
            shutil.rmtree(folder, ignore_errors=True)
    folder = Path(tempfile.mkdtemp(prefix=f".emit-{os.getpid()}-", dir=runs_root()))
    (folder / STAGING_MARK).write_text(STAGING_TEXT, encoding="utf-8")
    return folder


def _marked(folder: Path) -> bool:
    mark = folder / STAGING_MARK
    try:
        return not mark.is_symlink() and mark.is_file() and mark.read_text(encoding="utf-8") == STAGING_TEXT
    except (OSError, UnicodeDecodeError):
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # another user's process, or no pid at all: not ours to judge
    return True


EMITTED_HEADER = "# GRPO config emitted by llm-finetuning"  # config.yaml's first line, as emission writes it
STAMP = "# llm-finetuning: the sha256 of the lines above as emission wrote them: "  # config.yaml's last line


def stamp_config(text: str) -> str:
    """config.yaml as emission writes it: `text` and a last line holding its sha256 (round 16, D1: a config
    edited by hand, its header kept, was replaced by the next emission into its folder)."""
    return f"{text}{STAMP}{hashlib.sha256(text.encode('utf-8')).hexdigest()}\n"


def config_body(text: str) -> str | None:
    """The text above the stamp when the config is as emission wrote it (emitted header, stamp of what is above
    it), else None: edited since, or not emission's."""
    cut = text.rfind("\n", 0, len(text) - 1) + 1
    body, last = text[:cut], text[cut:]
    if not body.startswith(EMITTED_HEADER) or not last.startswith(STAMP):
        return None
    return body if last == f"{STAMP}{hashlib.sha256(body.encode('utf-8')).hexdigest()}\n" else None


def _trainer_script(request: GRPORecipeRequest, agentic, final: Run) -> str:
    """train/train.py as emission writes it (`agentic`: the run's agentic record, or anything for one, else None)."""
    template = TRAINER_TEMPLATES[trainer_name(agentic)].read_text()
    return template.replace("{{RUN}}", final.name).replace("{{PROMPT_COLUMN}}", request.prompt_column)


def _refuse_overwriting_own_files(run: Run, request: GRPORecipeRequest) -> None:
    """Emission into an existing folder rewrites only what an emission wrote there (issue 48), each file judged
    before anything is written: train/train.py only when it is the script this emission writes (not a person's
    own, or one edited by hand); train/config.yaml only when it is as an emission wrote it (its stamp); the sidecars
    (rewards.json, request.json, request.schema.json, agentic.json, dynamic_sampling.json) only beside such a
    config; data/train.jsonl (the tiny task's prompts) only when it holds those prompts; and never a path that is
    no regular file (a pipe, a directory, a link to nothing)."""
    mine = []
    agentic = True if (request.environment or request.tools) else None
    emitted = run.config.is_file() and run.config.read_text(encoding="utf-8", errors="replace").startswith(
        EMITTED_HEADER)
    ours = {
        run.script: (lambda: run.script.read_text(encoding="utf-8", errors="replace") == _trainer_script(
            request, agentic, run), "not the script emission writes: edited, or your own"),
        run.config: (lambda: config_body(run.config.read_text(encoding="utf-8", errors="replace")) is not None,
                     "edited since emit_grpo_config wrote it, or not written by it"),
        **{path: (lambda: emitted, "no config written by emit_grpo_config beside it: not emission's")
           for path in (run.rewards, run.request, run.request_schema, run.agentic, run.dynamic_sampling)},
    }
    if request.dataset == TINY:
        ours[run.train_data] = (lambda: run.train_data.read_bytes() == jsonl_text(split_task()[0]).encode(),
                                "not the tiny task's prompts emission writes there: your own data?")
    for path, (written_by_emission, why) in ours.items():
        what = not_regular(path)
        if what:
            mine.append(f"{path} ({what}: emission writes a file there)")
        elif path.exists() and not written_by_emission():
            mine.append(f"{path} ({why})")
    mine += _not_the_runs_own(run, emitted)
    if mine:
        raise UserInputError("run_dir", f"emitting into {run.dir} would overwrite {'; '.join(mine)}: nothing was "
                             "written. Move those files aside (or delete them) to emit over them, or emit without "
                             "run_dir for a new run")


def _not_the_runs_own(run: Run, emitted: bool) -> list[str]:
    """The files of the folder's inspection/ and eval/ that emission would leave to be replaced by a run's tools
    (issue 48, round 8: a person's own inspection/review.md, accepted here, was replaced by inspect_rewards): in a
    folder no emission wrote (no emitted config), every one; in an emitted run, a review file inspect_rewards did
    not write (userfiles.foreign_review_files); eval/ files always (a run's tools write none there)."""
    folders = [run.dir / "eval"] + ([] if emitted else [run.inspection])
    found = [f"{path} (in {folder.name}/ of a folder " + ("no emission wrote" if folder == run.inspection else
                                                          "that is a run's") + ": a file the run's tools did not "
             "write, which they would replace)"
             for folder in folders if folder.is_dir()
             for path in sorted(folder.rglob("*")) if path.is_symlink() or not path.is_dir()]
    found += foreign_review_files(run.inspection) if emitted else []
    return found[:5] + ([f"and {len(found) - 5} more"] if len(found) > 5 else [])


def _undo_emission_into(run: Run):
    """What emission may write into an existing folder, as it is now: the undo puts each file back (or removes
    it, and the folders emission made) so a NOT VALID or failed emission leaves the person's folder as it was."""
    paths = (run.config, run.rewards, run.request, run.agentic, run.dynamic_sampling, run.request_schema,
             run.script, run.train_data)
    before = {path: path.read_bytes() if path.is_file() else None for path in paths}
    folders = [folder for folder in (run.train, run.train_data.parent) if not folder.exists()]

    def undo() -> None:
        for path, data in before.items():
            if data is None:
                with contextlib.suppress(OSError):
                    if path.is_file() or path.is_symlink():
                        path.unlink()
            elif not path.is_file() or path.read_bytes() != data:
                atomic_write_bytes(path, data)
        for folder in folders:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty: nothing of the person's goes

    return undo


def _nothing_kept(result: EmitResult, what: str) -> EmitResult:
    """A NOT VALID emission, whatever its errors (issue 49): its findings and the config it would have written
    come back; nothing stays on disk."""
    return result.model_copy(update={"kept": f"NOT VALID: nothing was written ({what}): apply each finding's fix "
                                             "as an override (a memory lever: plan_memory, given the result's "
                                             "`config` and the same gpu and num_gpus, names them all) and emit "
                                             "again; the config it would have written is the result's `config` "
                                             "(--json)"})


def _emit(request: GRPORecipeRequest, run: Run, final: Run) -> EmitResult:
    """Write the run's files into `run` (a staging directory, or the run itself); the result names them where
    they will be, in `final`."""
    given = resolve(request, run)
    recipe = build(given)
    written = recipe.written(given.trl_defaults)
    values, why, reward_specs = written.values, written.reasons, list(recipe.rewards)
    variant, reason, moe, agentic = given.variant, given.variant_reason, given.moe, given.agentic
    command, how = launch_text(given.plan_of(recipe.values), final.dir)
    specs = [s.model_dump() for s in reward_specs]
    recorded = RecordedRequest(**record_request(request, variant_chosen=variant, is_moe=moe,
                                                trainer=trainer_name(agentic)))
    sampling = dict(given.dynamic_sampling) if given.dynamic_sampling else None  # what every plan above counted
    spec = RunSpec(values=values, target=Target(request.gpu, request.num_gpus), request=recorded, rewards=specs,
                   agentic=agentic.model_dump() if agentic else None, dynamic_sampling=sampling, base_dir=run.dir,
                   is_moe=moe)
    # the one validation entry point (memory.verdict.validate): rules, TRL's checks, architecture, memory plan
    validation = validate(spec)  # not rehearsed here: validate_grpo_config and every launch rehearse it

    trl_version = validation.trl_version or "unknown: no training interpreter"
    target = validation.target
    names = ", ".join(s["name"] for s in specs)
    if any(s["name"] == "soft_overlong_punishment" for s in specs):
        names += " (soft_overlong_punishment: DAPO's length shaping, -1 at max_completion_length)"
    note = "".join(f"# {line}\n" for line in textwrap.wrap(dynamic_sampling.header_note(sampling, variant), 114))
    header = (
        f"{EMITTED_HEADER} for {target} (TRL {trl_version}); variant: {variant} ({reason}).\n"
        + note
        + "# Each value that differs from TRL's default says why above it.\n"
        f"# Rewards (train/rewards.json): {names}.\n"
        f"# Train with this run's rewards:  {how}\n"
        + ("# TRL's own CLI also accepts it:  trl grpo --config train/config.yaml\n"
           if FIELD.reward_funcs in values else
           "# TRL's own CLI parses it too; rewards with parameters live in train/rewards.json, read by train.py.\n")
    )
    spec.write(run, stamp_config(render_yaml(values, header, why)))
    atomic_write_json(run.request_schema, GRPORecipeRequest.model_json_schema())
    atomic_write_text(run.script, _trainer_script(request, agentic, final))
    return EmitResult(
        run_dir=str(final.dir),
        config_path=str(final.config),
        train_script_path=str(final.script),
        schema_path=str(final.request_schema),
        variant=variant,
        variant_reason=reason,
        config=values,
        validation=validation,
        launch_command=command,
        cpu_time=cpu_time(spec, request.finetune, final.dir) if validation.valid else None,
        per_step=step_batch(spec) if validation.valid else None,
    )

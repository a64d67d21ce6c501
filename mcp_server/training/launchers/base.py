"""The launcher seam: one typed launch plan, one launcher per backend.

A launch reads its target once (`LaunchTarget`: the run, the request, the run's target and config), the first
launcher in `launchers.ORDER` that accepts it plans it (`LaunchPlan`: the commands, the files, the choices made),
and the same launcher turns the plan into files (`write`), starts it (`start`), reads its live state (`state`:
the process, or a scheduler's job), stops it (`stop`) and reads back the request that launches it again with the
same layout (`relaunch`, for resume_training). The gates, the lock and the run's git record are the launch tools'
own (training/launch.py), the same for every backend.

The types here are every backend's: none carries a field of one backend. What only one backend needs travels in
the slot kept for it and is read by that backend alone: `LaunchPlan.details` (the SLURM job's layout and its
memory plan per node), `DerivedState.view` (the scheduler's job, shown as training_status's `job`) and
`DerivedState.running_as` (the live run in words, when it is not a process here).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources as resources
import json
import os
import secrets
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from mcp_server.config.target import Target
from mcp_server.errors import UserInputError
from mcp_server.evidence import STATE_ENV, state_dir
from mcp_server.inspection.loader_env import (LOADER_FILES_ENV, LOADER_NAMES, LOADER_PREFIX, NO_FILE, TRAINING_PATHS,
                                              TRAINING_PATHS_ENV, TRAINING_PREFIXES, pinned_files)
from mcp_server.interpreter import SHELL_HOOKS, package_path
from mcp_server.interpreter import require_training_python as training_python
from mcp_server.memory.models import LaunchLayout
from mcp_server.recipe.recorded import REQUEST_SHA_ENV, RecordedRequest
from mcp_server.recipe.runspec import RunSpec, verdict_json
from mcp_server.inspection.pins import PYTHON_VARIABLE, describe_python
from mcp_server.inspection.trained import REWARD_SHA_ENV, VERDICT_SHA_ENV
from mcp_server.runs import REQUEST_FILE, Run
from mcp_server.training.derived import DerivedState
from mcp_server.training.launchers.commands import tools
from mcp_server.training.launchers.machine import MachineLayout, machine_layout
from mcp_server.training.models import LaunchRequest, LaunchResult, StopResult
from mcp_server.training.trainer.verified_script import PACKAGE_ENV, SCRIPT_SHA_ENV
from mcp_server.workspace import atomic_write_text, refuse_foreign, text_with

# train/train.py through verified_script: it runs the bytes whose hash the launcher passes (the verdict's pin),
# read once, so a script swapped after the gate never runs (issue 48)
TRAIN_ARGS = ["-m", "mcp_server.training.trainer.verified_script", "train/train.py", "--config", "train/config.yaml"]
# The trainer's interpreter starts from nothing the launching shell set (issue 48): every PYTHON* variable is
# dropped (a sitecustomize or usercustomize on PYTHONPATH ran before any check; PYTHONSTARTUP, PYTHONHOME), no user
# site-packages, no working directory first on sys.path; PYTHONPATH is this package's folder alone (or nothing when
# it is installed): train.py puts the reviewed reward copy (inspection/reward_code/) on its path itself. As
# environment variables, not interpreter flags, so the ranks torchrun and accelerate start inherit it.
PYTHON_ENV = """\
# The trainer's Python inherits nothing of the launching shell's (site hooks on its PYTHONPATH, user site, cwd).
for v in $(compgen -e); do case "$v" in PYTHON*) unset "$v";; esac; done
export PYTHONNOUSERSITE=1 PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1
"""


def trainer_pythonpath() -> str | None:
    """The trainer's PYTHONPATH when this package runs from a plugin folder (interpreter.package_path; None when
    installed): a folder beside the evidence key (outside the workspace) holding one link, `mcp_server` -> that
    folder's package, so nothing else of the plugin folder is importable (round 8, G4: a hashlib.py dropped beside
    the package shadowed the stdlib in the trainer before any check). Made (or its link put right) on each call."""
    path = package_path()
    if path is None:
        return None
    package = os.path.realpath(os.path.join(path, "mcp_server"))
    folder = state_dir() / "trainer-path" / hashlib.sha256(package.encode()).hexdigest()[:16]
    link = folder / "mcp_server"
    try:
        if not (link.is_symlink() and os.readlink(link) == package):
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = folder / f".mcp_server.{os.getpid()}.{secrets.token_hex(4)}"
            os.symlink(package, tmp, target_is_directory=True)
            os.replace(tmp, link)
    except OSError as exc:
        raise UserInputError(STATE_ENV, f"cannot make the trainer's package folder {folder}: "
                                        f"{exc.strerror or exc}") from None
    return str(folder)


def python_env(pythonpath: str | None) -> str:
    """The lines of train/launch.sh and train/launch.slurm that set the trainer's Python environment; the trainer
    refuses a `mcp_server` imported from anywhere else (verified_script.PACKAGE_ENV: this folder, or the
    interpreter's installation when the package is installed), issue 48."""
    where = shlex.quote(pythonpath) if pythonpath else "installed"
    return PYTHON_ENV + (f"export PYTHONPATH={shlex.quote(pythonpath)}\n" if pythonpath else "") + \
        f"export {PACKAGE_ENV}={where}\n"


# Where launch_training writes, after its gates, the check of the training interpreter against the one the verdict
# was recorded under (inspection.pins.training_python_pin): train/launch.sh and train/launch.slurm run it before
# the interpreter first runs (issue 48: a wrapper script named after the verdict ran before the trainer's checks).
PYTHON_PIN_LINE = "# the training interpreter's check, written by launch_training after its gates"
# What a refused interpreter leaves: the plain exit-code file alone (and no earlier signed exit.json): signing runs
# the interpreter it refused (issue 48, G3), so the run reads ended without a signed exit, as a refused launch.
# Templates: their commands are filled in by absolute path (commands.tools()).
PLAIN_EXIT = ('{rm} -f "$LOGS/.exit-code.tmp"; (set -C; echo $rc > "$LOGS/.exit-code.tmp") && '
              '{mv} -fT "$LOGS/.exit-code.tmp" "$LOGS/exit-code"')
REFUSED_EXIT = 'rc=3; {rm} -f "$LOGS/exit.json"; ' + PLAIN_EXIT + '; exit 3'


def loader_check(pin) -> str:
    """The bash function check_loader: the loader's variables and those that change what trains (ACCELERATE_*,
    FSDP_*: inspection.loader_env) must be the ones the verdict recorded (`pin`; none recorded: none set), less
    LD_PRELOAD and LD_AUDIT, which no launcher passes on (interpreter.SHELL_HOOKS); else one line on stderr naming
    the variable, what was reviewed and what it is now."""
    expected = {k: v for k, v in (pin if isinstance(pin, dict) else {}).items()
                if isinstance(v, str) and k not in SHELL_HOOKS and k.isidentifier() and k.isascii()}
    q = shlex.quote
    names = "|".join(["__none__", *expected])  # only these may be set
    pattern = "|".join([f"{prefix}*" for prefix in (LOADER_PREFIX, *TRAINING_PREFIXES)] + list(LOADER_NAMES))
    lines = [
        "check_loader() {",
        "  local v",
        "  for v in $(compgen -e); do",
        f'    case "$v" in {pattern}) ;; *) continue;; esac',
        f'    case "$v" in {names}) ;; *) echo "llm-finetuning: refusing to train: $v is set (${{!v}}), unset when the '
        'inspection verdict was recorded: the dynamic loader or the trainer obeys it. Unset it, or record the '
        'verdict again from this shell (record_inspection_verdict), then launch again" >&2; return 3;; esac',
        "  done"]
    for name, value in expected.items():
        lines.append(f'  [ "${{{name}+set}}" = set ] && [ "${name}" = {q(value)} ] || {{ echo "llm-finetuning: '
                     f'refusing to train: {name} is ${{{name}-unset}}, not "{q(value)}" as when the inspection '
                     f'verdict was recorded: set it back, or record the verdict again from this shell '
                     f'(record_inspection_verdict), then launch again" >&2; return 3; }}')
    files = {k: v for k, v in pinned_files(pin).items() if k in expected and (v == NO_FILE or _is_digest(v))}
    for name, digest in files.items():  # the content of a file such a variable names (relative: the run's)
        lines.append(f'  sum=$(loader_file_sum "${name}"); [ "$sum" = {q(digest)} ] || {{ echo "llm-finetuning: '
                     f'refusing to train: the file {name} names (${name}) is ${{sum:-unreadable}}, not {q(digest)} '
                     f'as when the inspection verdict was recorded: put it back, or record the verdict again from '
                     f'this shell (record_inspection_verdict), then launch again" >&2; return 3; }}')
    head = [loader_file_sum()] if files else []
    return "\n".join([*head, *lines[:2], *(["  local sum"] if files else []), *lines[2:], "}"]) + "\n"


def loader_file_sum() -> str:
    """What check_loader compares a pinned file with (inspection.loader_env.file_digest): its sha256, else
    NO_FILE; its commands by absolute path, as the rest of the scripts' (commands.py)."""
    t = tools()
    return (f'loader_file_sum() {{ if [ -f "$1" ]; then {t["sha256sum"]} -- "$1" 2>/dev/null | {t["cut"]} -c1-64; '
            f'else echo {shlex.quote(NO_FILE)}; fi; }}')


def _is_digest(value: str) -> bool:
    return len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def with_python_check(script: str, python: str, pin, on_refusal: str, loader=None) -> str:
    """`script` with the bash function check_python where PYTHON_PIN_LINE stands, and its call: `python` must be
    the path the verdict recorded, resolve to the same file and hold the same bytes (sha256), else one line on
    stderr naming LLM_FINETUNING_PYTHON, the recorded and the current one and the way on, then `on_refusal`. Before
    it, check_loader (`loader`: the verdict's loader_env pin): the loader runs before the interpreter does.
    `on_refusal`: a template whose commands are filled in as the check's are (REFUSED_EXIT)."""
    pin = pin if isinstance(pin, dict) else {}
    q, t = shlex.quote, tools()  # every command by absolute path (commands.py): a sha256sum on PATH answers nothing
    on_refusal = on_refusal.format(**t)
    check = f"""{PYTHON_PIN_LINE}
{loader_check(loader)}check_python() {{
  local py={q(python)} dir real sum
  dir=$({t["readlink"]} -f -- "$({t["dirname"]} -- "$py")"); real=$({t["readlink"]} -f -- "$py")
  sum=$({t["sha256sum"]} -- "$real" 2>/dev/null | {t["cut"]} -c1-64)
  [ "$dir/$({t["basename"]} -- "$py")" = {q(str(pin.get("path")))} ] && [ "$real" = {q(str(pin.get("realpath")))} ] && \
[ "$sum" = {q(str(pin.get("sha256")))} ] && return 0
  echo "llm-finetuning: refusing to train: {PYTHON_VARIABLE} names $py ($real, sha256 ${{sum:0:12}}), not the \
training interpreter the inspection verdict was recorded under ("{q(describe_python(pin or None))}"): record the \
verdict again under it (record_inspection_verdict), or put that one back, then launch again" >&2
  return 3
}}
check_loader || {{ {on_refusal}; }}
check_python || {{ {on_refusal}; }}
"""
    return script.replace(PYTHON_PIN_LINE + "\n", check, 1)


TRL_ACCELERATE_CONFIGS = {"ddp": "multi_gpu", "zero2": "zero2", "zero3": "zero3", "fsdp": "fsdp2"}
RESUME_FLAG = "--resume_from_checkpoint"


@dataclass(frozen=True)
class LaunchTarget:
    """What every launcher plans from, read once: the run, the launch request, the run as one value (its config,
    recorded request and `Target` with this launch's server GPUs), the training interpreter and the training
    script's extra arguments."""

    run: Run
    request: LaunchRequest
    spec: RunSpec
    python: str
    extra: tuple[str, ...] = ()

    @property
    def config(self) -> dict:
        return self.spec.values

    @property
    def run_request(self) -> RecordedRequest:
        return self.spec.request

    @property
    def cpu(self) -> bool:
        return self.spec.target.cpu

    @property
    def num_gpus(self) -> int:
        return self.spec.target.num_gpus

    @property
    def server_mode(self) -> bool:
        """vLLM server mode: a `trl vllm-serve` process on GPUs of its own (on a CPU target: on this machine's CPU,
        beside the trainer)."""
        return bool(self.config.get("use_vllm")) and self.config.get("vllm_mode") == "server"

    @property
    def target(self) -> Target:
        """The run's recorded hardware with this launch's server GPUs: what decides the training world."""
        return self.spec.target

    @property
    def vllm_gpus(self) -> int:
        return self.target.server_gpus(self.server_mode)

    @property
    def resume_from(self) -> str | None:
        return self.extra[1] if self.extra[:1] == (RESUME_FLAG,) else None

    @functools.cached_property
    def machine(self) -> MachineLayout:
        """The layout on this one machine (processes, strategy, memory plan), planned on first use."""
        return machine_layout(self)


def read_target(run: Run, request: LaunchRequest, spec: RunSpec,
                extra_args: list[str] | None = None) -> LaunchTarget:
    """The launch target of `run` (`spec`: the run as the launch read it); a vLLM server mode given no GPU is an
    input error."""
    python = training_python()  # absolute (launch.sh runs it from the run directory), as the verdict pins it
    found = python if os.sep in python else shutil.which(python)
    target = LaunchTarget(run=run, request=request, spec=spec, python=os.path.abspath(found) if found else python,
                          extra=tuple(str(a) for a in (extra_args or [])))
    if target.server_mode and not target.cpu and target.vllm_gpus == 0:
        raise UserInputError("vllm_server_gpus", "the config uses vllm_mode: server, which needs at least 1 GPU for "
                                                 "the vLLM server")
    return target


@dataclass
class LaunchPlan:
    """What will run, before anything runs: the launcher, the commands, the script to write, the choices made."""

    launcher: str  # the backend's name in launchers.LAUNCHERS
    strategy: str
    num_processes: int
    num_nodes: int
    train_command: list[str]
    script: str  # the script the backend writes and starts (train/launch.sh, train/launch.slurm)
    accelerate_config: dict | None = None  # one of TRL's accelerate configs, sized (a backend that uses accelerate)
    vllm: dict | None = None
    notes: list[str] = field(default_factory=list)
    memory: LaunchLayout | None = None  # the memory plan's layout this launch follows (None: not planned)
    details: Any = None  # the backend's own plan, read by that backend alone (slurm: a SlurmDetails)
    verdict: str | None = None  # verdict.json's text as the launch read it and its gate judged it (RunSpec.verdict)


@dataclass(frozen=True)
class Start:
    """What a start records beside the plan: the git commit of the recipe, what it resumes, the env verdict."""

    commit: str | None
    config_sha256: str | None = None  # of train/config.yaml as the launch read and validated it (RunSpec)
    config_values: dict | None = None  # that config's mapping: run.json's launched_config (what a resume compares)
    previous: dict | None = None  # run.json before this launch (its history)
    resumed_from: str | None = None
    patch: dict | None = None
    env_verdict: str | None = None
    state_before: str = "not_launched"  # the run's state when the call began (said when nothing starts)


class Launcher(Protocol):
    """One backend. Adding one: a folder in this package (launchers/<name>/, its class in launcher.py, exported as
    LAUNCHER by its __init__.py) and its name in launchers.BACKENDS (docs/development.md)."""

    name: str
    checks_environment: bool  # this machine's environment gates the launch (false: it runs elsewhere)

    def accepts(self, target: LaunchTarget) -> bool: ...

    def plan(self, target: LaunchTarget) -> LaunchPlan: ...

    def check(self, plan: LaunchPlan) -> None:
        """Before anything is written: UserInputError when the backend would refuse the plan."""

    def write(self, run: Run, plan: LaunchPlan) -> dict[str, str]: ...

    def recorded(self, run: Run) -> list[Path]:
        """The files committed to git before the start."""

    def commit_message(self, run: Run, resumed: bool, config_sha256: str) -> str: ...

    def start(self, run: Run, plan: LaunchPlan, written: dict[str, str], start: Start) -> LaunchResult: ...

    def state(self, run: Run, record: dict | None) -> DerivedState:
        """The run's live state as this backend knows it (`record`: its run.json, None when missing or damaged):
        the process on this machine, a scheduler's job. runstate.derive_state asks the launcher of the record."""

    def status_text(self, derived: DerivedState) -> str:
        """What this backend adds to training_status's message (e.g. why a job is pending); "" for nothing."""

    def stop(self, run: Run, derived: DerivedState, timeout_s: float, config: dict, note: str,
             kill: bool = False) -> StopResult:
        """Ask the live run (`derived`: runstate.derive_state) to save and stop at its step end, wait `timeout_s`;
        end it then only with `kill` (training/stopping.py). `note`: what its state reading noted, said."""

    def relaunch(self, record: dict, run_ref: str) -> LaunchRequest:
        """The request that launches the run again with the layout its launch record holds."""


def verdict_env(text: str | None) -> dict[str, str]:
    """What the trainer checks against, passed by every launcher after the gates (inspection.trained,
    trainer.verified_script), from `text`: verdict.json as the launch read it and its inspection gate judged it
    (LaunchPlan.verdict; round 18: the file hashed again after the gate signed a verdict swapped in between): the
    reward-code hash it pinned, its own bytes' hash and its train.py pin, the content of each file a pinned
    ACCELERATE_* / FSDP_* variable names; a name is absent when the run has no such pin (the trainer then says it
    was not reviewed)."""
    verdict = verdict_json(text) or {}
    pins = verdict.get("pins") if isinstance(verdict.get("pins"), dict) else {}
    reward, script = pins.get("reward_code"), pins.get("script")
    files = pinned_files(pins.get("loader_env"))  # the files ACCELERATE_* name, by content
    paths = verdict.get(TRAINING_PATHS)  # where its packages may come from (trainer.verified_script)
    env = {REWARD_SHA_ENV: reward if isinstance(reward, str) else None,
           VERDICT_SHA_ENV: hashlib.sha256(text.encode("utf-8")).hexdigest() if text is not None else None,
           SCRIPT_SHA_ENV: script if isinstance(script, str) else None,
           TRAINING_PATHS_ENV: os.pathsep.join(paths) if isinstance(paths, list) and all(
               isinstance(p, str) for p in paths) and paths else None,
           LOADER_FILES_ENV: json.dumps(files, sort_keys=True) if files else None,
           REQUEST_SHA_ENV: ((verdict.get("pins") or {}).get("train_files") or {}).get(REQUEST_FILE)}
    return {name: value for name, value in env.items() if isinstance(value, str) and value}


def trained_record(run: Run, config_sha256: str | None, pins: dict[str, str], text: str | None) -> dict:
    """What a launch trains, for the launcher's signed record outside the workspace (evidence.record_launch): the
    config's sha256 as its gates judged it, the reward-code and verdict hashes passed to the trainer (`pins`:
    verdict_env), and the verdict's decision, reviewer and reward functions (each name and weight, as reviewed: the
    reward-code hash the trainer checks covers them) read from the bytes that hash names (else none). An export's
    model card reports these, never the files as they are at export (issue 48 round 14; rewards.json, editable
    after training, gave the card's reward names and weights). `text`: the verdict as the gate judged it."""
    verdict_sha, decision, reviewer, rewards = pins.get(VERDICT_SHA_ENV), None, None, None
    same = text is not None and hashlib.sha256(text.encode("utf-8")).hexdigest() == verdict_sha
    value = verdict_json(text) if same else None
    if value:
        decision = value.get("verdict") if isinstance(value.get("verdict"), str) else None
        reviewer = value.get("reviewer") if isinstance(value.get("reviewer"), str) else None
        rewards = trained_rewards(value.get("rewards"))
    return {"config_sha256": config_sha256, "reward_code_sha256": pins.get(REWARD_SHA_ENV),
            "verdict_sha256": verdict_sha, "verdict": decision, "reviewer": reviewer, "rewards": rewards}


def trained_rewards(specs) -> list[dict] | None:
    """[{"name", "weight"}] of reward specs as a verdict records them, None where they are not such a list."""
    if not isinstance(specs, list) or not all(isinstance(s, dict) and isinstance(s.get("name"), str) for s in specs):
        return None
    weights = [s.get("weight", 1.0) for s in specs]
    if not all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in weights):
        return None
    return [{"name": s["name"], "weight": w} for s, w in zip(specs, weights)]


def verdict_shell_pins(text: str | None) -> tuple[dict | None, dict | None]:
    """(training_python, loader_env): the training interpreter and the dynamic loader's environment the verdict was
    recorded under (its pins), each None without one; `text`: verdict.json as the gate judged it."""
    pins = (verdict_json(text) or {}).get("pins")
    pins = pins if isinstance(pins, dict) else {}
    found = (pins.get("training_python"), pins.get("loader_env"))
    return tuple(pin if isinstance(pin, dict) else None for pin in found)


def trl_accelerate_config(name: str) -> dict:
    """One of TRL's bundled accelerate configs (trl/accelerate_configs/<name>.yaml) as a dict."""
    source = resources.files("trl.accelerate_configs").joinpath(f"{name}.yaml")
    return yaml.safe_load(source.read_text(encoding="utf-8"))


def mixed_precision(config: dict) -> str:
    return "bf16" if config.get("bf16") else ("fp16" if config.get("fp16") else "no")


ACCELERATE_MARK = "sized for this run by llm-finetuning"


def refuse_foreign_launch_files(run: Run, plan: LaunchPlan, script: Path, mark: str) -> None:
    """The launch's files (`script` with its header `mark`, train/accelerate.yaml when the plan has one) are written
    only over files a launch wrote (workspace.refuse_foreign): a person's own train/launch.sh is refused, named."""
    files = {script: text_with(mark)}
    if plan.accelerate_config is not None:
        files[run.accelerate] = text_with(ACCELERATE_MARK)
    refuse_foreign("run", files, "launch_training")


# The text of train/accelerate.yaml as the launch wrote it, passed to the launch script (ACCELERATE_LINE), which runs
# `accelerate launch` on a private copy made from it: the file in the run, read when the job starts (minutes later on
# SLURM), is the launch's record, never what trains (issue 48, round 19).
ACCELERATE_TEXT_ENV = "LLM_FINETUNING_ACCELERATE_YAML"
ACCELERATE_ARG = "--config_file train/accelerate.yaml"
ACCELERATE_LINE = ('ACCELERATE_CONFIG=train/accelerate.yaml; if [ -n "${{{env}+x}}" ]; then '
                   'ACCELERATE_CONFIG="$({mktemp} -d)/accelerate.yaml" && printf %s "${env}" > "$ACCELERATE_CONFIG" '
                   '|| exit 1; fi  # the text this launch wrote there, never the file as it is now')


def accelerate_config_arg(command: str) -> str:
    """`command` (a shell line) running `accelerate launch` on the copy ACCELERATE_LINE makes."""
    return command.replace(ACCELERATE_ARG, '--config_file "$ACCELERATE_CONFIG"')


def write_accelerate(run: Run, plan: LaunchPlan) -> dict[str, str]:
    """train/accelerate.yaml when the plan has an accelerate config; its text for the launch script's environment
    (ACCELERATE_TEXT_ENV) under "env"."""
    if plan.accelerate_config is None:
        return {}
    text = f"# From TRL's bundled accelerate configs, {ACCELERATE_MARK}.\n" + yaml.safe_dump(
        plan.accelerate_config, sort_keys=True)
    return {"accelerate_config": str(atomic_write_text(run.accelerate, text)), ACCELERATE_TEXT_ENV: text}


def history(previous: dict | None) -> list:
    """run.json's history: every earlier launch record, oldest first."""
    return ((previous or {}).get("history", []) + [{k: v for k, v in previous.items() if k != "history"}]
            if previous else [])

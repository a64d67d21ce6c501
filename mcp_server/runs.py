"""A run directory and every file in it: the one place that knows the layout (docs/architecture.md, "The run
directory"). Every module that reads or writes a run names its files through `Run`, never by joining strings.

    runs/<YYYY-MM-DD>-<slug>/         Run.dir (workspace.new_run_dir makes it; resolve_run finds it)
      training-brief.md               brief          what the run is for, in words
      env-report.json                 env_report     check_environment's report for this run's target
      run.json                        run_json       launch record: pid, start, state, launch_id, launched_config
      progress.png                    progress_plot  training_status's plot of the metrics
      data/                           data           data files the run made itself:
        train.jsonl                   train_data       the prompts (the tiny task, the demo)
        filtered.jsonl                filtered_data    the difficulty filter's kept prompts (inspect_rewards'
                                                       difficulty_filter; train/config.yaml then names it)
        difficulty-filter.json        difficulty_filter  what the filter dropped and why
        refilter-<n>/kept.jsonl, record.json   archive_slot("refilter", data)   resume_training's re-filter
        data-card.md, validation-report.md   data_card, validation_report   the demo's data phase
      warm-start/                     warm_start     the demo's SFT warm-start model
      demo-summary.json               demo_summary   the demo's summary
      train/                          train          emit_grpo_config's files:
        config.yaml                   config           TrlParser YAML (`trl grpo --config` accepts it)
        train.py                      script           the training script
        rewards.json                  rewards          the reward specs [{name, params, weight}]
        request.json                  request          the recipe request, target and variant chosen
        request.schema.json           request_schema   the request's JSON schema
        agentic.json                  agentic          an agentic run's environment and tools (agentic.spec)
        dynamic_sampling.json         dynamic_sampling DAPO's dynamic sampling in the trainer: {max_extra_rounds}
        launch.sh / launch.slurm      launch_script, slurm_script   written by launch_training
        accelerate.yaml               accelerate     several GPUs: TRL's bundled accelerate config
        logs/                         logs           written by the training process:
          progress.jsonl              progress         one line per logged step
          stdout.log                  stdout           the training command's output
          exit-code                   exit_code        written by launch.sh when the command ends
          exit.json                   exit_record      the same, signed (evidence.py): what readers trust
          node-<node>.log / .exit     node_log(n), node_exit(n)   a SLURM job: each node's output and exit code
          env-<node>.json             node_env(n)      a SLURM job: the node's packages and GPUs, seen by its trainer
          train-begin.json            train_begin      when training starts (max_steps, world size, pid, base rate)
          stop-request.json           stop_request     stop_training asks the callback to stop
          stopped.json                stopped          the callback stopped on request (or its guard stopped)
          guard.json                  guard            the live guard's findings (training_status shows them)
          outcome.json                outcome          how training ended (succeeded needs the final save below)
          saves.jsonl                 saves            each save's files by sha256 (trainer/digest.py): what
                                                       resume, promote and export check a checkpoint against
          train-summary.json          train_summary    the Trainer's last logs (step, runtime)
          tool-batch.jsonl            tool_batch       an agentic run's first trained batch: ids and tool_mask
          reward-curve.png            reward_curve     the demo's plot
        logs-attempt-<n>/             attempt_logs(n)  an earlier launch's logs
      inspection/                     inspection     sample_completions and inspect_rewards:
        samples.jsonl                 samples          the completions, as TRL hands them to rewards
        samples.partial.jsonl         samples_partial  sampling in progress: each finished generate call's lines,
                                                       appended (kept when stopped, continued by the same request:
                                                       samples.partial.meta.json; removed when samples.jsonl is
                                                       written; never read by the gate)
        trajectories.jsonl            trajectories     an agentic run's rollouts via TRL's tool loop (+ .md, .meta.json)
        samples.meta.json             samples_meta     how they were sampled, how that differs from the config, lengths
        review.md / review.jsonl      review_md, review_jsonl   what a person reads
        review.json                   review           the last inspect_rewards result (verdict and gate read it)
        verdict.json                  verdict          the person's verdict and what it pins (inspection.pins)
        reward_code/                  reward_code      the verdict's copy of the local reward modules it reviewed:
                                                       the trainer imports them from here (inspection.trained)
        explore-<n>/                  exploration_slot sample_completions on a launched run: its samples.jsonl,
                                                       samples.meta.json, samples.partial.jsonl (the reviewed
                                                       samples, review and verdict above are never touched)
      cache/                          cache          what libraries cache while training (an arrow copy of the
                                                     data, matplotlib's): train/launch.sh points them here, not
                                                     under the home directory; safe to delete
      checkpoints/                    checkpoints    the default output_dir (output_dir() follows the config)
        checkpoint-N/llm-finetuning-digest.json      a copy of the save's line in saves.jsonl: without that line,
                                                     or with a file changed, added or gone, no checkpoint
      trackers/                       trackers       what report_to's trackers write, unless their own variables
        trackio/, wandb/, mlruns/                      say elsewhere (TRACKIO_DIR, WANDB_DIR, MLFLOW_TRACKING_URI;
                                                       tensorboard writes under checkpoints/runs/)
      promotion-report.md             promotion_report
      promotion.json                  promotion      promote_checkpoint's result (with the checkpoint's content hash)
      export/                         export         export_model's standalone model
      archive/<kind>-<n>/             archive_slot   what an archive flag moved aside (an earlier attempt, export),
                                                     resume-patch-<n>/config.yaml as launched: never deleted
      .launch.lock                    lock           held (flock) by the process launching or resuming the run
                                                     (its pid); .launch.cancel (launch_cancel): stop_training's
                                                     request that the launch under way start nothing (runlock)

Paths inside a run are relative to the run directory (output_dir: checkpoints, the run's own data:
data/train.jsonl; Run.resolve reads them), so a run can be moved or copied. A run directory holding anything
launched (launched_evidence) is never rewritten: emission into it, a fresh launch and an export over an export
are refused with the way forward.

`eval/` (workspace.eval_root) sits beside `runs/`: baselines outlive runs. Every file is written atomically
(workspace.atomic_write_*). Readers say what a missing file means: `read_config` gives {} (a run not emitted yet)
and raises UserInputError('run') for a file that is there but unreadable (a person may have edited it), as
recipe.recorded.read_recorded does for train/request.json; `read_json_if_present` gives None for a file another
process writes (run.json, the log markers), missing or half-written alike; the inspection files are read by
inspection.files, which refuses a missing one with the step that makes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import count
from pathlib import Path

from mcp_server.config import FIELD
from mcp_server.errors import UserInputError, one_line, short
from mcp_server.userfiles import read_json_if_present, read_yaml  # noqa: F401 (run readers import it from here)
from mcp_server.workspace import dated_run, find_existing, leads_outside, refuse_linked_out, runs_root

# Each launch's id (run.json `launch_id`), exported to its trainer, which tags the records it writes with it
# (train-begin.json, stopped.json, outcome.json): a record of another launch or run is never this launch's.
LAUNCH_ID_ENV = "LLM_FINETUNING_LAUNCH_ID"

# The recipe's sidecars, beside its config.yaml wherever that config sits (a copied config keeps them).
REQUEST_FILE = "request.json"
REWARDS_FILE = "rewards.json"
AGENTIC_FILE = "agentic.json"
DYNAMIC_SAMPLING_FILE = "dynamic_sampling.json"  # DAPO's dynamic sampling in the trainer, when the run has it

@dataclass(frozen=True)
class Run:
    """A run directory; its members are the paths of the layout contract (module docstring)."""

    dir: Path

    @property
    def name(self) -> str:
        """The run's name as every message shows it: its directory's name, control characters escaped (\\n,
        \\x1b), so a copied or unpacked run named with a newline cannot forge a line or act on a terminal or in a
        script. The directory itself is `dir`."""
        return one_line(self.dir.name)

    # ---------------------------------------------------------------- top level
    @property
    def brief(self) -> Path:
        return self.dir / "training-brief.md"

    @property
    def env_report(self) -> Path:
        return self.dir / "env-report.json"

    @property
    def run_json(self) -> Path:
        return self.dir / "run.json"

    @property
    def progress_plot(self) -> Path:
        return self.dir / "progress.png"

    @property
    def data(self) -> Path:
        return self.dir / "data"

    @property
    def train_data(self) -> Path:
        return self.data / "train.jsonl"

    @property
    def filtered_data(self) -> Path:
        return self.data / "filtered.jsonl"

    @property
    def difficulty_filter(self) -> Path:
        return self.data / "difficulty-filter.json"

    @property
    def data_card(self) -> Path:
        return self.data / "data-card.md"

    @property
    def validation_report(self) -> Path:
        return self.data / "validation-report.md"

    @property
    def warm_start(self) -> Path:
        return self.dir / "warm-start"

    @property
    def demo_summary(self) -> Path:
        return self.dir / "demo-summary.json"

    @property
    def cache(self) -> Path:
        return self.dir / "cache"

    @property
    def checkpoints(self) -> Path:
        return self.dir / "checkpoints"

    @property
    def trackers(self) -> Path:
        return self.dir / "trackers"

    @property
    def promotion_report(self) -> Path:
        return self.dir / "promotion-report.md"

    @property
    def promotion(self) -> Path:
        return self.dir / "promotion.json"

    @property
    def export(self) -> Path:
        return self.dir / "export"

    # ---------------------------------------------------------------- train/
    @property
    def train(self) -> Path:
        return self.dir / "train"

    @property
    def config(self) -> Path:
        return self.train / "config.yaml"

    @property
    def script(self) -> Path:
        return self.train / "train.py"

    @property
    def rewards(self) -> Path:
        return self.train / REWARDS_FILE

    @property
    def request(self) -> Path:
        return self.train / REQUEST_FILE

    @property
    def request_schema(self) -> Path:
        return self.train / "request.schema.json"

    @property
    def agentic(self) -> Path:
        return self.train / AGENTIC_FILE

    @property
    def dynamic_sampling(self) -> Path:
        return self.train / DYNAMIC_SAMPLING_FILE

    @property
    def launch_script(self) -> Path:
        return self.train / "launch.sh"

    @property
    def slurm_script(self) -> Path:
        return self.train / "launch.slurm"

    @property
    def accelerate(self) -> Path:
        return self.train / "accelerate.yaml"

    # ---------------------------------------------------------------- train/logs/
    @property
    def logs(self) -> Path:
        return self.train / "logs"

    def attempt_logs(self, n: int) -> Path:
        return self.train / f"logs-attempt-{n}"

    @property
    def progress(self) -> Path:
        return self.logs / "progress.jsonl"

    @property
    def tool_batch(self) -> Path:
        return self.logs / "tool-batch.jsonl"

    @property
    def stdout(self) -> Path:
        return self.logs / "stdout.log"

    @property
    def exit_code(self) -> Path:
        return self.logs / "exit-code"

    @property
    def exit_record(self) -> Path:
        return self.logs / "exit.json"

    def node_log(self, node: str) -> Path:
        return self.logs / f"node-{node}.log"

    def node_exit(self, node: str) -> Path:
        return self.logs / f"node-{node}.exit"

    def node_env(self, node: str) -> Path:
        return self.logs / f"env-{node}.json"

    @property
    def train_begin(self) -> Path:
        return self.logs / "train-begin.json"

    @property
    def stop_request(self) -> Path:
        return self.logs / "stop-request.json"

    @property
    def stopped(self) -> Path:
        return self.logs / "stopped.json"

    @property
    def guard(self) -> Path:
        return self.logs / "guard.json"

    @property
    def outcome(self) -> Path:
        return self.logs / "outcome.json"

    saves = property(lambda self: self.logs / "saves.jsonl")

    train_summary = property(lambda self: self.logs / "train-summary.json")

    reward_curve = property(lambda self: self.logs / "reward-curve.png")

    # ---------------------------------------------------------------- inspection/
    @property
    def inspection(self) -> Path:
        return self.dir / "inspection"

    @property
    def trajectories(self) -> Path:
        return self.inspection / "trajectories.jsonl"

    @property
    def samples(self) -> Path:
        return self.inspection / "samples.jsonl"

    @property
    def samples_partial(self) -> Path:
        return self.inspection / "samples.partial.jsonl"

    @property
    def samples_meta(self) -> Path:
        return self.inspection / "samples.meta.json"

    @property
    def review(self) -> Path:
        """The summary of the last inspect_rewards (the InspectResult), read by the verdict and the gate."""
        return self.inspection / "review.json"

    @property
    def review_md(self) -> Path:
        return self.inspection / "review.md"

    @property
    def review_jsonl(self) -> Path:
        return self.inspection / "review.jsonl"

    @property
    def verdict(self) -> Path:
        return self.inspection / "verdict.json"

    @property
    def reward_code(self) -> Path:
        return self.inspection / "reward_code"

    def exploration_slot(self) -> Path:
        """The next free inspection/explore-<n>/ (not created): where sampling a launched run writes, so the
        evidence behind its launch (samples.jsonl, review.*, verdict.json) stays as the launch read it."""
        return self.archive_slot("explore", self.inspection)

    @property
    def lock(self) -> Path:
        return self.dir / ".launch.lock"

    launch_cancel = property(lambda self: self.dir / ".launch.cancel")

    @property
    def archive(self) -> Path:
        return self.dir / "archive"

    def archive_slot(self, kind: str, folder: Path | None = None) -> Path:
        """The next free archive/<kind>-<n>/ (or <folder>/<kind>-<n>/; not created)."""
        base = folder or self.archive
        return next(base / f"{kind}-{n}" for n in count(1) if not (base / f"{kind}-{n}").exists())

    def inside(self, path: Path) -> Path:
        """`path` (a file of this run to be written) when the folder it lands in is inside the run directory;
        UserInputError('run') when a symbolic link on the way leads elsewhere (runs/R/inspection -> ~/): a run's
        files are written inside the run, never through a link into another place."""
        folder = Path(path).parent
        real, outside = self.leads_outside(folder)
        if outside:
            link = next((p for p in [folder, *folder.parents] if p.is_symlink()), folder)
            raise UserInputError("run", f"{short(link)} leads outside the run directory (to {short(real or '?')}): "
                                        "a run's files are written inside it; replace the link with a directory")
        return path

    def leads_outside(self, path: Path) -> tuple[Path | None, bool]:
        """workspace.leads_outside (the one check) of the run directory: for inside and runstate.log_tail."""
        return leads_outside(path, self.dir)

    # ---------------------------------------------------------------- reading
    def resolve(self, path: str | Path) -> Path:
        """A path written in the run's files: relative ones are relative to the run directory."""
        path = Path(path).expanduser()
        return path if path.is_absolute() else self.dir / path

    def output_dir(self, config: dict) -> Path:
        """Where training saves: the config's output_dir (relative to the run), else checkpoints/."""
        return self.resolve(str(config.get(FIELD.output_dir) or "checkpoints"))

    def launched_evidence(self, config: dict | None = None) -> list[str]:
        """What shows the run was launched or produced something: a launch record, training logs, a saved model
        or checkpoint, a promotion, an export. Empty for a run that was only emitted (and inspected). `config`:
        the run's config when the caller has read it (else read here, for its output_dir)."""
        found = [self.run_json.name] if self.run_json.exists() else []
        found += [str(p.relative_to(self.dir)) for p in (self.logs, self.export, self.checkpoints) if _holds_a_file(p)]
        found += [str(p.relative_to(self.dir)) for p in sorted(self.train.glob("logs-attempt-*"))[:1]]
        found += [self.promotion.name] if self.promotion.exists() else []
        try:
            out = self.output_dir(self.read_config() if config is None else config)
        except UserInputError:
            out = self.checkpoints
        if out != self.checkpoints and _holds_a_file(out):
            found.append(str(out))
        return found

    def read_config(self) -> dict:
        """train/config.yaml as a dict; {} when the run has none yet (not emitted)."""
        return read_yaml(self.config, "run") if self.config.is_file() else {}

    def trained_model(self, checkpoint: str | None = None) -> tuple[dict, str, Path]:
        """(config, base model, checkpoint dir): the checkpoint given, else the config's output_dir. Refused
        unless the config names its base model and the directory holds a saved model or LoRA adapter."""
        config = self.read_config()
        base = config.get(FIELD.model_name_or_path)
        if not base:
            raise UserInputError("run", f"{self.config} names no model_name_or_path: emit the config first")
        if checkpoint:  # as the person gave it: relative to where they are, else to the run
            ckpt = Path(checkpoint).expanduser()
            if not ckpt.is_absolute() and not ckpt.exists():
                ckpt = self.dir / ckpt
        else:
            ckpt = self.output_dir(config)
        if not (ckpt / "config.json").is_file() and not (ckpt / "adapter_config.json").is_file():
            raise UserInputError(
                "checkpoint", f"{ckpt} holds no saved model (config.json or adapter_config.json): has training "
                              "finished?"
            )
        return config, str(base), ckpt.resolve()


def output_outside(run_dir: Path, output_dir) -> str | None:
    """Why `output_dir` (as training resolves it in the run directory, links followed) is not a folder of the run;
    None when it is. Checkpoints elsewhere (an unpinned field edited after the verdict) leave the run (issue 48)."""
    here = Path(run_dir).resolve()
    where = (here / Path(str(output_dir or "checkpoints")).expanduser()).resolve()  # as TrainingArguments expands
    if where != here and where.is_relative_to(here):
        return None
    return (f"output_dir {str(output_dir)[:120]!r} is not a folder of this run ({where} is outside {here}): its "
            "checkpoints would land outside the run")


def _holds_a_file(folder: Path) -> bool:
    """Whether a file is anywhere under `folder`: empty folders are no evidence (GRPOTrainer makes
    <output_dir>/completions/ when it is built, before a step is trained)."""
    return folder.is_dir() and any(p.is_file() for p in folder.rglob("*"))


def sidecars(config_path: str | Path) -> tuple[Path, Path]:
    """(request.json, rewards.json) beside a config file: a run's train/ files, or a config copied with them."""
    folder = Path(config_path).parent
    return folder / REQUEST_FILE, folder / REWARDS_FILE


# Run's members that are folders; every other path member is a file, which readers open only when it is a regular
# file (userfiles.open_regular) and training_status and list_runs name when it is not (status.file_problems; issue
# 48: a pipe there blocked both forever). tests/test_run_files.py has rows for each file member.
FOLDERS = frozenset({"data", "warm_start", "cache", "checkpoints", "trackers", "export", "train", "logs",
                     "inspection", "reward_code", "archive"})


def file_members() -> list[str]:
    return [name for name, member in vars(Run).items()
            if isinstance(member, property) and name not in FOLDERS and name != "name"]


# What makes a directory outside runs/ a run (a copied or moved run): any of these, which only a run holds.
RUN_MARKERS = ("train", "run.json", "inspection", "training-brief.md")


def resolve_run(run: str | Path) -> Run:
    """A run given as a name under runs/ or as a path (relative to the workspace, see workspace.find_existing); it
    must exist, and a directory outside runs/ must hold a run (RUN_MARKERS), so a tool never writes a run's files
    into an arbitrary directory such as the current one, nor through a link out. UserInputError('run')."""
    refuse_linked_out(run)
    path = (find_existing(run) or dated_run(run)) if str(run).strip() else None
    if path is not None and path.is_dir():
        if path.parent == runs_root().resolve() or any((path / marker).exists() for marker in RUN_MARKERS):
            return Run(path)
        raise UserInputError("run", f"{short(path)} is not a run directory (it holds none of "
                                    f"{', '.join(RUN_MARKERS)}); "
                             "give a run's name under runs/ or the path of a run emit_grpo_config made")
    known = sorted(r.name for r in all_runs())  # not the hidden staging directories of an emission under way
    raise UserInputError(
        "run", f"no run directory '{short(run)}' (looked in {runs_root()}); known runs: {', '.join(known) or 'none'}"
    )


def all_runs() -> list[Run]:
    """Every run under runs/, newest name first."""
    root = runs_root()
    if not root.is_dir():
        return []
    dirs = (p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    return [Run(p) for p in sorted(dirs, key=lambda p: p.name, reverse=True)]

"""Builders and tables more than one test file uses (no tests here): the package's floors, constructed trainer
states, hand-made and emitted runs, the inspection gate passed honestly, a run's awaited status. The doors (CLI,
MCP) and the fixtures are in conftest.py. Each builder goes through the product's core API, never around it; the
product modules are imported inside the builders, so collecting a test file imports nothing heavy."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import shutil
import subprocess
import time
from pathlib import Path

import psutil
import pytest
import yaml

from conftest import ANY_TEXT_REWARDS

# ---------------------------------------------------------------- the package's floors (test_layers.py)
PACKAGE = Path(__file__).resolve().parents[1] / "mcp_server"

# Lowest first. A module belongs to the floor of its longest matching prefix; a new module must be placed here.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("ground", ("errors", "evidence", "inputs", "reporting", "interpreter", "worker", "worker_apart", "worker_targets",
                "worker_stderr", "worker_daemon", "worker_keyless", "workspace", "userfiles", "runs", "tiny", "smollm2",
                "smollm2_task", "model_ref", "dataset", "gpus", "toolspec", "generation", "kernel_sets",
                "config")),  # config: the GRPO config's one home (its typed view and TRL's defaults)
    ("rewards", ("rewards",)),
    ("agentic", ("agentic",)),  # environments and tools for agentic GRPO (TRL environment_factory, tools)
    ("recipe", ("recipe",)),  # config rules and validation
    ("memory", ("memory",)),
    ("emission", ("emission",)),
    ("inspection", ("inspection",)),
    ("diagnosis", ("diagnosis",)),  # diagnose_run's rules, registry and triage; the guard reads them
    ("training", ("training",)),
    ("evaluation", ("evaluation",)),
    ("doors", ("cli", "server", "jsonrpc", "calls", "__main__", "demo", "demo_models", "demo_report", "demo_agentic",
               "demo_warm_start",
               "demo_smollm2", "manifests", "content", "served", "tools", "warm_up", "cli_flags", "serverlog")),
]


def module_name(path: Path) -> str:
    """The dotted module name of a file under the package (a package's __init__.py is the package)."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def floor_of(module: str) -> int:
    """The number of the floor (FLOORS, lowest 0) a dotted module name belongs to; AssertionError for none."""
    rest = module.removeprefix("mcp_server").lstrip(".")
    if not rest:  # the package's own (empty) __init__
        return 0
    best, level = -1, None
    for number, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            if (rest == prefix or rest.startswith(prefix + ".")) and len(prefix) > best:
                best, level = len(prefix), number
    if level is None:
        raise AssertionError(f"{module} is on no floor: add it to FLOORS in {Path(__file__).name}")
    return level


def package_of(module: str) -> str:
    """The top-level package of a dotted module name (mcp_server.memory.planner -> mcp_server.memory)."""
    return ".".join(module.split(".")[:2])


# ---------------------------------------------------------------- constructed trainer states (diagnose_run)
# A run that is healthy by construction: steady gradients and entropy, a small KL, a rising reward with spread
# in every group, completions that end well inside the limit. Each test changes one series around one
# threshold and runs the real diagnose_run on the trainer_state.json it makes.
SERIES_CONFIG = {"learning_rate": 1e-6, "beta": 0.04, "loss_type": "dapo", "num_generations": 4,
                 "per_device_train_batch_size": 8, "max_completion_length": 24, "bf16": False, "use_vllm": False,
                 "gradient_checkpointing": False, "use_cpu": True, "output_dir": "checkpoints"}


def healthy_rows(n: int = 12) -> list[dict]:
    """`n` logged rows of a healthy run (see SERIES_CONFIG's comment): what each test changes one series of."""
    return [{"loss": 0.05, "grad_norm": 0.5, "learning_rate": 1e-6, "reward": 0.5 + 0.01 * i, "reward_std": 0.3,
             "frac_reward_zero_std": 0.1, "kl": 0.01, "entropy": 0.8, "completions/mean_length": 20.0 + i % 2,
             "completions/clipped_ratio": 0.0, "completions/mean_terminated_length": 20.0 + i % 2,
             "rewards/format_reward/mean": 0.9, "rewards/format_reward/std": 0.2,
             "rewards/correctness_reward/mean": 0.3 + 0.01 * i, "rewards/correctness_reward/std": 0.4}
            for i in range(n)]


def with_series(rows: list[dict], metric: str, values) -> list[dict]:
    """The rows with `metric` set to `values`, one per row."""
    return [{**row, metric: value} for row, value in zip(rows, values, strict=True)]


def series_file(tmp_path: Path, rows: list[dict]) -> Path:
    """A trainer_state.json as TRL writes it, logging `rows` at steps 1, 2, ..."""
    path = tmp_path / "trainer_state.json"
    history = [{**row, "step": i + 1, "epoch": round((i + 1) / len(rows), 4)} for i, row in enumerate(rows)]
    path.write_text(json.dumps({"global_step": len(rows), "log_history": history}))  # NaN as TRL writes it
    return path


def diagnose_series(tmp_path: Path, rows: list[dict], validate: bool = False, **config):
    """diagnose_run on a trainer_state.json logging `rows`, with SERIES_CONFIG updated by `config` beside it."""
    from mcp_server.diagnosis.diagnose import diagnose_run
    from mcp_server.diagnosis.models import DiagnoseRequest

    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump({**SERIES_CONFIG, **config}))
    return diagnose_run(DiagnoseRequest(source=str(series_file(tmp_path, rows)), config_path=str(config_path),
                                        validate_patches=validate))


# ---------------------------------------------------------------- runs built by hand
TASK_REWARDS = [{"name": "format_reward"}, {"name": "correctness_reward"}]


def hand_made_run(workspace: Path, tiny_model, name: str, groups: list[list[str]], golds: list[str],
                  rewards: list | None = None, cut: bool = False) -> Path:
    """A configured run (tiny model, a data file, format + correctness) with chosen completions as its samples,
    written the way sample_completions writes them from the run's config (`cut`: each one cut at the length
    limit)."""
    from mcp_server.inspection.pins import config_pins
    from mcp_server.runs import Run
    from mcp_server.workspace import atomic_write_json, atomic_write_text, new_run_dir

    run_dir = new_run_dir(name)
    data = workspace / f"{name}.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Q{i}", "answer": g}) + "\n" for i, g in enumerate(golds)))
    # one group a step: the config TRL accepts for training (the review reads the rows as the trainer does)
    config = {"model_name_or_path": str(tiny_model), "num_generations": len(groups[0]),
              "per_device_train_batch_size": len(groups[0]),
              "datasets": [{"path": "json", "data_files": str(data), "split": "train"}]}
    atomic_write_text(run_dir / "train" / "config.yaml", yaml.safe_dump(config))
    atomic_write_json(run_dir / "train" / "rewards.json", rewards or TASK_REWARDS)
    lines, sid = [], 0
    for p, (group, gold) in enumerate(zip(groups, golds)):
        for k, text in enumerate(group):
            lines.append({"id": sid, "prompt_index": p, "sample_index": k, "row_index": p, "prompt": f"Q{p}",
                          "completion": text, "completion_ids": [], "columns": {"answer": gold}, "truncated": cut,
                          "finish_reason": "length" if cut else "stop"})
            sid += 1
    atomic_write_text(run_dir / "inspection" / "samples.jsonl", "".join(json.dumps(x) + "\n" for x in lines))
    sign_samples(run_dir, {"dataset_rows": len(golds), "num_prompts": len(golds), "n": len(groups[0]),
                           "differs_from_config": [], "config_pins": config_pins(Run(run_dir))})
    return run_dir


def sign_samples(run_dir: Path, meta: dict | None = None) -> dict:
    """inspection/samples.meta.json `meta` (None: the one there, else {}) for the run's samples.jsonl written by a
    test, signed as the sampler signs what it wrote (sample_files.write_samples_meta, which sample_completions
    calls)."""
    from mcp_server.inspection.sample_files import write_samples_meta
    from mcp_server.runs import Run
    from mcp_server.userfiles import sha256_file

    run = Run(Path(run_dir))
    if meta is None:
        meta = json.loads(run.samples_meta.read_text()) if run.samples_meta.is_file() else {}
    return write_samples_meta(run, run.samples_meta, sha256_file(run.samples), meta)  # the bytes the test wrote


def dead_pid() -> tuple[int, float]:
    """A pid and start time of a process that has exited (a launcher that is gone)."""
    proc = subprocess.Popen(["true"])
    started = psutil.Process(proc.pid).create_time() if proc.poll() is None else time.time()
    proc.wait()
    return proc.pid, started


def hand_run(workspace: Path, name: str, **record) -> Path:
    """runs/<name>/ with a train/ folder and, given fields, a run.json."""
    run_dir = workspace / "runs" / name
    (run_dir / "train" / "logs").mkdir(parents=True)
    if record:
        (run_dir / "run.json").write_text(json.dumps({"cwd": str(run_dir), **record}))
    return run_dir


@contextlib.contextmanager
def module_workspace(tmp_path_factory, name: str, **env: str):
    """A fresh workspace root (a `tmp_path_factory` folder named `name`) for a module- or session-scoped fixture:
    LLM_FINETUNING_WORKSPACE points at it, and each of `env` is set, until the `with` ends (then all are restored).
    Yields the root; the runs a module emits there are independent directories inside it."""
    root = tmp_path_factory.mktemp(name)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LLM_FINETUNING_WORKSPACE", str(root))
        for key, value in env.items():
            patch.setenv(key, value)
        yield root


# ---------------------------------------------------------------- runs emitted, inspected, built, awaited
# Four short steps of the tiny model on the CPU: what a run the suite launches trains.
TINY_OVERRIDES = {"max_steps": 4, "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 12,
                  "logging_steps": 1, "save_steps": 1, "gradient_accumulation_steps": 1}


def emit_config(**request):
    """emit_grpo_config's result for GRPORecipeRequest(**request), on the tiny data set unless `dataset` is given,
    valid or not."""
    from mcp_server.emission.emit import emit_grpo_config
    from mcp_server.recipe.models import GRPORecipeRequest

    request.setdefault("dataset", "tiny")
    return emit_grpo_config(GRPORecipeRequest(**request))


def emitted_run_dir(name: str, **request) -> Path:
    """The run directory emit_config(run_name=name, **request) wrote: a valid emission's (a NOT VALID one writes
    nothing, issue 49; a run that does not validate is a valid one edited, as a person would edit it)."""
    result = emit_config(run_name=name, **request)
    assert result.validation.valid and Path(result.run_dir).is_dir(), result.validation
    return Path(result.run_dir)


def emit_run(name: str, gpu: str = "cpu", num_gpus: int = 1, *, model: str = "tiny", dataset: str = "tiny",
             rewards: list[dict] = ANY_TEXT_REWARDS, base: dict = TINY_OVERRIDES, dynamic_sampling: dict | None = None,
             **overrides) -> Path:
    """The directory of a valid run emitted through the core API: the tiny model and data set on the CPU with a
    reward the untrained model earns (ANY_TEXT_REWARDS) unless given, and `base` (TINY_OVERRIDES) updated with
    `overrides` as its overrides (`dynamic_sampling`: the request's option, when given)."""
    extra = {} if dynamic_sampling is None else {"dynamic_sampling": dynamic_sampling}
    result = emit_config(model=model, dataset=dataset, gpu=gpu, num_gpus=num_gpus, run_name=name, rewards=rewards,
                         overrides={**base, **overrides}, **extra)
    assert result.validation.valid, result.validation
    return Path(result.run_dir)


def pass_inspection(run_dir: Path, engine: str = "transformers", *, max_samples: int | None = 52,
                    reviewer: str = "test", sample: bool = True):
    """The inspection gate opened honestly: 13 prompts sampled with `engine`, their rewards inspected (at most
    `max_samples`; None: InspectRequest's default), a pass recorded by `reviewer`, the gate checked open. Returns
    sample_completions' result; with `sample` False the run's samples are those a test already took through a door
    (no second sampling: each starts a model, a vLLM engine for `engine="vllm"`), and it returns None."""
    from mcp_server.inspection.gate import check_inspection_gate, record_inspection_verdict
    from mcp_server.inspection.models import InspectRequest, SampleRequest, VerdictRequest
    from mcp_server.inspection.review import inspect_rewards
    from mcp_server.inspection.sampling import sample_completions

    # The run's own model, data and sampling settings (anything else cannot back a verdict), and the run's rewards
    # (a reward the untrained tiny model earns, e.g. ANY_TEXT_REWARDS, opens the gate honestly).
    sampled = sample_completions(SampleRequest(run=str(run_dir), num_prompts=13, engine=engine)) if sample else None
    limit = {} if max_samples is None else {"max_samples": max_samples}
    inspect_rewards(InspectRequest(run=str(run_dir), **limit))
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer=reviewer,
                                             agree_with_rest=True))
    assert check_inspection_gate(run_dir).passed
    return sampled


def trainer_or_refusal(run_dir: Path, capsys):
    """The run's train/train.py build_trainer, run in the run directory as launch.sh runs it: (trainer, None), or
    (None, its refusal) when it exits."""
    spec = importlib.util.spec_from_file_location(f"train_{run_dir.name.replace('-', '_')}_{time.time_ns()}",
                                                  run_dir / "train" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with contextlib.chdir(run_dir):
        try:
            return module.build_trainer(["--config", "train/config.yaml"]), None
        except SystemExit as exc:
            assert exc.code == 3, exc.code
            return None, capsys.readouterr().err


def wait_for(run_dir: Path, done, timeout: float = 420, poll: float = 1.0):
    """The run's training_status once `done(status)` holds; AssertionError after `timeout` seconds."""
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import training_status

    deadline = time.time() + timeout
    while time.time() < deadline:
        status = training_status(StatusRequest(run=str(run_dir)))
        if done(status):
            return status
        time.sleep(poll)
    raise AssertionError(f"timed out; last status: {status.model_dump_json(indent=1)}")



def end_run(run_dir: Path):
    """A launched run ended through stop_training's kill (its launcher's process group), for a test that asserts what
    the launch said and never reads what trained: training it out cost the suite a TRL start and its steps per run.
    Returns the ended run's training_status."""
    from mcp_server.training.models import StopRequest
    from mcp_server.training.status import stop_training

    stop_training(StopRequest(run=str(run_dir), timeout_s=0, kill=True))
    return wait_for(run_dir, lambda s: s.state not in ("starting", "running", "stopping"))

# ---------------------------------------------------------------- the trainer's and the launcher's signed records
def write_signed(path: Path, data: dict) -> Path:
    """A run's evidence record (train/logs/outcome.json, train-begin.json, stopped.json, ...) as the trainer writes
    it: signed with the evidence key (mcp_server/evidence.py), which the tests hold and a workspace holder does not."""
    from mcp_server.evidence import sign_run
    from mcp_server.runs import Run

    run = Run(Path(path).parents[2])
    path.write_text(json.dumps(sign_run(run, path, data)))
    return path


def append_signed(path: Path, line: dict) -> None:
    """A progress line as the trainer appends it (signed)."""
    from mcp_server.evidence import sign_run
    from mcp_server.runs import Run

    with open(path, "a") as handle:
        handle.write(json.dumps(sign_run(Run(Path(path).parents[2]), path, line)) + "\n")


def write_signed_lines(path: Path, rows: list[dict], tail: str = "") -> Path:
    """A run's train/logs/progress.jsonl holding `rows`, each signed as the trainer appends it (a run's own lines
    without the signature are not read: issue 48 round 9), then `tail` as raw text (a line cut short)."""
    from mcp_server.evidence import run_lines_signer
    from mcp_server.runs import Run

    run = Run(Path(path).parents[2])
    path.parent.mkdir(parents=True, exist_ok=True)
    signed = run_lines_signer(run, path)  # sign_run's mac, the key read once (a long log is 50,000 lines)
    path.write_text("".join(json.dumps(signed(row)) + "\n" for row in rows) + tail)
    return path


def write_exit(run_dir: Path, code: int, launch_id: str | None = None) -> None:
    """train/logs/exit-code and the launcher's signed exit.json, as train/launch.sh leaves them: exit.json by the
    launcher's own writer (`python -m mcp_server.evidence exit RC`), under the launch id launch.sh exports (none
    when `launch_id` is None)."""
    from mcp_server.evidence import write_exit as launcher_writes_exit
    from mcp_server.runs import LAUNCH_ID_ENV, Run

    run = Run(Path(run_dir))
    run.exit_code.write_text(f"{code}\n")
    with pytest.MonkeyPatch.context() as env:
        if launch_id:
            env.setenv(LAUNCH_ID_ENV, launch_id)
        else:
            env.delenv(LAUNCH_ID_ENV, raising=False)
        launcher_writes_exit(Path(run_dir), code)


def record_launch(run_dir: Path, launch_id: str, job_id: str | None = None) -> None:
    """The launcher's record of the run's current launch id, kept beside the key (evidence.record_launch), as
    launch_training writes it when it starts a launch (a SLURM launch: with the job id sbatch answered)."""
    from mcp_server.evidence import record_launch as record

    record(Path(run_dir), launch_id, job_id)


def converted_smollm2(tiny_model: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A directory as mcp_server/smollm2.py converts one (its smollm2.json names the model and the weights), built
    from the tiny model's weights so nothing is converted, and three goldens: (the directory, the goldens file)."""
    from mcp_server import smollm2

    converted = tmp_path / "cache" / "smollm2-135m-q4_1-0123456789abcdef-v1"
    shutil.copytree(tiny_model, converted)
    (converted / "smollm2.json").write_text(json.dumps({"name": smollm2.NAME, "weights_of": smollm2.HUB_ID}))
    goldens = tmp_path / "goldens.jsonl"
    goldens.write_text("".join(json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                               for i in range(3)))
    return converted, goldens


HOLDING_REWARD = """\
import os, time
HERE = os.path.dirname(os.path.abspath(__file__))
open(os.path.join(HERE, "started"), "w").close()
for _ in range(1200):  # until the test says go (at most 2 minutes)
    if os.path.exists(os.path.join(HERE, "go")):
        break
    time.sleep(0.1)
def wait(completions, **kwargs):
    return [1.0 for _ in completions]
"""  # a reward module whose import holds its caller until the test writes "go" beside it (then it pays 1.0)

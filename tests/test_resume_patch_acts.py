"""A resume patch acts, or is refused (issue 49). A new user's walk: `resume-training RUN --patch
'{"learning_rate": 5e-05}'` said "patched learning_rate 1e-05 -> 5e-05" and the resumed steps trained at 1e-05:
transformers' Trainer loads the checkpoint's optimizer.pt (every param group's lr, initial_lr, betas, eps,
weight_decay), scheduler.pt (base_lrs) and trainer_state.json (logging_steps, eval_steps, save_steps) over what the
patched config built. Now the trainer puts the config's values back after the load
(training/trainer/resumed_settings.py), and resume_training refuses a patch of what cannot act (NOT_ACTING).

The table: every field a patch may change (resume_patch.patchable) x the value the resumed trainer uses at its
first step, read from the live trainer, optimizer, scheduler and state, the emitted train.py's own build_trainer and
script_support.train_and_save as the trainer runs them, on the tiny model. The rows of values the checkpoint holds
are HELD; every other field's row reads the resumed trainer's arguments after the load (nothing loaded rewrote
them). A field the checkpoint's trainer_state.json holds with no HELD row fails the table, and every hyperparameter
of the live optimizer must be the one the Trainer's own create_optimizer builds from the patched arguments.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import time

import pytest
import yaml

from conftest import run_cli_json
from support import emit_run

LAUNCHED = {"max_steps": 1, "save_steps": 1, "logging_steps": 1, "learning_rate": 1e-05, "lr_scheduler_type": "linear",
            "weight_decay": 0.0}
PATCH = {"learning_rate": 5e-05, "max_steps": 4, "lr_scheduler_type": "cosine", "warmup_steps": 2,
         "weight_decay": 0.1, "adam_beta1": 0.8, "adam_beta2": 0.95, "adam_epsilon": 1e-06, "logging_steps": 2,
         "save_steps": 3, "eval_steps": 5}


def _group(name: str, index: int | None = None):
    def read(live: dict):
        value = live["groups"][0][name]
        return value if index is None else value[index]
    return read


def _scheduled(live: dict) -> float:
    """The patched schedule's rate at the checkpoint's step, as the installed transformers' get_scheduler builds it
    for the patched arguments (on a throwaway optimizer): what the resumed first step trains at."""
    import torch
    from transformers import get_scheduler

    args = live["args"]
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=PATCH["learning_rate"])
    scheduler = get_scheduler(args.lr_scheduler_type, optimizer, num_warmup_steps=args.get_warmup_steps(
        args.max_steps), num_training_steps=args.max_steps)
    for _ in range(live["step"]):
        optimizer.step()
        scheduler.step()
    return optimizer.param_groups[0]["lr"]


# field: (what the row reads from the resumed trainer, the value it must be)
HELD = {
    "learning_rate": (lambda live: (live["groups"][0]["initial_lr"], live["base_lrs"][0]),
                      (PATCH["learning_rate"],) * 2),
    "lr_scheduler_type": (lambda live: live["groups"][0]["lr"], _scheduled),
    "warmup_steps": (lambda live: live["groups"][0]["lr"], _scheduled),
    "max_steps": (lambda live: (live["state"].max_steps, live["groups"][0]["lr"]),
                  lambda live: (PATCH["max_steps"], _scheduled(live))),
    "weight_decay": (lambda live: [g["weight_decay"] for g in live["groups"]], [PATCH["weight_decay"], 0.0]),
    "adam_beta1": (_group("betas", 0), PATCH["adam_beta1"]),
    "adam_beta2": (_group("betas", 1), PATCH["adam_beta2"]),
    "adam_epsilon": (_group("eps"), PATCH["adam_epsilon"]),
    "logging_steps": (lambda live: live["state"].logging_steps, PATCH["logging_steps"]),
    "save_steps": (lambda live: live["state"].save_steps, PATCH["save_steps"]),
    "eval_steps": (lambda live: live["state"].eval_steps, PATCH["eval_steps"]),
}
# trainer_state.json fields init_training_references sets from the run's arguments on every start
SET_FRESH = {"num_train_epochs"}


class _Read(Exception):
    """Raised at the resumed first step once the values are read: nothing trains."""


def _trainer(run_dir, argv=()):
    """The run's train/train.py build_trainer, in the run directory as launch.sh runs it."""
    spec = importlib.util.spec_from_file_location(f"train_acts_{time.time_ns()}", run_dir / "train" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_trainer(["--config", "train/config.yaml", *argv])


def _resumed_first_step(run_dir, checkpoint: str) -> dict:
    """What the trainer resumed from `checkpoint` with the run's (patched) config uses at its first step: the live
    optimizer's param groups, the scheduler's base rates, the TrainerState and the arguments (with what they were
    before the load), read at on_step_begin, after every load of Trainer.train."""
    from transformers import TrainerCallback

    from mcp_server.training.trainer.resumed_settings import fresh_groups
    from mcp_server.training.trainer.script_support import train_and_save

    live: dict = {}

    class Probe(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            live.update(groups=[{k: v for k, v in g.items() if k != "params"} for g in trainer.optimizer.param_groups],
                        built=fresh_groups(trainer),
                        base_lrs=list(trainer.lr_scheduler.base_lrs), state=state, args=args,
                        step=state.global_step)
            raise _Read

    with contextlib.chdir(run_dir):
        trainer = _trainer(run_dir, ["--resume_from_checkpoint", checkpoint])
        live["before"] = {k: getattr(trainer.args, k, None) for k in vars(trainer.args)}
        trainer.add_callback(Probe())
        with pytest.raises(_Read):
            train_and_save(trainer, run_dir)
    return live


@pytest.mark.slow
def test_every_patchable_field_acts_in_the_resumed_trainer(workspace, tiny_model):
    """Trained one step (checkpoint-1), patched, resumed: each row's value is the patched one."""
    import torch

    from mcp_server.training.resume_patch import patchable

    run_dir = emit_run("acts", **LAUNCHED)
    with contextlib.chdir(run_dir):
        _trainer(run_dir).train()
    config = yaml.safe_load((run_dir / "train" / "config.yaml").read_text())
    checkpoint = f"{config['output_dir']}/checkpoint-1"
    (run_dir / "train" / "config.yaml").write_text(yaml.safe_dump({**config, **PATCH}, sort_keys=False))
    live = _resumed_first_step(run_dir, checkpoint)

    saved_state = json.loads((run_dir / checkpoint / "trainer_state.json").read_text())
    saved_groups = torch.load(run_dir / checkpoint / "optimizer.pt", weights_only=False)["param_groups"]
    fields = set(patchable())
    held_by_state = fields & set(saved_state)
    assert held_by_state - SET_FRESH <= set(HELD), held_by_state - set(HELD)  # a restored field with no row
    assert saved_groups[0]["initial_lr"] == LAUNCHED["learning_rate"]  # what the checkpoint would have put back
    assert set(HELD) <= fields
    wrong = {}
    for field in sorted(fields):
        if field in HELD:
            read, want = HELD[field]
            got, want = read(live), want(live) if callable(want) else want
        else:  # read fresh from the arguments: the load left them as the patched config built them
            got, want = getattr(live["args"], field, None), live["before"].get(field)
        if got != pytest.approx(want) if isinstance(want, (float, tuple, list)) else got != want:
            wrong[field] = (got, want)
    assert not wrong, wrong
    # every hyperparameter of every live param group (not only the rows' fields) is the one the Trainer's own
    # create_optimizer builds from the patched arguments: nothing optimizer.pt restored outlives the patch
    for group, built in zip(live["groups"], live["built"], strict=True):
        assert {k: v for k, v in group.items() if k not in ("lr", "initial_lr")} == {
            k: v for k, v in built.items() if k != "lr"}, (group, built)


def test_a_patch_of_what_a_resume_cannot_apply_is_refused_naming_it(workspace, tiny_model):
    """apply_patch (resume_training's core step) refuses a change of a NOT_ACTING field, naming it and why, and
    writes nothing; the same value as launched is no change and passes."""
    from mcp_server.recipe.runspec import RunSpec
    from mcp_server.runs import Run
    from mcp_server.training.resume_patch import NOT_ACTING, apply_patch

    run = Run(emit_run("refused-patch"))
    original = run.config.read_text()
    spec = RunSpec.of_run(run)
    for field in ("seed", "optim"):
        launched = yaml.safe_load(original).get(field)
        value = 7 if field == "seed" else "sgd"
        assert launched != value
        refusals, _, changed = apply_patch(run, spec, {field: value, "learning_rate": 2e-06})
        assert [r.gate for r in refusals] == ["config"] and not changed, refusals
        assert f"{field}: {NOT_ACTING[field]}" in refusals[0].message and field in refusals[0].how_to_clear
        assert run.config.read_text() == original and not run.archive.exists()
    refusals, undo, _ = apply_patch(run, spec, {"seed": spec.values.get("seed", 42)})
    assert not refusals, refusals
    undo()


@pytest.mark.slow
def test_a_learning_rate_patch_shows_in_the_progress_log(workspace, tiny_model, monkeypatch):
    """End to end: launched, stopped at step 1 (checkpoint-1), resumed through the CLI with a learning_rate patch:
    the progress log's learning_rate at the next step is the patched schedule's value (the installed transformers'
    schedule for the run's arguments, from the patched base rate), not the launched rate's."""
    import torch
    from transformers import get_scheduler

    from mcp_server.diagnosis.progress_log import run_progress
    from mcp_server.runs import Run
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest, StopRequest
    from mcp_server.training.status import stop_training
    from support import pass_inspection, wait_for

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    run_dir = emit_run("lr-acts", max_steps=4, learning_rate=1e-06, lr_scheduler_type="linear")
    pass_inspection(run_dir)
    assert launch_training(LaunchRequest(run=str(run_dir))).launched
    stopped = stop_training(StopRequest(run=str(run_dir), timeout_s=400))
    assert stopped.state == "stopped" and stopped.checkpoint and stopped.checkpoint.endswith("checkpoint-1"), stopped
    patch = {"learning_rate": 5e-06}
    proc, out = run_cli_json("resume-training", str(run_dir), "--patch", json.dumps(patch), here=True)
    assert proc.returncode == 0 and out["launched"], out
    wait_for(run_dir, lambda status: status.state in ("succeeded", "failed"))
    logged = {row["step"]: row["learning_rate"] for row in run_progress(Run(run_dir)).records
              if "learning_rate" in row and "step" in row}

    def schedule(rate: float, step: int) -> float:  # the rate step `step` trains at (and the Trainer logs, read
        # before its scheduler steps) under the installed transformers' linear schedule from `rate`
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=rate)
        scheduler = get_scheduler("linear", optimizer, num_warmup_steps=0, num_training_steps=4)
        for _ in range(step - 1):
            optimizer.step()
            scheduler.step()
        return scheduler.get_last_lr()[0]

    assert logged[1] == pytest.approx(schedule(1e-06, 1)), logged  # the launched step
    for step in (2, 3, 4):  # the resumed steps: the patched schedule, never the launched rate's
        assert logged[step] == pytest.approx(schedule(patch["learning_rate"], step)) != schedule(1e-06, step), logged


# (train-begin.json's learning_rate, the rates logged at steps 1 and 2, whether the note is said): a run resumed
# at step 1 from the config's learning_rate 1e-05
RATE_ROWS = {
    "applied": (1e-05, (1e-05, 9e-06), False),
    "recorded another": (2e-05, (1e-05, 9e-06), True),
    "unrecorded, logged above": (None, (2e-05, 1.8e-05), True),  # a patch lowering the rate, before the fix
    "unrecorded, logged under": (None, (1e-05, 9e-06), False),
}


@pytest.mark.parametrize("row", list(RATE_ROWS))
def test_status_and_diagnosis_say_when_the_schedule_runs_from_another_rate(workspace, tiny_model, row):
    """Constructed records (signed as the trainer writes them): training_status's message and diagnose_run's
    summary name a schedule that runs from a rate other than the config's learning_rate, and nothing otherwise."""
    from mcp_server.diagnosis.diagnose import diagnose_run
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import training_status
    from support import write_signed, write_signed_lines

    recorded, logged, said = RATE_ROWS[row]
    run_dir = emit_run(f"rate-{row.replace(' ', '-').replace(',', '')}", learning_rate=1e-05)
    logs = run_dir / "train" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    begin = {"max_steps": 4, "global_step": 1, "world_size": 1, "pid": 1, "time": 0.0, "output_dir": "checkpoints"}
    write_signed(logs / "train-begin.json", {**begin, **({"learning_rate": recorded} if recorded else {})})
    write_signed_lines(logs / "progress.jsonl", [{"step": s, "learning_rate": v, "time": float(s), "loss": 0.1}
                                                  for s, v in enumerate(logged, start=1)])
    message = training_status(StatusRequest(run=str(run_dir))).message
    summary = diagnose_run(str(run_dir)).summary
    for text in (message, summary):
        assert ("learning_rate" in text and "1e-05" in text) is said, (row, text)


def test_a_config_edit_a_resume_cannot_apply_is_never_advised_as_a_patch(workspace, tiny_model):
    """The config_hash gate's advice for train/config.yaml edited since the launch: an unpinned field a resume
    cannot apply (optim) is named with why, and no `--patch` of it is offered (it would be refused); an unpinned
    field that acts (learning_rate) is still offered as the patch."""
    from mcp_server.runs import Run
    from mcp_server.training.resume_patch import NOT_ACTING, config_hash_refusal

    run = Run(emit_run("edited-optim"))
    launched = yaml.safe_load(run.config.read_text())
    record = {"launched_config": launched, "config_sha256": "0" * 64}
    idle = config_hash_refusal(run, record, {**launched, "optim": "sgd"})
    assert "--patch" not in idle.how_to_clear and f"optim ({NOT_ACTING['optim']})" in idle.how_to_clear, idle
    assert "emit a new run directory" in idle.how_to_clear
    acts = config_hash_refusal(run, record, {**launched, "learning_rate": 2e-06})
    assert """--patch '{"learning_rate": 2e-06}'""" in acts.how_to_clear, acts

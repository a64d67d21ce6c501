"""A resume trains with the config it is launched with, not the checkpoint's copy of it (issue 49).

transformers' Trainer, resuming (installed 5.x: `_inner_training_loop` -> `_init_training_state`, then
`_prepare_for_training`), builds the optimizer, the scheduler and the TrainerState from the (patched) arguments and
then replaces three of them with the checkpoint's:

- `_load_optimizer_and_scheduler`: optimizer.pt's `load_state_dict` replaces every param group's hyperparameters
  (`lr`, `initial_lr`, `betas`, `eps`, `weight_decay`: learning_rate, adam_beta1/2, adam_epsilon, weight_decay) with
  the launched ones; scheduler.pt replaces `base_lrs` and `last_epoch` (its lambdas are not saved: the schedule's
  shape, from lr_scheduler_type, lr_scheduler_kwargs, warmup_steps/ratio and max_steps, is the patched one);
- `_init_training_state`: trainer_state.json's `logging_steps`, `eval_steps` and `save_steps` replace those
  `TrainerState.compute_steps` derived from the arguments (max_steps and num_train_epochs are set fresh);
- `_load_rng_state`: rng_state.pth replaces what `seed` set.

`ResumedSettings` runs at `on_train_begin`, which the Trainer calls after those loads: it puts back what the
arguments say, derived from the installed code rather than a list of fields. The hyperparameters are those of the
optimizer the Trainer's own `create_optimizer` builds from the arguments (built aside, holding no state; the
loaded moments stay); the base rate of each group is that optimizer's `lr`, set as the group's `initial_lr` and the
scheduler's `base_lrs`, and the group's current `lr` is the base rate times the (patched) schedule's factor at the
checkpoint's step. So the resumed schedule is the patched schedule from the checkpoint's step on: the step after
checkpoint-N trains at (and the Trainer logs, reading it before the scheduler steps) patched_lr x factor(N):
exactly what a run launched with the patched config logs at those steps. The step intervals are
`TrainerState.compute_steps` over the arguments.

What still cannot act is refused by resume_training before anything is written (training/resume_patch.py
`NOT_ACTING`, each with why).
"""

from __future__ import annotations

from transformers import TrainerCallback

class ResumedSettings(TrainerCallback):
    """At on_train_begin of a resumed training: the optimizer's hyperparameters, the schedule's base rates and the
    TrainerState's step intervals from the arguments, over what the checkpoint restored (the module's docstring)."""

    def __init__(self, trainer) -> None:
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        apply_arguments(self.trainer)
        state.compute_steps(args, state.max_steps)


def fresh_groups(trainer) -> list[dict]:
    """The param groups' hyperparameters (no params) of the optimizer trainer.create_optimizer builds from its
    arguments now: built aside and dropped, the trainer's own optimizer kept."""
    live = trainer.optimizer
    trainer.optimizer = None
    try:
        built = trainer.create_optimizer()
        return [{k: v for k, v in group.items() if k != "params"} for group in built.param_groups]
    finally:
        trainer.optimizer = live


def apply_arguments(trainer) -> None:
    """Each param group's hyperparameters from fresh_groups, its initial_lr and the scheduler's base_lrs from the
    fresh lr, and its current lr the base times the schedule's factor at the scheduler's step (module docstring).
    A DeepSpeed optimizer restores through DeepSpeed's own checkpoint and is left as it is."""
    if getattr(trainer, "is_deepspeed_enabled", False):
        return
    groups, scheduler = trainer.optimizer.param_groups, trainer.lr_scheduler
    fresh = fresh_groups(trainer)
    if len(fresh) != len(groups):
        raise ValueError(f"the checkpoint's optimizer has {len(groups)} param groups, the arguments build "
                         f"{len(fresh)}: it was saved for another optimizer or model")
    lambdas = getattr(scheduler, "lr_lambdas", None)
    for index, (group, new) in enumerate(zip(groups, fresh)):
        group.update({k: v for k, v in new.items() if k not in ("lr", "initial_lr")})
        base = new["lr"]
        group["initial_lr"] = base
        if isinstance(getattr(scheduler, "base_lrs", None), list):
            scheduler.base_lrs[index] = base
        group["lr"] = base * lambdas[index](scheduler.last_epoch) if lambdas else base
    if hasattr(scheduler, "_last_lr"):  # what get_last_lr answers until the next scheduler step sets it
        scheduler._last_lr = [group["lr"] for group in groups]

"""What every emitted training script shares (the trainer seam): parsing the config as `trl grpo` does, the
training data, the model kwargs, the progress callback with its guard, and the end of training.

One template per trainer imports it (`train_template.py`: GRPO single-turn; `train_agentic_template.py`: GRPO
with tools and an environment); emission copies the template the run's trainer names into train/train.py.
Imported by train/train.py in the training interpreter.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

from trl import get_peft_config, get_quantization_config
from transformers import TrainerCallback

from mcp_server.training.trainer import verified_script

if verified_script.VERIFYING:  # the trainer, right after TRL's import (and what it imports): each package from the
    verified_script.check_libraries()  # reviewed interpreter's own folders (issue 48)

from mcp_server.inspection import replay, trained  # noqa: E402
from mcp_server.inspection.trained import InputsChanged, confirm_loaded_model, sampling_now  # noqa: E402
from mcp_server.inspection.trainer_read import parse_config, spec_for  # noqa: F401 - the templates import it here
from mcp_server.config.loader import eval_dataset as load_eval_dataset  # noqa: E402
from mcp_server.config.loader import evaluates  # noqa: E402
from mcp_server.inspection.training_inputs import train_dataset as load_train_dataset  # noqa: E402
from mcp_server.runs import Run  # noqa: E402
from mcp_server.training.trainer.digest import (checkpoint_problems, record_save, recorded_save,  # noqa: E402
                                                refuse_save_outside, refuse_save_through, sharded)
from mcp_server.training.trainer.tracker_dirs import make_tracker_dirs  # noqa: E402
from mcp_server.training.trainer.progress import ProgressCallback, write_outcome  # noqa: E402
from mcp_server.training.trainer.resumed_settings import ResumedSettings  # noqa: E402


def train_dataset(script_args, dataset_args, prompt_column: str, run_dir: Path | None = None):
    """The training split, its prompt column named 'prompt' as GRPOTrainer reads it: the loader sampling reads
    it with too (inspection.training_inputs), prepared in a fresh datasets cache under the run's cache/ (or the
    system's temporary folder for a script emitted before) that is removed once the rows are in memory."""
    cache = fresh_cache(run_dir, "datasets-") if run_dir is not None else tempfile.mkdtemp(prefix="datasets-")
    try:  # the rows come back in memory (config.loader): the cache goes at once, nothing is read from it again
        return load_train_dataset(script_args, dataset_args, prompt_column, cache)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


class CacheLeadsOut(SystemExit):
    """The run's cache/ is a link, or not a folder of the run: refused before anything is written there (exit 3)."""


def _refuse_cache(why: str):
    print(f"llm-finetuning: refusing to train: {why}", file=sys.stderr, flush=True)
    raise CacheLeadsOut(3)


def run_cache(run_dir: Path) -> Path:
    """<run>/cache, made here when absent: refused (CacheLeadsOut, naming it) when it is a symbolic link (to
    anywhere), not a directory, or does not resolve to the run's own cache/. Round 12 (D2): only the launch gate
    checked it; a link planted right after had the datasets cache written outside the workspace."""
    run_dir = Path(run_dir).resolve()
    cache = run_dir / "cache"
    try:
        cache.mkdir()
    except FileExistsError:
        pass  # there already: judged below (a link to a folder is there too: mkdir never follows it)
    except OSError as exc:
        _refuse_cache(f"cannot make {cache} ({exc.strerror})")
    if cache.is_symlink() or not cache.is_dir() or cache.resolve() != cache:
        what = f"a symbolic link to {os.readlink(cache)}" if cache.is_symlink() else "not a directory of the run"
        _refuse_cache(f"the run's cache folder {cache} is {what}: the datasets cache is written only inside the "
                      "run. Remove it (a cache/ folder is made afresh), then launch again")
    return cache


def fresh_cache(run_dir: Path, prefix: str) -> str:
    """A new folder under the run's cache/ (run_cache), checked again once made: cache/ swapped for a link between
    the check and the mkdtemp is refused too (the folder made through it is left, never written into)."""
    cache = run_cache(run_dir)
    made = tempfile.mkdtemp(prefix=prefix, dir=cache)
    if Path(made).resolve().parent != cache or run_cache(run_dir) != cache:
        _refuse_cache(f"{cache} changed while a datasets cache was made in it ({made} is not inside the run): "
                      "launch again")
    return made


def eval_dataset(script_args, training_args, dataset_args, prompt_column: str, run_dir: Path):
    """The evaluation split when the config evaluates (eval_strategy not "no"), as `trl grpo` loads it; else None.
    In a fresh datasets cache under the run's cache/, removed once loaded, as the training split's."""
    if not evaluates(training_args):
        return None
    cache = fresh_cache(run_dir, "datasets-eval-")
    try:
        return load_eval_dataset(script_args, training_args, dataset_args, prompt_column, cache)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def trainer_kwargs(run_dir: Path, training_args, model_args, dataset) -> dict:
    """The GRPOTrainer arguments every trainer shares: the model, config, data, PEFT/quantisation and the
    progress callback (which carries the live guard, given the run as parse_config read it). With vLLM's CPU
    build, TRL's weight sync to vLLM goes through vLLM's reload (trainer/vllm_cpu.py: TRL's own fails on a CPU)."""
    make_tracker_dirs(run_dir, training_args.report_to)
    if training_args.use_vllm:
        from mcp_server.training.trainer import vllm_auth, vllm_cpu

        vllm_cpu.install(str(run_cache(run_dir) / "vllm-weights"))
        if training_args.vllm_mode == "server" and os.environ.get(vllm_auth.KEY_ENV):  # the launch's server only
            vllm_auth.install_client()
    return dict(
        model=model_args.model_name_or_path,
        processing_class=verified_processing_class(training_args),
        args=training_args,
        train_dataset=dataset,
        peft_config=get_peft_config(model_args),
        quantization_config=get_quantization_config(model_args),
        callbacks=[ProgressCallback(run_dir, spec=spec_for(run_dir, training_args))],
    )


def verified_processing_class(training_args):
    """The processing class GRPOTrainer would load from the model folder (AutoProcessor, left truncation and
    padding), loaded instead from a private copy of the folder's tokenizer, chat template, processor and config
    files made from one read of each whose pin is the one the point-of-use check verified (round 10, G1: a
    chat_template.jinja renamed in after the weights load and put back after the tokenizer read it trained unseen),
    each file created there (round 18: a file or link planted in the copy is refused, never written through), and
    its effective state after the load compared with a tokenizer loaded from the verified bytes held in memory
    (private_copy.held_load: a file planted in the copy while it loaded is refused, naming what differs).
    None (TRL loads it, as before) when the check did not run or while sampling."""
    if not trained.VERIFIED or sampling_now():
        return None
    from transformers import AutoProcessor

    from mcp_server.inspection.loaded_weights import verified_copy
    from mcp_server.inspection.private_copy import PlantedFile, held_load, tokenizer_problems

    pin = trained.VERIFIED["model"] or {}
    private = tempfile.mkdtemp(prefix="llm-finetuning-tokenizer-")
    # Kept until the process exits: a slow tokenizer reads its vocabulary file again when a checkpoint saves it.
    atexit.register(shutil.rmtree, private, ignore_errors=True)
    held: dict[str, bytes] = {}
    problem = verified_copy(trained.VERIFIED["loads"], pin.get("files_sha256"), pin.get("loads"), private, held)

    def load(folder):
        return AutoProcessor.from_pretrained(folder, truncation_side="left", padding_side="left",
                                             trust_remote_code=training_args.trust_remote_code)

    loaded = None if problem else load(private)
    try:
        problem = problem or "; ".join(tokenizer_problems(loaded, held_load(held, load)))
    except PlantedFile as exc:
        problem = str(exc)
    if problem:
        print(f"llm-finetuning: refusing to train: {problem}. Put the model's files back, then launch again.",
              file=sys.stderr, flush=True)
        raise InputsChanged(3)
    return loaded


def grpo_trainer(run_dir: Path, **kwargs):
    """The run's GRPOTrainer built with `kwargs`: TRL's own, or with train/dynamic_sampling.json the subclass that
    trains only on groups with spread (recipe/dynamic_sampling_trainer.py; the rehearsal chooses the same way), as
    parse_config read it."""
    from mcp_server.recipe.dynamic_sampling_trainer import read_settings, settings_of, trainer_class

    spec = spec_for(run_dir, kwargs.get("args"))
    settings = read_settings(run_dir) if spec is None else settings_of(spec.dynamic_sampling, run_dir)
    cls, extra = trainer_class(settings)
    return cls(**kwargs, **extra)


def confirm_resume_checkpoint(run_dir: str | Path, training_args) -> Path | None:
    """Right before TRL loads resume_from_checkpoint (train_and_save): every file of that checkpoint is the one the
    run's trainer saved, by the signed ledger (train/logs/saves.jsonl, digest.checkpoint_problems with contents).
    resume_training checks it before it launches; weights swapped in the seconds until the trainer loads them would
    otherwise train (issue 48). Refuses (exit 3) naming the file; a no-op when the point-of-use check did not pass
    a verdict (run by hand) or while sampling. Resuming with `true` checks the last checkpoint, as TRL picks it."""
    resume = getattr(training_args, "resume_from_checkpoint", None)
    if resume in (None, "", False) or not trained.VERIFIED or sampling_now():
        return None
    run = Run(Path(run_dir))
    if resume is True or str(resume).lower() == "true":
        from transformers.trainer_utils import get_last_checkpoint

        found = get_last_checkpoint(str(run.dir / str(training_args.output_dir)))
        if found is None:
            return None  # TRL itself refuses: no checkpoint to resume from
        resume = found
    folder = run.dir / str(resume)
    problems = checkpoint_problems(run, folder, contents=True)
    if problems:
        print(f"llm-finetuning: refusing to train: resume_from_checkpoint {str(resume)[:200]} is not the "
              f"checkpoint this run saved: {'; '.join(problems[:4])}. Put it back, or resume from another "
              "checkpoint.", file=sys.stderr, flush=True)
        raise InputsChanged(3)
    return folder


class ResumedWeights(TrainerCallback):
    """Once the Trainer loaded the checkpoint it resumes from (transformers' train() calls _load_from_checkpoint
    before on_train_begin), the model's tensors, or its LoRA adapter's, are the checkpoint's bytes read and hashed
    in one pass against the run's signed ledger (loaded_weights.saved_weight_problems): a model.safetensors swapped
    after confirm_resume_checkpoint hashed it and put back after the load is refused before the first step (round
    10, F2); so are optimizer.pt and scheduler.pt (resumed_state.py). Exit 3 naming the file."""

    def __init__(self, run_dir: Path, folder: Path, trainer=None):
        self.run, self.folder, self.trainer = Run(Path(run_dir)), Path(folder), trainer

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        from mcp_server.inspection.loaded_weights import saved_weight_problems
        from mcp_server.training.trainer import resumed_state as resumed

        seen = recorded_save(self.run, self.folder)
        saved = {name: entry["sha256"] for name, entry in ((seen or {}).get("files") or {}).items()}
        problems = saved_weight_problems(model, self.folder, saved) if seen else ["no record of this save"]
        if seen:  # and the optimizer's moments and the schedule's step (resumed_state.py)
            # transformers passes the optimizer and schedule it was given, None for those it built: the trainer's
            held = [kwargs.get(name) or getattr(self.trainer, name, None) for name in ("optimizer", "lr_scheduler")]
            scaler = getattr(getattr(self.trainer, "accelerator", None), "scaler", None)
            problems += resumed.resumed_state_problems(*held, self.folder, saved, scaler=scaler)
            # the TrainerState it loaded, and the RNG states it loads next (round 20, b03)
            problems += resumed.trainer_state_problems(state, self.trainer, self.folder, saved)
            rng, wrong = resumed.held_rng_states(self.folder, saved)
            problems += wrong
            if self.trainer is not None and not problems:
                self._check_rng_load(rng)
        self._refuse(problems)

    def _refuse(self, problems: list[str]) -> None:
        if problems:
            print(f"llm-finetuning: refusing to train: what was resumed from {self.folder.name} is not the "
                  f"checkpoint this run saved: {'; '.join(problems[:4])}. Put it back, or resume from another "
                  "checkpoint.", file=sys.stderr, flush=True)
            raise InputsChanged(3)

    def _check_rng_load(self, held: dict) -> None:
        """transformers' _load_rng_state (in the first epoch, after on_train_begin) reads rng_state*.pth by path:
        right after it, the RNG states it set are those of the bytes hashed here, or the run is refused."""
        trainer, load = self.trainer, self.trainer._load_rng_state

        def checked(checkpoint):
            from mcp_server.training.trainer.resumed_state import rng_matches

            load(checkpoint)
            args = trainer.args  # the file transformers picks: one per process when distributed
            name = f"rng_state_{args.process_index}.pth" if args.world_size > 1 else "rng_state.pth"
            if checkpoint is None or (name not in held and not os.path.isfile(os.path.join(checkpoint, name))):
                return
            if name not in held or not rng_matches(held[name]):
                self._refuse([f"{name}: the RNG state loaded is not the state saved (the file was replaced "
                              "during the load)"])

        trainer._load_rng_state = checked


class ReplayAgain(TrainerCallback):
    """The review replayed again (inspection.replay.again) at every logging step, on every rank alike (the step
    and logging_steps decide, the same everywhere): an input changed after the first replay stops the run there,
    exit 3, naming the reward, the sample or row and its scores (round 16, G1)."""

    def on_step_end(self, args, state, control, **kwargs):
        if control.should_log and not control.should_training_stop:  # the last step: train_and_save's replay
            replay.again(state.global_step)


def train_and_save(trainer, run_dir: Path) -> None:
    """Train (resuming when the config says so), save, and record the final save (digest.record_save: what makes
    the outcome "succeeded" believable) and the outcome on the main process."""
    confirm_loaded_model(trainer)  # the weights it loaded are the files the point-of-use check verified
    training_args = trainer.args
    resumed = confirm_resume_checkpoint(run_dir, training_args)  # the checkpoint it loads is the one the run saved
    if resumed is not None:  # and what it loaded from there is that checkpoint's bytes (round 10, F2)
        trainer.add_callback(ResumedWeights(run_dir, resumed, trainer))
    for callback in trainer.callback_handler.callbacks:  # a save's optimizer.pt and scheduler.pt: from memory
        if isinstance(callback, ProgressCallback):
            callback.trainer = trainer
    if training_args.resume_from_checkpoint not in (None, "", False):  # the config's settings over the checkpoint's,
        # first: the progress callback's train-begin record then holds the rate the schedule runs from
        trainer.callback_handler.callbacks.insert(0, ResumedSettings(trainer))
    # the folder confirmed, not `true` again: TRL's own get_last_checkpoint could pick a checkpoint-<higher> added
    # since (round 11, R1)
    if replay.AGAIN:  # what trains is what was reviewed for the whole run, not only before its first step
        trainer.add_callback(ReplayAgain())
    trainer.train(resume_from_checkpoint=str(resumed) if resumed is not None
                  else training_args.resume_from_checkpoint)
    replay.again(trainer.state.global_step)  # after the last step, before the run is recorded succeeded
    replay.again_said()
    # output_dir still inside the run before the final model and its card are written (round 12, D1); record_save
    # refuses it after too
    refuse_save_outside(Run(Path(run_dir)), Path(training_args.output_dir))
    refuse_save_through(Run(Path(run_dir)), Path(training_args.output_dir), recursive=False)  # round 20, b04b
    if any(getattr(c, "stopped_early", False) for c in trainer.callback_handler.callbacks):
        # stopped (stop_training, a signal, the guard): its checkpoint holds the weights; a model in output_dir
        # itself would look like a finished run's (walk 11: `--checkpoint RUN/checkpoints` an easy mistake)
        if trainer.accelerator.is_main_process:
            write_outcome(run_dir, "succeeded", global_step=trainer.state.global_step)  # recorded as stopped
        return
    trainer.save_model(training_args.output_dir)
    if trainer.accelerator.is_main_process:
        held = {} if sharded(training_args) else {"model": trainer.model, "tokenizer": trainer.processing_class}
        record_save(Run(Path(run_dir)), Path(training_args.output_dir), trainer.state.global_step, final=True,
                    **held)
        write_outcome(run_dir, "succeeded", global_step=trainer.state.global_step, output_dir=training_args.output_dir)

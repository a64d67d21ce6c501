"""The SFT warm start (the trainer seam's third trainer, beside the emitted GRPO templates): TRL SFTTrainer on
prompt-completion rows (the loss on the completion only), checked every few steps with a success rate the caller
measures, and stopped once that rate reaches a target: above zero so GRPO has a reward signal, far from saturated
so GRPO has room. The demo (`llm-finetuning demo`) runs it in the training worker before GRPO.

It runs in process and writes only the model it trains: it does not share the GRPO scripts' progress callback,
which writes the run's train/logs/ (a run holding training logs reads as launched, and its launch is refused).
The caller follows it through `report` (done, total, message), as every long core function reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from mcp_server.reporting import Report

# (model, tokenizer) -> the success rate in [0, 1]; the model is in eval mode while it runs
SuccessRate = Callable[[object, object], float]


@dataclass(frozen=True)
class WarmStartSettings:
    max_steps: int  # at most this many optimizer steps
    check_every: int  # measure the success rate every this many steps
    target: float  # stop once the success rate reaches this
    learning_rate: float  # constant, no warmup
    batch_size: int
    seed: int = 0


@dataclass(frozen=True)
class WarmStart:
    model_dir: Path
    steps: int  # the step of the last check (max_steps when none ran)
    success_rate: float | None  # at the last check (None: never checked)


def sft_config(out: Path, settings: WarmStartSettings):
    """TRL's SFTConfig for the warm start: float32 on CPU, no saves, no report, no bars."""
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(out), max_steps=settings.max_steps, learning_rate=settings.learning_rate,
        per_device_train_batch_size=settings.batch_size, lr_scheduler_type="constant", warmup_steps=0,
        logging_steps=10, save_strategy="no", report_to=[], use_cpu=True, seed=settings.seed, disable_tqdm=True,
        dataset_num_proc=None,
        # float32, as the GRPO phase: TRL's default bf16 autocast on CPU depends on the CPU's bf16 kernels (its
        # attention fails outright without AVX512) and would give each CPU another warm-start.
        bf16=False, **_checkpointing(SFTConfig),
    )


def _checkpointing(config_class) -> dict:
    """TRL's default (gradient checkpointing on) under the name the installed transformers reads without a
    FutureWarning: 5.25 renamed gradient_checkpointing to activation_checkpointing and warns at every start that
    sets only the old name, as TRL's default does (issue 49: the warning in every warm start's log)."""
    fields = getattr(config_class, "__dataclass_fields__", {})
    return {"activation_checkpointing": True} if "activation_checkpointing" in fields else {}


def _checking_callback(settings: WarmStartSettings, success_rate: SuccessRate, tokenizer, report: Report,
                       history: list[tuple[int, float]]):
    """A TrainerCallback: every step reported; every `check_every` steps the success rate measured (the model in
    eval mode, the tokenizer's padding side kept), and training stopped once it reaches the target."""
    from transformers import TrainerCallback

    class Check(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            report(state.global_step, settings.max_steps, "")
            if state.global_step % settings.check_every == 0:
                model.eval()
                side = tokenizer.padding_side
                rate = success_rate(model, tokenizer)
                tokenizer.padding_side = side
                model.train()
                history.append((state.global_step, rate))
                report(state.global_step, settings.max_steps, f"train success {rate:.0%}")
                if rate >= settings.target:  # enough signal for GRPO, far from saturated
                    control.should_training_stop = True
                    report(state.global_step, state.global_step, f"train success {rate:.0%}")

    return Check()


def sft_warm_start(base: Path, rows: list[dict], out: Path, settings: WarmStartSettings,
                   success_rate: SuccessRate, report: Report) -> WarmStart:
    """Train `base` on `rows` ({prompt: chat messages, solution: text}) into `out` (model and tokenizer saved)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from transformers.utils import logging as hf_logging
    from trl import SFTTrainer

    hf_logging.set_verbosity_error()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 100k-parameter model: one thread beats two (no sync cost, no spin-waiting)
    data = Dataset.from_list(
        [{"prompt": r["prompt"], "completion": [{"role": "assistant", "content": r["solution"]}]} for r in rows]
    )
    config = sft_config(out, settings)
    history: list[tuple[int, float]] = []
    tokenizer = AutoTokenizer.from_pretrained(base)
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(base), args=config, train_dataset=data,
        processing_class=tokenizer, callbacks=[_checking_callback(settings, success_rate, tokenizer, report, history)],
    )
    trainer.remove_callback(PrinterCallback)  # the caller shows the progress; no dict per log line
    trainer.train()
    trainer.save_model(str(out))
    tokenizer.save_pretrained(out)
    torch.set_num_threads(threads)
    steps, rate = history[-1] if history else (settings.max_steps, None)
    return WarmStart(model_dir=out, steps=steps, success_rate=rate)

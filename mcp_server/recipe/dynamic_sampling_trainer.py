"""DAPO's dynamic sampling (arXiv 2503.14476, sec. 3.2) in the run's trainer: a GRPOTrainer subclass that drops the
prompt groups whose rewards are all equal (zero spread: advantage 0, nothing to learn) and refills the generation
batch with groups that have spread, within a cap on extra generation rounds (train/dynamic_sampling.json, written by
emission and pinned by the verdict like every file under train/).

How it sits in TRL 1.16 (trl/trainer/grpo_trainer.py). `_prepare_inputs` calls `_generate_and_score_completions`
once per generation batch (every steps_per_generation x num_iterations micro-steps) with this process's rows
(per_device_train_batch_size x steps_per_generation, each prompt repeated num_generations times), then shuffles,
splits and buffers what it returns. Only that one call is wrapped here (OVERRIDDEN): it runs TRL's own
generation and scoring once, and again on fresh prompts while a process lacks groups with spread, at most
`max_extra_rounds` times, then hands TRL's buffering a batch of exactly the rows it expects. `_calculate_rewards`
is wrapped only to read each round's rewards (gathered over every process, as TRL normalises them).

What keeps TRL's invariants:
- Whole groups per process: each process's rows hold whole groups (refused otherwise: `check_supported`), and a
  group is kept or dropped whole. Every process sees the same gathered rewards, so every process computes the same
  keep decision for all of them and runs the same number of rounds (TRL's collectives stay in step).
- The batch size each process expects: each process keeps exactly its own groups-per-batch; when the cap is
  reached without enough spread, the rest is filled with zero-spread groups from the rounds (as TRL would have
  trained them; the kept-share metric then says so).
- Advantages, old/ref log-probs, the vLLM importance-sampling ratio: each is per row and computed by TRL in the
  round that generated the row, with the same weights (no optimizer step happens between rounds), so a kept row
  carries its own. Advantages are normalised within the group (scale_rewards 'group' or 'none'); 'batch' (one std
  over the round) and multi_objective_aggregation 'normalize_then_sum' (a round-wide mean) would make a kept row's
  advantage depend on the dropped rows, and are refused.
- num_items_in_batch (the token count the dapo/cispo/vespo losses normalise by, rescaled to one accumulation
  window in compute_loss) is recounted over the kept rows, gathered over the processes as TRL counts it, so DAPO's
  token-level mean is over the tokens that train; grpo/sapo/bnpo/luspo normalise per micro-batch and dr_grpo by
  rows x max_completion_length, none of which sees the dropped rows.
- num_iterations > 1: TRL buffers what this returns and reuses it for steps_per_generation x num_iterations
  micro-steps; the old log-probs it carries were computed with the weights that generated every round (no optimizer
  step happens between rounds), as the ratio needs.
- vLLM: the weights are pushed once per optimizer step (_last_loaded_step), so every round samples the same policy;
  server mode gathers all processes' prompts per call and every process calls the same number of times; colocate
  with sleep mode re-pushes the weights before each round (level-2 sleep discards them): a cost, not an error.

The extra prompts come from the training set, a permutation per generation batch that is the same on every process
(seeded by the run's seed and the step), split over the processes the way the trainer's sampler splits a batch.

Metrics (TRL's `self._metrics`, so they log with the step): dynamic_sampling/zero_std_raw (the zero-spread share of
the first round: what TRL alone would have trained on), dynamic_sampling/zero_std_kept (in the batch
handed to TRL's buffer, by TRL's rule for frac_reward_zero_std),
dynamic_sampling/extra_rounds and dynamic_sampling/extra_completions (the extra generation cost, all processes).
TRL's own frac_reward_zero_std and reward metrics average over every round generated.

Imported by train/train.py and the rehearsal (recipe.rehearsal_run) in the training interpreter; it sits on the
recipe floor so that the rehearsal, which validation runs, builds the class the run trains with.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch
from trl import GRPOTrainer
from trl.trainer.utils import nanstd

from mcp_server.runs import DYNAMIC_SAMPLING_FILE

# The TRL methods this extension overrides, and the ones it relies on without overriding (signatures:
# tests/test_dynamic_sampling.py checks them against the installed TRL).
OVERRIDDEN = ("_generate_and_score_completions", "_calculate_rewards")
RELIED_ON = ("_prepare_inputs",)

# Output keys TRL's _generate_and_score_completions returns for a text-only run, and how a key is padded when rows
# of several rounds are put together: (side, value); None: the pad token. Anything else (images) is refused.
LEFT, RIGHT = "left", "right"
PADDING = {
    "prompt_ids": (LEFT, None), "prompt_mask": (LEFT, 0),
    "completion_ids": (RIGHT, None), "completion_mask": (RIGHT, 0), "tool_mask": (RIGHT, 1),
    "old_per_token_logps": (RIGHT, 0.0), "ref_per_token_logps": (RIGHT, 0.0),
    "sampling_per_token_logps": (RIGHT, 0.0), "importance_sampling_ratio": (RIGHT, 0.0),
    "advantages": (RIGHT, 0.0),
}
COUNTED = "num_items_in_batch"
# What it logs beside TRL's metrics (module doc).
RAW, KEPT, EXTRA_ROUNDS, EXTRA_COMPLETIONS = METRICS = (
    "dynamic_sampling/zero_std_raw", "dynamic_sampling/zero_std_kept", "dynamic_sampling/extra_rounds",
    "dynamic_sampling/extra_completions")


def read_settings(run_dir: str | Path) -> dict | None:
    """train/dynamic_sampling.json ({"max_extra_rounds": N}), None when the run has none."""
    path = Path(run_dir) / "train" / DYNAMIC_SAMPLING_FILE
    if not path.is_file():
        return None
    return settings_of(json.loads(path.read_text(encoding="utf-8")), run_dir)


def settings_of(settings, run_dir: str | Path) -> dict | None:
    """The trainer's arguments from train/dynamic_sampling.json's value as read (None: the run has none)."""
    if settings is None:
        return None
    path = Path(run_dir) / "train" / DYNAMIC_SAMPLING_FILE
    rounds = settings.get("max_extra_rounds") if isinstance(settings, dict) else None
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise SystemExit(f"llm-finetuning: {path}: max_extra_rounds must be a positive integer, got {rounds!r}")
    return {"max_extra_rounds": rounds}


def trainer_class(settings: dict | None) -> tuple[type, dict]:
    """(the GRPOTrainer class, its extra keyword arguments) of a run with these dynamic-sampling settings
    (read_settings, or a RunSpec's dynamic_sampling; None: off): TRL's own, or this subclass. train/train.py
    (training.trainer.script_support.grpo_trainer) and the rehearsal (recipe.rehearsal_run) both build through it,
    so what validation rehearses is the class the run trains with."""
    if not settings:
        return GRPOTrainer, {}
    return DynamicSamplingGRPOTrainer, {"max_extra_rounds": settings["max_extra_rounds"]}


def unsupported(args, num_processes: int, iterable_data: bool = False) -> list[str]:
    """Why dynamic sampling cannot run with these GRPOConfig values on `num_processes` processes ([]: it can), each
    naming its field (recipe.dynamic_sampling_rules says the same before launch)."""
    problems = []
    if args.scale_rewards == "batch":
        problems.append("scale_rewards 'batch' divides by the std of the whole round, dropped groups included: use "
                        "'group' or 'none'")
    if getattr(args, "multi_objective_aggregation", "sum_then_normalize") != "sum_then_normalize":
        problems.append("multi_objective_aggregation 'normalize_then_sum' centres rewards on the whole round, "
                        "dropped groups included: use 'sum_then_normalize'")
    local = args.generation_batch_size // num_processes
    if local % args.num_generations:
        problems.append(f"per_device_train_batch_size x steps_per_generation ({local} rows per process) is not a "
                        f"multiple of num_generations ({args.num_generations}): a group would span processes")
    if iterable_data:
        problems.append("train_dataset is an IterableDataset (streaming): refill prompts are drawn by index")
    return problems


class DynamicSamplingGRPOTrainer(GRPOTrainer):
    """GRPOTrainer that trains only on groups with spread (module doc), at most `max_extra_rounds` extra generation
    rounds per generation batch."""

    def __init__(self, *args, max_extra_rounds: int, **kwargs):
        super().__init__(*args, **kwargs)
        from datasets import IterableDataset

        problems = unsupported(self.args, self.accelerator.num_processes,
                               isinstance(self.train_dataset, IterableDataset))
        if self.tools or self.environment_factories is not None:
            problems.append("tools / environment_factory: agentic runs are not supported")
        if problems:
            raise ValueError("dynamic sampling cannot run here: " + "; ".join(problems))
        self.max_extra_rounds = max_extra_rounds
        self._round_rewards: torch.Tensor | None = None

    # ------------------------------------------------------------ TRL's methods, wrapped
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._round_rewards = rewards_per_func  # every process's rows, as TRL normalises them
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        if not self.model.training:  # evaluation: TRL's, unchanged
            return super()._generate_and_score_completions(inputs)
        size = self.num_generations
        processes, rank = self.accelerator.num_processes, self.accelerator.process_index
        wanted = len(inputs) // size  # groups per process per generation batch
        kept: list[list[tuple[dict, int]]] = [[] for _ in range(processes)]  # per process: (round output, group)
        spare: list[list[tuple[dict, int]]] = [[] for _ in range(processes)]  # zero-spread groups, in order
        first_zero, batch, rounds = None, inputs, 0
        while True:
            output = super()._generate_and_score_completions(batch)
            rounds += 1
            zero = self._zero_spread(size).view(processes, wanted)
            if first_zero is None:
                first_zero = zero.float().mean().item()
            for p in range(processes):
                for g in range(wanted):
                    target = spare[p] if zero[p, g] else kept[p]
                    target.append((output if p == rank else None, g))
            if all(len(k) >= wanted for k in kept) or rounds > self.max_extra_rounds:
                break
            batch = self._refill(rounds, len(inputs))
        # each process's batch: its groups with spread, then (the cap reached) zero-spread ones to fill it
        filled = [wanted - min(len(k), wanted) for k in kept]
        merged = self._merge(kept[rank][:wanted] + spare[rank][:filled[rank]], size)
        kept_zero = sum(filled) / (processes * wanted)  # by TRL's rule for frac_reward_zero_std, every process
        metrics = self._metrics["train"]
        metrics[RAW].append(first_zero)
        metrics[KEPT].append(kept_zero)
        metrics[EXTRA_ROUNDS].append(float(rounds - 1))
        metrics[EXTRA_COMPLETIONS].append(float((rounds - 1) * self.args.generation_batch_size))
        return merged

    # ------------------------------------------------------------ the parts
    def _zero_spread(self, size: int) -> torch.Tensor:
        """Per group of the round just scored (every process's, in order): True where the rewards are all equal,
        as TRL decides it for frac_reward_zero_std (weighted sum, unscorable rows left out, isclose(std, 0)); a
        group with no scorable row counts as zero spread."""
        per_func = self._round_rewards
        weights = self.reward_weights.to(per_func.device).unsqueeze(0)
        rewards = (per_func * weights).nansum(dim=1)
        rewards[torch.isnan(per_func).all(dim=1)] = torch.nan
        std = nanstd(rewards.view(-1, size), dim=1)
        return torch.isclose(std, torch.zeros_like(std)) | torch.isnan(std)

    def _refill(self, round_number: int, local_rows: int) -> list[dict]:
        """This process's rows of the next round: fresh prompts, num_generations times each, split over the
        processes as the trainer's sampler splits a generation batch. The prompt order is a permutation of the
        training set per generation batch, the same on every process; round r reads its r-th stretch of it."""
        size, dataset = self.num_generations, self.train_dataset
        prompts = self.args.generation_batch_size // size
        order = list(range(len(dataset)))
        random.Random(f"{self.args.seed}:{self.state.global_step}:{self._step}").shuffle(order)
        start = (round_number - 1) * prompts
        picked = [order[(start + i) % len(order)] for i in range(prompts)]
        rows = [index for index in picked for _ in range(size)]
        rank = self.accelerator.process_index
        return [dataset[index] for index in rows[rank * local_rows:(rank + 1) * local_rows]]

    def _merge(self, chosen: list[tuple[dict, int]], size: int) -> dict:
        """One output of TRL's shape from the chosen groups of several rounds (each key padded on its side to the
        widest), num_items_in_batch recounted over the rows kept on every process."""
        unknown = {k for out, _ in chosen for k in out} - PADDING.keys() - {COUNTED}
        if unknown:
            raise ValueError(f"dynamic sampling cannot merge {sorted(unknown)} (multimodal runs are not supported)")
        merged = {}
        for key, (side, value) in PADDING.items():
            parts = [out[key][g * size:(g + 1) * size] for out, g in chosen if out.get(key) is not None]
            if not parts:
                continue
            if len(parts) != len(chosen):
                raise ValueError(f"dynamic sampling: '{key}' is missing from some rounds")
            merged[key] = _cat(parts, side, self.processing_class_pad_id if value is None else value)
        mask = merged["completion_mask"] * merged["tool_mask"] if "tool_mask" in merged else merged["completion_mask"]
        merged[COUNTED] = self.accelerator.gather(mask.sum()).sum()
        return merged

    @property
    def processing_class_pad_id(self) -> int:
        return self._tokenizer.pad_token_id


def _cat(parts: list[torch.Tensor], side: str, value) -> torch.Tensor:
    """The parts stacked by row, each padded on `side` with `value` to the widest second dimension."""
    if parts[0].dim() < 2:
        return torch.cat(parts)
    width = max(p.size(1) for p in parts)
    padded = []
    for part in parts:
        missing = width - part.size(1)
        if missing:
            fill = part.new_full((part.size(0), missing, *part.shape[2:]), value)
            part = torch.cat([fill, part] if side == LEFT else [part, fill], dim=1)
        padded.append(part)
    return torch.cat(padded)

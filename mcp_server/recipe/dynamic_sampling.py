"""DAPO's dynamic sampling (paper sec. 3.2) as a run option: what emission writes (train/dynamic_sampling.json, read
by the trainer's subclass, recipe/dynamic_sampling_trainer.py), what config.yaml's header says of it, and the
validation rule that refuses the settings it cannot honour, naming the field.

Decided from the paper and TRL 1.16's code (the trainer module's doc says how):
- loss_type: every TRL loss type works. grpo/bnpo/dr_grpo/sapo/luspo normalise per micro-batch; dapo/cispo/vespo
  by num_items_in_batch, which the trainer recounts over the kept rows.
- scale_rewards: 'group' (DAPO's) and 'none' (Dr.GRPO's) are per group, so a kept group's advantages do not depend on
  the dropped ones; 'batch' divides by the std of the whole round, dropped groups included: refused. For the same
  reason multi_objective_aggregation 'normalize_then_sum' is refused.
- num_iterations > 1 and steps_per_generation > gradient_accumulation_steps: the kept batch is what TRL buffers and
  reuses, with the old log-probs computed when it was generated: supported.
- vLLM colocate and server: each extra round is one more call of TRL's own generation. Weights are pushed to vLLM
  once per optimizer step (GRPOTrainer._generate: `global_step != _last_loaded_step`), so every round of a step
  samples from the same policy the old log-probs describe. Server mode gathers every process's prompts to the main
  process for each call, and every process runs the same number of rounds (same gathered rewards, same decision),
  so the collectives stay paired. Colocate with vllm_enable_sleep_mode: TRL sleeps vLLM at level 2 after every
  generate call, which discards its weights, and re-pushes them before the next (vllm_generation.py), so each
  extra round also pays a weight sync (an info finding says so). Supported; not exercised on a CPU.
- streaming data (dataset_streaming, a mixture's streaming): the refill rounds draw prompts by index: refused.
- several processes: each process's rows must hold whole groups (per_device_train_batch_size x
  steps_per_generation a multiple of num_generations), refused otherwise; every process decides from the same
  gathered rewards, so they run the same number of rounds.
- agentic runs (tools, environment): not supported (emission refuses it, the trainer and this rule too).
- memory: each round is one generation batch, as TRL's; while the next round generates, the earlier rounds' outputs
  (ids, masks, per-token log-probs) stay referenced: the memory plan adds them at the generation peak
  (memory/generation.py dynamic_sampling_held, the dynamic_sampling_rounds row). Time: generation and its scoring
  cost 1 to 1 + max_extra_rounds times TRL's per generation batch (memory/speed.py: step_s_at_cap).
- the DAPO paper oversamples until the batch holds only groups whose accuracy is neither 0 nor 1, with no cap; here
  the test is TRL's own zero-spread rule on the weighted total reward (a group all correct but with different
  overlong penalties has spread and is kept), and a cap bounds the cost (the rest filled with zero-spread groups,
  which the kept share logs). inspection/difficulty.py drops always/never-solved prompts once, before training.
"""

from __future__ import annotations

from mcp_server.errors import UserInputError
from mcp_server.recipe.context import Context, Rule, finding
from mcp_server.recipe.models import DEFAULT_EXTRA_ROUNDS, Finding, GRPORecipeRequest

FIELD = "dynamic_sampling"


def settings(request: GRPORecipeRequest, variant: str, agentic: bool) -> dict | None:
    """train/dynamic_sampling.json's content for the request (None: the run trains on TRL's batches as they come):
    as the request says, else on for DAPO's single-turn runs (DAPO's fourth technique)."""
    chosen = request.dynamic_sampling
    if chosen is None:
        return {"max_extra_rounds": DEFAULT_EXTRA_ROUNDS} if variant == "dapo" and not agentic else None
    if not chosen.enabled:
        return None
    if agentic:
        raise UserInputError(FIELD, "dynamic sampling is not supported for agentic runs (tools, environment): "
                             "leave dynamic_sampling empty or set {'enabled': false}")
    return {"max_extra_rounds": chosen.max_extra_rounds}


def header_note(chosen: dict | None, variant: str) -> str:
    """The sentence config.yaml's header says of dynamic sampling ('' when it neither runs nor is DAPO's)."""
    if chosen:
        rounds = chosen["max_extra_rounds"]
        return (f"DAPO's dynamic sampling (sec. 3.2) runs in train.py (train/dynamic_sampling.json): groups whose "
                f"rewards are all equal are dropped and the batch refilled, at most {rounds} extra generation "
                f"rounds per generation batch (generation costs 1 to {1 + rounds} times TRL's); logged as "
                "dynamic_sampling/zero_std_raw, zero_std_kept, extra_rounds and extra_completions")
    if variant == "dapo":
        return ("DAPO's dynamic sampling is off for this run (dynamic_sampling: enabled false, or an agentic run): "
                "zero-spread groups stay in each batch with advantage 0 (watch frac_reward_zero_std)")
    return ""


def local_rows(ctx: Context) -> int | None:
    """Rows per process per generation batch as TRL resolves them (None: not known)."""
    config, world = ctx.config, ctx.training_processes
    if isinstance(config.generation_batch_size, int):
        return config.generation_batch_size // world
    steps = config.steps_per_generation or config.gradient_accumulation_steps
    per_device = config.per_device_train_batch_size
    return per_device * steps if isinstance(per_device, int) and isinstance(steps, int) else None


def rule_dynamic_sampling(ctx: Context) -> list[Finding]:
    """A run with train/dynamic_sampling.json: the settings the trainer's subclass refuses, each naming its field,
    and what it costs (info)."""
    chosen = ctx.spec.dynamic_sampling
    if chosen is None:
        return []
    rounds = chosen.get("max_extra_rounds")
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        return [finding("dynamic_sampling_settings", FIELD, "error",
                        f"train/dynamic_sampling.json: max_extra_rounds must be a positive integer, got {rounds!r}",
                        "emit again with dynamic_sampling: {max_extra_rounds: N}")]
    found, config = [], ctx.config
    if ctx.agentic:
        found.append(finding("dynamic_sampling_agentic", "tools", "error",
                             "dynamic sampling is not supported for agentic runs (tools, environment)",
                             "emit again with dynamic_sampling: {enabled: false}"))
    if config.scale_rewards == "batch":
        found.append(finding("dynamic_sampling_batch_scaling", "scale_rewards", "error",
                             "scale_rewards 'batch' divides each advantage by the std of the whole generation round, "
                             "dropped groups included: the kept groups' advantages would depend on what was dropped",
                             "scale_rewards: group (DAPO's) or none (Dr.GRPO's)"))
    if config.multi_objective_aggregation == "normalize_then_sum":
        found.append(finding("dynamic_sampling_batch_scaling", "multi_objective_aggregation", "error",
                             "multi_objective_aggregation 'normalize_then_sum' centres the rewards on the whole round, "
                             "dropped groups included", "multi_objective_aggregation: sum_then_normalize"))
    rows, size = local_rows(ctx), config.num_generations
    if isinstance(rows, int) and isinstance(size, int) and size > 0 and rows % size:
        found.append(finding("dynamic_sampling_split_groups", "per_device_train_batch_size", "error",
                             f"each process's generation batch holds {rows} rows (per_device_train_batch_size x "
                             f"steps_per_generation), not a multiple of num_generations {size}: a group would span "
                             "processes and could not be kept or dropped whole",
                             f"make per_device_train_batch_size x steps_per_generation a multiple of {size}"))
    for field in ("dataset_streaming", "streaming"):  # ScriptArguments' and the datasets mixture's switch
        if getattr(config, field, False) is True:
            found.append(finding("dynamic_sampling_streaming", field, "error",
                                 f"{field}: true loads the data set as an IterableDataset: the refill rounds draw "
                                 "fresh prompts by index, which a stream has not (the trainer refuses it too)",
                                 f"{field}: false (the data set loads whole)"))
    if config.use_vllm and config.vllm_mode == "colocate" and config.vllm_enable_sleep_mode:
        found.append(finding("dynamic_sampling_sleep_mode", "vllm_enable_sleep_mode", "info",
                             "with vLLM's sleep mode each extra round pays a weight sync: TRL puts vLLM to sleep at "
                             "level 2 after every generate call, which discards its weights, and re-pushes them from "
                             "the training model before the next (trl/generation/vllm_generation.py), besides "
                             "waking the KV cache; the step's first round pays it anyway"))
    found.append(finding("dynamic_sampling_cost", FIELD, "info",
                         f"dynamic sampling: zero-spread groups are dropped and refilled with at most {rounds} extra "
                         f"generation rounds per generation batch: generation takes 1 to {1 + rounds} times as long "
                         "(the share of zero-spread groups decides: dynamic_sampling/extra_rounds logs it); the memory "
                         "plan holds the earlier rounds' rows at the generation peak (dynamic_sampling_rounds)"))
    return found


RULES = (Rule(rule_dynamic_sampling),)

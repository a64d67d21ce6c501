"""GRPO's batch arithmetic, written once, as the installed TRL 1.16 does it in GRPOConfig.__post_init__
(trl/trainer/grpo_config.py): the generation batch is per_device_train_batch_size x processes x
steps_per_generation, it must hold whole prompt groups (divisible by num_generations), and a group needs at least 2
completions. The validator's rule (recipe.rules.rule_batches) and the planner's check (memory.settings.
check_run_numbers) each say it in their own words; the arithmetic and the floor are these."""

from __future__ import annotations

# "GRPO requires at least 2 generations per prompt to calculate the advantages" (GRPOConfig.__post_init__): an
# advantage is a completion's reward against its group's mean.
MIN_GENERATIONS = 2


def generation_batch(per_device: int, processes: int, steps_per_generation: int) -> int:
    """Completions per generation round over all training processes (GRPOConfig's generation_batch_size when only
    steps_per_generation, or neither, is given)."""
    return per_device * processes * steps_per_generation


def whole_groups(generation_batch: int, num_generations: int) -> bool:
    """Whether a generation round holds whole prompt groups (GRPOConfig raises otherwise: no partial groups)."""
    return generation_batch % num_generations == 0


def training_world(num_gpus: int, vllm_server_gpus: int = 0, cpu: bool = False) -> int:
    """Training processes on a target (TRL's world_size there, the `processes` above): its GPUs less those a local
    `trl vllm-serve` holds for itself, at least one; a CPU target trains as one process."""
    return 1 if cpu else max(num_gpus - vllm_server_gpus, 1)

"""The GRPO config's cross-field arithmetic, written once: the training world size, steps per generation and the
generation batch, as TRL's GRPOConfig.__post_init__ derives them (trl/trainer/grpo_config.py, TRL 1.16):

    num_processes = self.world_size
    if generation_batch_size is None and steps_per_generation is None:
        steps_per_generation = gradient_accumulation_steps
        generation_batch_size = per_device_train_batch_size * num_processes * steps_per_generation
    elif generation_batch_size is not None and steps_per_generation is None:
        steps_per_generation = generation_batch_size // (per_device_train_batch_size * num_processes)  # divisible
    elif generation_batch_size is None and steps_per_generation is not None:
        generation_batch_size = per_device_train_batch_size * num_processes * steps_per_generation
    else: ValueError (both set)

The planner, validation and emission read these instead of multiplying the fields themselves; what TRL raises
about them (divisibility, both set) is validation's to say, with the numbers these functions give.
"""

from __future__ import annotations


def training_world(num_gpus: int, vllm_server_gpus: int = 0, cpu: bool = False) -> int:
    """Training processes on a target (TRL's world_size there): its GPUs less those a local `trl vllm-serve` holds
    for itself, at least one; a CPU target trains as one process."""
    return 1 if cpu else max(num_gpus - vllm_server_gpus, 1)


def steps_per_generation(per_device: int, world: int, gradient_accumulation_steps: int,
                         given_steps: int | None = None, given_batch: int | None = None) -> int | None:
    """Micro-steps one generation round feeds: the field, else generation_batch_size over the global batch (None
    when that is not a whole number of them), else gradient_accumulation_steps."""
    if given_steps is not None:
        return given_steps
    if given_batch is not None:
        return given_batch // (per_device * world) or None if per_device > 0 else None
    return gradient_accumulation_steps


def generation_batch(per_device: int, world: int, gradient_accumulation_steps: int,
                     given_steps: int | None = None, given_batch: int | None = None) -> int | None:
    """Completions per generation round over all processes (GRPOConfig.generation_batch_size)."""
    if given_batch is not None:
        return given_batch
    steps = steps_per_generation(per_device, world, gradient_accumulation_steps, given_steps)
    return None if steps is None else per_device * world * steps

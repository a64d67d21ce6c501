"""How many prompts each optimizer step of an emitted run trains on, in words (issue 49: the CPU rehearsal trained
one prompt a step and nothing said so).

Read from the GRPOConfig TRL itself builds from the emitted config on the target (recipe.trl_fields.grpo_batch:
generation_batch_size and steps_per_generation as TRL's __post_init__ derives them). TRL splits each generation
batch into steps_per_generation micro-batches, and an optimizer step takes gradient_accumulation_steps of them, so
a step trains on generation_batch_size / steps_per_generation x gradient_accumulation_steps completions, which are
whole prompt groups of num_generations each when TRL's own divisibility rules hold.
"""

from __future__ import annotations

from mcp_server.config import FIELD
from mcp_server.config.grpo_fields import GRPOView
from mcp_server.errors import UserInputError
from mcp_server.gpus import resolve_target
from mcp_server.recipe.context import serves_locally
from mcp_server.recipe.runspec import RunSpec
from mcp_server.recipe.trl_fields import grpo_batch, installed_trl


def step_batch(spec: RunSpec) -> str | None:
    """'each step trains on N prompts x G completions ...' for a valid emitted run, with why and what to change
    when N is 1; None when the training interpreter cannot answer (the validation says why)."""
    try:
        trl = installed_trl()
        fields = {name: meta["default"] for name, meta in trl["fields"].items()}
        view = GRPOView(spec.values, fields)
        gpu = resolve_target(spec.target.gpu)[0]
        grpo = {k: v for k, v in spec.values.items() if trl["fields"].get(k, {}).get("owner") == "GRPOConfig"}
        layout = grpo_batch(grpo, spec.target.world(serves_locally(view)), gpu.compute_capability if gpu else None)
    except (UserInputError, ValueError, TypeError, AssertionError, ImportError):
        return None
    return describe(layout, cpu=gpu is None)


def describe(layout: dict, cpu: bool) -> str:
    """The words for TRL's batch fields (grpo_batch_layout's dict)."""
    group, per_round = layout["num_generations"], layout["generation_batch_size"]
    completions = per_round // layout["steps_per_generation"] * layout["gradient_accumulation_steps"]
    prompts, part = divmod(completions, group)
    text = (f"each step trains on {prompts} prompt{'s' if prompts != 1 else ''} x {group} completions"
            if not part else f"each step trains on {completions} completions, part of a prompt's group of {group}")
    text += (f" ({completions} completions: per_device_train_batch_size {layout['per_device_train_batch_size']} x "
             f"gradient_accumulation_steps {layout['gradient_accumulation_steps']} x {layout['world_size']} "
             f"training process{'es' if layout['world_size'] != 1 else ''})")
    if per_round > completions:
        text += (f"; a generation round samples {per_round // group} prompts ({per_round} completions), trained "
                 f"over {per_round // completions} steps")
    elif per_round < completions:
        text += f"; a step samples {completions // per_round} generation rounds of {per_round // group} prompts"
    if layout["num_iterations"] > 1:
        text += f"; each round's completions are trained on {layout['num_iterations']} times (num_iterations)"
    if prompts == 1 and not part:
        why = (", what keeps a step short on a CPU, which decodes every completion token by token" if cpu else "")
        more = layout["gradient_accumulation_steps"] * 4
        text += (f". One prompt a step{why}: each update follows that one prompt's rewards (noisy). For more, raise "
                 f"gradient_accumulation_steps (--override {FIELD.gradient_accumulation_steps}={more}: 4 prompts a "
                 "step, each step about 4x as long) or per_device_train_batch_size in multiples of num_generations")
    return text

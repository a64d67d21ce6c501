"""What to change when a run does not fit: the levers that apply, what each saves, and the cheapest set that fits,
each validated through the recipe's config validator."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import json
import math
from pathlib import Path
from collections.abc import Iterable
from typing import Any, NamedTuple

from mcp_server.errors import UserInputError
from mcp_server.evidence import samples_not_vouched
from mcp_server.memory.breakdown import COLOCATED_VLLM_FIELDS, Breakdown, Fit, FitCache
from mcp_server.memory.components import (colocated_vllm, colocated_vllm_weight_bytes, one_sequence_kv_bytes,
                                           vllm_max_model_len)
from mcp_server.memory.constants import EIGHT_BIT_OPTIMS, GIB, TIGHT_FRACTION, VLLM_RUNTIME_GIB
from mcp_server.memory.models import Lever, LeverSet, Validation
from mcp_server.memory.params import Architecture, ParamCount
from mcp_server.memory.settings import RunSettings, Target, has_liger_grpo_loss, liger_field, read_config
from mcp_server.model_ref import is_moe as detect_moe
from mcp_server.config import FIELD, GRPOView, key_for
from mcp_server.config import target as run_target
from mcp_server.recipe.precision import weights_dtype
from mcp_server.recipe.models import default_rewards as recipe_default_rewards
from mcp_server.recipe.scoped import one_scope
from mcp_server.recipe.runspec import RunSpec
from mcp_server.recipe.validate import validate_spec
from mcp_server.runs import Run

# How much a lever changes the run (speed, quality, setup). The recommended set is the one of least total cost
# that fits: three free switches beat QLoRA. Ties go to fewer levers, then to the lower peak.
LEVER_COST = {
    "bf16_weights": 1, "vllm_sleep_mode": 1, "adamw_8bit": 1, "chunked_loss": 1, "right_size_vllm_memory": 1,
    "short_vllm_context": 1,
    FIELD.gradient_checkpointing: 2, "vllm_tensor_parallel": 2, "smaller_micro_batch": 2, "beta_zero": 3, "zero3": 3,
    "vllm_server_mode": 3, "cpu_offload_optimizer": 4, "no_vllm": 4, "lora": 5, "shorter_completions": 6,
    "qlora": 7,
}
# levers that cannot go together: two ways of fine-tuning, or two layouts of vLLM
_EXCLUSIVE = ({"lora", "qlora"}, {"vllm_sleep_mode", "vllm_server_mode"}, {"no_vllm", "vllm_sleep_mode"},
              {"zero3", "cpu_offload_optimizer"})
_VLLM_LAYOUTS = {"right_size_vllm_memory", "vllm_tensor_parallel", "vllm_server_mode", "no_vllm"}
_MAX_SET_SIZE = 6


def just_enough_vllm(arch: Architecture, params: ParamCount, settings: RunSettings, capacity_gib: float,
                     tp: int = 1, sequences: int | None = None) -> float:
    """vllm_gpu_memory_utilization that holds the weights + runtime + 1 GiB + the KV cache of `sequences` at once
    (default: the whole generation round's)."""
    sequences = sequences or settings.per_device_train_batch_size * settings.spg
    kv_need = max(sequences * settings.seq_len * 2 * arch.num_hidden_layers * arch.kv_dim * 2,
                  one_sequence_kv_bytes(arch, settings.updated({FIELD.vllm_tensor_parallel_size: 1})))
    weights = colocated_vllm_weight_bytes(params, settings.updated({FIELD.vllm_tensor_parallel_size: tp}))
    need = (weights + (VLLM_RUNTIME_GIB + 1) * GIB + kv_need / tp) / (capacity_gib * GIB)
    return min(0.95, math.ceil(need * 100) / 100)


def vllm_share_that_fits(arch: Architecture, params: ParamCount, settings: RunSettings, target: Target,
                         breakdown: Breakdown) -> float:
    """The colocated vLLM share for this GPU: the whole round's KV cache when that leaves 10% headroom, else the
    largest share that does (vLLM batches the round through a smaller cache, slower), never below one group's KV
    cache (num_generations sequences)."""
    tp = settings.vllm_tensor_parallel_size
    full = just_enough_vllm(arch, params, settings, target.capacity_gib, tp)
    floor = just_enough_vllm(arch, params, settings, target.capacity_gib, tp, sequences=settings.num_generations)
    now = colocated_vllm(params, settings, target, arch).total / GIB
    # the generation phase holds the trainer's state and the whole vLLM share: the room left for the share
    room = target.capacity_gib * (1 - TIGHT_FRACTION) - (breakdown.generation_peak - now)
    fitting = math.floor(room / target.capacity_gib * 100) / 100
    return full if fitting >= full else max(floor, min(fitting, full))


class Inspected(NamedTuple):
    """What the run's inspection samples say about completion lengths."""

    samples: int
    longest: int  # completion tokens of the longest sample
    truncated: int  # samples cut at max_new_tokens


def inspected_completion_length(run_dir: Path | None) -> tuple[Inspected | None, str | None]:
    """(the completion lengths of the run's inspection samples, inspection/samples.jsonl, when there are any; why
    they are not read). Only samples the sampler signed are read (evidence.samples_not_vouched, on the bytes read
    here): completions written or edited by hand would otherwise shorten max_completion_length (the
    shorter_completions lever) on lengths no model produced."""
    if run_dir is None:
        return None, None
    run = Run(run_dir)
    if not run.samples.is_file():
        return None, None
    try:
        data = run.samples.read_bytes()
    except OSError:
        data = None
    if why := samples_not_vouched(run, data):
        return None, f"shorter_completions not offered: {why}"
    samples = longest = truncated = 0
    try:
        for line in data.decode("utf-8").split("\n"):
            if not line.strip():
                continue
            record = json.loads(line)
            samples += 1
            longest = max(longest, len(record.get("completion_ids") or []))
            truncated += bool(record.get("truncated"))
    except (ValueError, AttributeError):
        return None, None
    return (Inspected(samples, longest, truncated) if samples else None), None


def shorter_completion_length(settings: RunSettings, inspected: Inspected | None) -> int | None:
    """A max_completion_length the inspection allows: none truncated, the longest sample + 25%, in steps of 64."""
    if inspected is None or inspected.truncated or inspected.longest <= 0:
        return None
    length = math.ceil(inspected.longest * 1.25 / 64) * 64
    return length if length < settings.max_completion_length else None


def candidate_levers(arch: Architecture, params: ParamCount, settings: RunSettings, target: Target,
                     breakdown: Breakdown, inspected: Inspected | None = None) -> list[tuple[str, str, dict]]:
    """(name, description, config patch) of every lever that applies to this run, in a fixed order (the search
    breaks ties by it): the colocated vLLM's, then the training state's, then where the work runs."""
    return [*_vllm_levers(arch, params, settings, target, breakdown), *_training_levers(settings, target),
            *_placement_levers(settings, target, inspected)]


def _vllm_levers(arch: Architecture, params: ParamCount, settings: RunSettings, target: Target,
                 breakdown: Breakdown) -> list[tuple[str, str, dict]]:
    """Generate without vLLM, or shrink the colocated vLLM: sleep mode, its context, its share, its sharding."""
    out: list[tuple[str, str, dict]] = []
    if settings.use_vllm:
        out.append(("no_vllm", "Generate with transformers instead of vLLM (use_vllm: false): no vLLM weights or "
                    "KV cache on the GPU, several times slower rollouts.", {FIELD.use_vllm: False}))
    if settings.colocated_vllm and not settings.vllm_enable_sleep_mode:
        out.append(("vllm_sleep_mode", "vLLM releases its weights and KV cache while the policy trains "
                    "(a few seconds per step to wake up).", {FIELD.vllm_enable_sleep_mode: True}))
    short = vllm_max_model_len(arch, settings) > settings.seq_len
    if settings.colocated_vllm and short:
        # TRL starts vLLM with max_model_len = vllm_max_model_length, else the model's whole context, and vLLM wants
        # KV cache for one sequence of it before it starts
        out.append(("short_vllm_context", f"vllm_max_model_length {settings.seq_len} (prompt {settings.prompt_length} "
                    f"+ completion {settings.max_completion_length} tokens) instead of "
                    f"{vllm_max_model_len(arch, settings)}: vLLM starts only when its KV cache holds one sequence of "
                    "its context. TRL does not truncate prompts: a longer prompt than planned is refused by vLLM.",
                    {FIELD.vllm_max_model_length: settings.seq_len}))
    if settings.colocated_vllm:
        # just enough vLLM memory for its weights and this run's KV cache: less when it hoards, more when its
        # weights do not even fit its share
        # sized for the run's own context when short_vllm_context is offered (the two go together)
        sized = settings.updated({FIELD.vllm_max_model_length: settings.seq_len}) if short else settings
        util = vllm_share_that_fits(arch, params, sized, target, breakdown)
        full = just_enough_vllm(arch, params, sized, target.capacity_gib, settings.vllm_tensor_parallel_size)
        if abs(util - settings.vllm_gpu_memory_utilization) >= 0.02:
            kv = ("one generation round's KV cache" if util >= full else
                  "a KV cache for part of the round (vLLM batches the rest through it: slower rollouts)")
            patch = {FIELD.vllm_gpu_memory_utilization: util}
            if short:  # the share is sized for the run's own context, so it sets it too
                patch[FIELD.vllm_max_model_length] = settings.seq_len
            out.append(("right_size_vllm_memory", f"Give vLLM {util:.2f} of each GPU (now "
                        f"{settings.vllm_gpu_memory_utilization:g}): its weights, runtime and {kv}"
                        + (f", with vllm_max_model_length {settings.seq_len} (prompt + completion)" if short else "")
                        + ".", patch))
        training_gpus = breakdown.training_gpus
        if training_gpus >= 2 and settings.vllm_tensor_parallel_size < training_gpus:
            sizes = [t for t in (2, 4, 8, 16, 32, 64)
                     if t > settings.vllm_tensor_parallel_size and training_gpus % t == 0]
            fitting = [t for t in sizes if params.total * 2 / t <= 0.25 * target.capacity_gib * GIB]
            if sizes:
                tp = fitting[0] if fitting else sizes[-1]
                util_tp = just_enough_vllm(arch, params, settings, target.capacity_gib, tp)
                out.append(("vllm_tensor_parallel", f"Shard the colocated vLLM over {tp} GPUs: each holds 1/{tp} of "
                            "its weights and KV cache.", {FIELD.vllm_tensor_parallel_size: tp,
                                                           FIELD.vllm_gpu_memory_utilization: util_tp}))
    return out


def _training_levers(settings: RunSettings, target: Target) -> list[tuple[str, str, dict]]:
    """Smaller training state: bf16 frozen weights, 8-bit optimizer, checkpointing, chunked loss, no reference,
    LoRA or QLoRA."""
    out: list[tuple[str, str, dict]] = []
    # recipe.precision: bf16 weights only under LoRA/QLoRA (a full fine-tune's AdamW steps round away in bf16)
    if settings.dtype == "float32" and weights_dtype(settings.finetune, bf16=True) == "bfloat16" \
            and not (target.gpu and not target.gpu.bf16):
        out.append(("bf16_weights", "Load the frozen base in bfloat16 (TRL loads float32 by default): halves its "
                    "memory; the adapters stay float32.", {FIELD.dtype: "bfloat16"}))
    if settings.optim.lower() not in EIGHT_BIT_OPTIMS and not settings.optim.lower().startswith(("sgd", "adafactor")):
        out.append(("adamw_8bit", "8-bit AdamW (bitsandbytes): optimizer state from 8 (or 16) to 2 bytes per "
                    "trained parameter; quality is on par.", {FIELD.optim: "adamw_8bit"}))
    if not settings.gradient_checkpointing:
        out.append(("gradient_checkpointing", "Keep only layer inputs and recompute in backward (~30% slower "
                    "training step).", {key_for(settings.config, FIELD.gradient_checkpointing): True}))
    if not (settings.fused_logits or settings.use_liger_kernel) and has_liger_grpo_loss(settings):
        out.append(("chunked_loss", "Liger's chunked GRPO loss: never materialize batch x length x vocab logits.",
                    {liger_field(settings): True}))
    if settings.beta != 0 and not settings.peft:
        out.append(("beta_zero", "beta=0 (TRL's default): no reference model in memory; no KL term.",
                    {FIELD.beta: 0.0}))
    if settings.finetune == "full":
        out.append(("lora", "LoRA r=16 on all linear layers: no full gradients or optimizer state, reference "
                    "by disabling adapters.", {FIELD.use_peft: True, FIELD.lora_r: 16, FIELD.lora_alpha: 32,
                                               FIELD.lora_target_modules: "all-linear"}))
    if settings.finetune != "qlora":
        out.append(("qlora", "QLoRA: 4-bit NF4 base + LoRA r=16 (slower, slightly lossy base; a colocated vLLM "
                    "is started 4-bit too, a vLLM server is not).",
                    {FIELD.use_peft: True, FIELD.load_in_4bit: True, FIELD.lora_r: 16, FIELD.lora_alpha: 32,
                     FIELD.lora_target_modules: "all-linear"}))
    return out


def _placement_levers(settings: RunSettings, target: Target,
                      inspected: Inspected | None) -> list[tuple[str, str, dict]]:
    """Where the work runs and how much of it at once: vLLM on its own GPU, smaller micro-batches, shorter
    completions (when the inspection allows), the optimizer on the CPU, ZeRO-3 sharding."""
    out: list[tuple[str, str, dict]] = []
    if settings.colocated_vllm and target.num_gpus >= 2:
        out.append(("vllm_server_mode", "Move vLLM to its own GPU (`trl vllm-serve`); the others train.",
                    {FIELD.vllm_mode: "server"}))
    if settings.per_device_train_batch_size > 1 and settings.per_device_train_batch_size % 2 == 0:
        # same generation batch (per device x GPUs x steps_per_generation), so the same num_generations groups
        patch = {FIELD.per_device_train_batch_size: settings.per_device_train_batch_size // 2,
                 FIELD.gradient_accumulation_steps: settings.gradient_accumulation_steps * 2}
        if settings.steps_per_generation:
            patch[FIELD.steps_per_generation] = settings.steps_per_generation * 2
        out.append(("smaller_micro_batch", "Half the completions per micro-step, twice the accumulation: the same "
                    f"generation batch and groups of num_generations={settings.num_generations}, smaller "
                    "activations and logits.", patch))
    shorter = shorter_completion_length(settings, inspected)
    if shorter is not None and inspected is not None:
        out.append(("shorter_completions", f"max_completion_length {settings.max_completion_length} -> {shorter}: "
                    f"none of the {inspected.samples} inspection samples was truncated and the longest is "
                    f"{inspected.longest} tokens.", {FIELD.max_completion_length: shorter}))
    if target.gpu is not None and not settings.fsdp and not settings.offload_optimizer:
        stage = max(settings.zero_stage, 2)
        out.append(("cpu_offload_optimizer", f"DeepSpeed ZeRO-{stage} with the optimizer state (and fp32 master "
                    "weights) in CPU memory: needs deepspeed and ~12 bytes of host RAM per trained parameter; "
                    "optimizer steps run on the CPU (slower).",
                    {FIELD.deepspeed: {"zero_optimization": {"stage": stage, "offload_optimizer": {"device": "cpu",
                                                                                              "pin_memory": True}},
                                   "bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto",
                                   "gradient_accumulation_steps": "auto"}}))
    if target.num_gpus >= 2 and settings.zero_stage != 3 and not settings.fsdp:
        out.append(("zero3", "DeepSpeed ZeRO-3: shard weights, gradients and optimizer state over the GPUs.",
                    {FIELD.deepspeed: {"zero_optimization": {"stage": 3}, "bf16": {"enabled": "auto"},
                                       "train_micro_batch_size_per_gpu": "auto",
                                       "gradient_accumulation_steps": "auto"}}))
    return out


class LeverValidator:
    """Validates the run's config with a lever's patch merged, through the recipe validator.

    A lever is judged on the errors it adds: errors the run's config already has are reported once in the notes.
    """

    def __init__(self, config: dict[str, Any], rewards: list | None, target: Target, enabled: bool,
                 world: run_target.Target | None = None):
        """`world`: the run's own target (its vLLM server's GPUs, pooled over its nodes): a lever's patch is
        validated on the world the run trains in, with the planned GPUs."""
        self.config, self.rewards, self.target, self.enabled = config, rewards, target, enabled
        self.world = world or run_target.Target()
        self.validate = None
        self.base_errors: set[str] = set()
        self.notes: list[str] = []
        self.checked: dict[str, Validation] = {}  # by patch: the recommended set is often one lever's patch
        self.lookups: dict = {}  # the model's template and the rewards, looked up once for all the checks
        if not enabled:
            return
        self.validate = validate_spec
        # the model's files do not change with a lever's patch: whether it is a mixture of experts is read once
        model = config.get(FIELD.model_name_or_path)
        self.is_moe = detect_moe(str(model)) if model else None
        self.base_errors = set(self._errors({}) or [])

    def _errors(self, patch: dict[str, Any]) -> list[str] | None:
        if self.validate is None:
            return None
        gpu = self.target.gpu.name if self.target.gpu else "H100"
        values = {**self.config, **patch}
        if GRPOView.given(values).deepspeed and importlib.util.find_spec("deepspeed") is None:
            # transformers cannot even parse a DeepSpeed config without the package: checked without it
            values.pop(FIELD.deepspeed)
            note = ("deepspeed is not installed here: levers that set a DeepSpeed config were validated without "
                    "it (pip install deepspeed on the training machine)")
            if note not in self.notes:
                self.notes.append(note)
        try:
            with one_scope(self.lookups):
                world = dataclasses.replace(self.world, gpu=gpu, num_gpus=self.target.num_gpus)
                result = self.validate(RunSpec(values=values, target=world, rewards=self.rewards, is_moe=self.is_moe))
        except UserInputError as exc:
            return [str(exc)]
        except (ImportError, importlib.metadata.PackageNotFoundError) as exc:  # an optional package is missing
            self.notes.append(f"a lever could not be validated here: {exc}")  # (check() keeps this text)
            return []
        return [f"{f.code}: {f.message}" for f in result.findings if f.severity == "error"]

    def check(self, patch: dict[str, Any]) -> Validation | None:
        if not self.enabled:
            return None
        key = json.dumps(patch, sort_keys=True, default=str)
        if key in self.checked:
            return _copy(self.checked[key])
        notes = len(self.notes)
        errors = self._errors(patch)
        if errors is None:
            return Validation(valid=None, errors=["validator not available (mcp_server.recipe.validate)"])
        new = [e for e in errors if e not in self.base_errors]
        validation = Validation(valid=not new, errors=new)
        if not any(note.startswith("a lever could not be validated") for note in self.notes[notes:]):
            self.checked[key] = validation  # (a failed import is noted at each check, as before)
        return _copy(validation)


def _copy(validation: Validation) -> Validation:
    """A deep copy of a validation (a new errors list) without pydantic's generic deepcopy: a dozen a plan."""
    return Validation(valid=validation.valid, errors=list(validation.errors))


def default_rewards() -> list:
    return recipe_default_rewards()


def config_for_validation(config: dict[str, Any], model: str, settings: RunSettings) -> dict[str, Any]:
    """A config to validate levers against: the run's own config, or one built from the plan's settings."""
    if config:
        return dict(config)
    base = {
        FIELD.model_name_or_path: model, FIELD.output_dir: "checkpoints", FIELD.bf16: True,
        FIELD.per_device_train_batch_size: settings.per_device_train_batch_size,
        FIELD.gradient_accumulation_steps: settings.gradient_accumulation_steps,
        FIELD.num_generations: settings.num_generations,
        FIELD.max_completion_length: settings.max_completion_length, FIELD.beta: settings.beta,
        FIELD.optim: settings.optim, FIELD.gradient_checkpointing: settings.gradient_checkpointing,
        FIELD.use_vllm: settings.use_vllm,
    }
    if settings.use_vllm:
        base.update(vllm_mode=settings.vllm_mode, vllm_gpu_memory_utilization=settings.vllm_gpu_memory_utilization,
                    vllm_enable_sleep_mode=settings.vllm_enable_sleep_mode)
    if settings.peft:
        base.update(use_peft=True, lora_r=settings.lora_r, lora_target_modules=settings.lora_target_modules)
        if settings.finetune == "qlora":
            base[FIELD.load_in_4bit] = True
    return base


def _compatible(combo: tuple[str, ...]) -> bool:
    return not any(pair <= set(combo) for pair in _EXCLUSIVE) and len(_VLLM_LAYOUTS.intersection(combo)) <= 1


def compatible_sets(names: list[str], max_size: int) -> list[tuple[str, ...]]:
    """The sets of `names` that _compatible accepts, up to max_size, in itertools.combinations order (by size, then
    by position). Both of its rules are about pairs, so a set is extended only by names that clash with none of its
    own: the sets that clash are never built."""
    clash = {a: {b for b in names if b != a and not _compatible((a, b))} for a in names}
    out: list[tuple[str, ...]] = []

    def extend(combo: tuple[str, ...], start: int) -> None:
        for i in range(start, len(names)):
            if not clash[names[i]].intersection(combo):
                out.append(combo + (names[i],))
                if len(combo) + 1 < max_size:
                    extend(out[-1], i + 1)

    extend((), 0)
    out.sort(key=len)  # each size's sets come in position order already
    return out


def merged_patch(patches: dict[str, dict[str, Any]], names: Iterable[str]) -> dict[str, Any]:
    """The named levers' patches merged in the set's order (a later lever's value wins), as the set applies them."""
    merged: dict[str, Any] = {}
    for name in names:
        merged.update(patches[name])
    return merged


class VllmFloors:
    """FitCache.floor for each lever set, computed once per set of the levers that move the colocated vLLM's share
    (a set's other levers never set a field the floor reads, so they cannot change it): a set whose floor is over the
    limit, or whose vLLM cannot start, fails without a breakdown. On a GPU too small for a colocated vLLM that is
    nearly every set that keeps it."""

    def __init__(self, fits: FitCache, patches: dict[str, dict[str, Any]]):
        self.fits, self.patches = fits, patches  # each lever's patch, by name
        # load_in_4bit turns another lever's use_peft into QLoRA (settings.read_config): a lever that sets it counts too
        self.moving = {name for name, patch in patches.items() if FIELD.load_in_4bit in patch
                       or not COLOCATED_VLLM_FIELDS.isdisjoint(read_config(patch))}
        self.floors: dict[tuple[str, ...], Fit] = {}

    def of(self, combo: tuple[str, ...]) -> Fit:
        key = tuple(name for name in combo if name in self.moving)
        floor = self.floors.get(key)
        if floor is None:
            floor = self.floors[key] = self.fits.floor(merged_patch(self.patches, key))
        return floor


def rank_levers(arch: Architecture, params: ParamCount, settings: RunSettings, target: Target, breakdown: Breakdown,
                validator: LeverValidator, inspected: Inspected | None = None,
                unlaid: RunSettings | None = None) -> tuple[list[Lever], LeverSet | None]:
    """The levers that save memory (or repair a broken layout), most saved first, and the cheapest set that fits.

    Each lever and set is costed as the planner plans the run's config with its patch (FitCache): read into the
    settings before the layout was chosen (`unlaid`; the chosen settings when not given), its numbers checked and
    its sharding chosen again, so a lever reports what plan_memory answers for the patched config. A lever whose
    patched config the planner refuses (a generation batch that no longer holds whole groups) is not offered."""
    capacity = target.capacity_gib
    levers: list[Lever] = []
    costs = dict(LEVER_COST)
    tried: dict[tuple[str, ...], tuple[Fit, dict]] = {}  # each set's fit and patch, for all the passes
    fits = FitCache(arch, params, unlaid or settings, target)  # sets whose patches merge alike share one fit
    for name, description, patch in candidate_levers(arch, params, settings, target, breakdown, inspected):
        alone = fits.fit(patch)
        if alone.refused:
            continue
        tried[(name,)] = alone, dict(patch)  # the set of this lever alone: the same settings, the same fit
        lever = Lever(name=name, description=description, patch=patch, saves_gib=round(breakdown.peak - alone.peak, 2),
                      peak_gib=round(alone.peak, 2), fits_alone=alone.peak <= capacity and not alone.problems)
        # keep what saves memory, and what repairs a broken layout (e.g. a vLLM share too small for its weights)
        if lever.saves_gib > 0.005 or len(alone.problems) < len(breakdown.problems):
            levers.append(lever)
    levers.sort(key=lambda lv: -lv.saves_gib)

    best: tuple | None = None
    patches = {lv.name: lv.patch for lv in levers}
    # Every compatible set, cheapest first (a stable sort keeps the first-found order among equals): the first
    # cost that fits ends the search, so most sets need no breakdown. Keeping vLLM comes first (dropping it makes
    # every rollout several times slower), then 10% headroom: a tight fit with vLLM beats a roomy one without it.
    floors = VllmFloors(fits, patches)
    combos = [(sum(costs[n] for n in combo), len(combo), combo, "no_vllm" in combo, floors.of(combo))
              for combo in compatible_sets([lv.name for lv in levers], _MAX_SET_SIZE)]
    combos.sort(key=lambda entry: entry[:2])
    for keep_vllm, want_margin in ((True, True), (True, False), (False, True), (False, False)):
        limit = capacity * (1 - TIGHT_FRACTION) if want_margin else capacity
        for cost, size, combo, drops_vllm, floor in combos:
            if keep_vllm and drops_vllm:
                continue
            if best is not None and (cost, size) > best[0][:2]:
                break  # no later set can beat the best found
            if floor.problems or floor.peak > limit:
                continue  # its colocated vLLM alone does not fit or cannot start: no breakdown needed
            if combo not in tried:
                patch = merged_patch(patches, combo)
                tried[combo] = fits.fit(patch), patch
            together, patch = tried[combo]
            if together.peak <= limit and not together.problems:
                key = (cost, size, together.peak)
                if best is None or key < best[0]:
                    best = (key, combo, patch, together.peak)
        if best:
            break
    recommended = None
    if best:
        _, combo, patch, peak = best
        recommended = LeverSet(levers=list(combo), patch=patch, peak_gib=round(peak, 2),
                               headroom_gib=round(capacity - peak, 2), validation=validator.check(patch))
    for lever in levers:
        lever.validation = validator.check(lever.patch)
    return levers, recommended

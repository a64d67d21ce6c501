"""Rules for configs TRL accepts that crash when the trainer starts or train without effect: each checked against
TRL 1.16's GRPOTrainer (trl/trainer/grpo_trainer.py) and sampler (trl/trainer/utils.py, RepeatSampler).

The topic "trainer start-up and training effect" (recipe.registry places it): each rule takes the Context and
returns findings; RULES is their order.
"""

from __future__ import annotations

from pathlib import Path

from mcp_server.config import FIELD, batches
from mcp_server.dataset import read_file
from mcp_server.errors import UserInputError
from mcp_server.recipe.models import Finding
from mcp_server.generation import plain_prompts_warning
from mcp_server.model_ref import shown_name
from mcp_server.recipe.context import Context, Rule, finding
from mcp_server.recipe.thinking import COMPLETION_LENGTH, has_chat_template, is_hybrid_thinking

# Below this sampling temperature the completions of a group are nearly identical: every reward in the group is the
# same, the group std is 0 and GRPO's advantage is 0 (DAPO's paper and TRL's default sample at 1.0).
LOW_TEMPERATURE = 0.5
# With mask_truncated_completions, a completion budget this short masks almost every completion out of the loss.
SHORT_MASKED_LENGTH = 128
# A thinking budget below this cuts most reasoning traces (the recipe's thinking budget is COMPLETION_LENGTH[True]).
THINKING_FLOOR = 2048
# epsilon above this leaves the lower clip bound 1 - epsilon near 0: almost no trust region on negative advantages.
LOOSE_EPSILON = 0.5
# Sequence-level ratios with a loss that sums tokens: TRL 1.16 warns when the trainer starts (grpo_trainer.py).
TOKEN_SUMMING_LOSSES = ("bnpo", "dr_grpo", "dapo", "cispo")
# Local data files counted for the zero-step rule up to this size (a larger one is read by the trainer anyway).
COUNT_LIMIT_BYTES = 64 * 2**20


def steps_per_generation(ctx: Context) -> int | None:
    """steps_per_generation as GRPOConfig resolves it: the field, else generation_batch_size / global batch, else
    gradient_accumulation_steps."""
    spg, gbs = ctx.given.steps_per_generation, ctx.given.generation_batch_size
    per_device, ga = ctx.config.per_device_train_batch_size, ctx.config.gradient_accumulation_steps
    if isinstance(spg, int):
        return spg
    if isinstance(gbs, int) and isinstance(per_device, int) and per_device > 0:
        return gbs // (per_device * ctx.training_processes) or None
    return ga if isinstance(ga, int) else None


def generation_batch(ctx: Context) -> int | None:
    """Completions per generation round over all processes (GRPOConfig.generation_batch_size)."""
    gbs = ctx.given.generation_batch_size
    if isinstance(gbs, int):
        return gbs
    per_device, spg = ctx.config.per_device_train_batch_size, steps_per_generation(ctx)
    if isinstance(per_device, int) and isinstance(spg, int):
        return batches.generation_batch(per_device, ctx.training_processes, spg)
    return None


def on_policy(ctx: Context) -> bool | None:
    """TRL 1.16 (grpo_trainer.py, _generate_and_score_completions): with generate_every = steps_per_generation x
    num_iterations dividing gradient_accumulation_steps every micro-batch is scored by the weights that sampled it:
    old_per_token_logps is per_token_logps.detach() (or recomputed by the same weights for vLLM's importance-sampling
    correction) and the importance ratio is 1."""
    spg, iterations, ga = steps_per_generation(ctx), ctx.config.num_iterations, ctx.config.gradient_accumulation_steps
    if not all(isinstance(v, int) and v > 0 for v in (spg, iterations, ga)):
        return None
    return ga % (spg * iterations) == 0


def rule_model(ctx: Context) -> list[Finding]:
    """No model, or a local path the trainer cannot load (no config.json)."""
    model = ctx.given.model_name_or_path
    if not model:
        return [finding("no_model", FIELD.model_name_or_path, "error", "no model_name_or_path.",
                        "set model_name_or_path to a hub name or a local model directory")]
    path = Path(str(model)).expanduser()
    if str(model).startswith((".", "/", "~")) and not (path / "config.json").is_file():
        return [finding("model_not_found", FIELD.model_name_or_path, "error",
                        f"'{model}' is not a local model directory (no config.json).",
                        "give an existing directory saved with save_pretrained, or a hub name")]
    return []



def rule_sync_ref_model(ctx: Context) -> list[Finding]:
    if not ctx.config.sync_ref_model:
        return []
    if ctx.config.use_peft:
        return [finding("sync_ref_model_with_peft", FIELD.sync_ref_model, "error",
                        "sync_ref_model=true with PEFT: GRPOTrainer raises NotImplementedError when it starts (under "
                        "PEFT the reference is the base with the adapter disabled; there is no reference model to "
                        "sync).", "set sync_ref_model: false, or train a full fine-tune")]
    if ctx.config.beta == 0:
        return [finding("sync_ref_model_without_beta", FIELD.sync_ref_model, "error",
                        "sync_ref_model=true with beta=0: GRPOTrainer raises ValueError when it starts (no reference "
                        "model is created, so there is nothing to sync).", "set sync_ref_model: false, or beta > 0")]
    return []


def rule_clip_structure(ctx: Context) -> list[Finding]:
    """Clip settings that cannot act: on-policy the ratio is 1; a loose epsilon or a low delta undo the clip."""
    out = []
    defaults = {k: (ctx.trl["fields"].get(k) or {}).get("default") for k in ("epsilon", "epsilon_high", "delta")}
    clip_keys = [k for k in defaults if ctx.values.get(k) is not None and ctx.values[k] != defaults[k]]
    loss = ctx.config.loss_type
    if loss == "cispo":  # epsilon_high is CISPO's weight cap, which acts on-policy too (rule_cispo_cap)
        clip_keys = [k for k in clip_keys if k not in ("epsilon_high", "epsilon")]
    if clip_keys and on_policy(ctx) and loss not in ("sapo", "vespo"):
        out.append(finding(
            "clip_on_policy", clip_keys[-1] if "epsilon_high" not in clip_keys else "epsilon_high", "warning",
            f"{', '.join(clip_keys)} set, but each generation batch feeds one optimizer step (steps_per_generation "
            f"{steps_per_generation(ctx)} x num_iterations {ctx.config.num_iterations} divides "
            f"gradient_accumulation_steps {ctx.config.gradient_accumulation_steps}): every update is on-policy, the "
            "importance ratio is 1 (exactly, or up to dropout noise where TRL recomputes the old log-probs for "
            "vLLM's importance-sampling correction) and no clip bound is reached, so the setting has no effect.",
            "go off-policy so the clip acts: steps_per_generation = k x gradient_accumulation_steps (k mini-batches "
            "per rollout; DAPO: 16, GSPO: 4), or num_iterations > 1; or drop the clip settings"))
    eps = ctx.config.epsilon
    if isinstance(eps, (int, float)) and eps > LOOSE_EPSILON and on_policy(ctx) is False:
        out.append(finding(
            "epsilon_too_loose", FIELD.epsilon, "warning",
            f"epsilon={eps:g} off-policy: the lower clip bound 1 - epsilon = {1 - eps:.2g} leaves negative-advantage "
            "tokens almost unclipped, so reused samples can push their probability to zero in a few updates.",
            "keep epsilon near 0.2 (PPO, GRPO and DAPO's lower bound); widen only epsilon_high"))
    delta, high = ctx.config.delta, ctx.config.epsilon_high
    high = high if isinstance(high, (int, float)) else eps
    if (isinstance(delta, (int, float)) and isinstance(high, (int, float)) and loss != "cispo"
            and delta <= 1 + high):
        out.append(finding(
            "delta_below_clip", FIELD.delta, "warning",
            f"delta={delta:g} is not above 1 + epsilon_high = {1 + high:g}: TRL clamps the ratio at delta before the "
            "clip (grpo_trainer.py, two-sided clipping), so delta replaces the upper clip bound for positive "
            "advantages too (clip-higher undone).", f"set delta above {1 + high:g} (INTELLECT-2 uses 4)"))
    return out


def rule_cispo_cap(ctx: Context) -> list[Finding]:
    """CISPO's loss (grpo_trainer.py `_compute_loss`): `clamped_ratios = torch.clamp(coef_1,
    max=self.epsilon_high).detach()`, with epsilon_high defaulting to epsilon. The cap is on the importance weight
    itself, not on 1 + epsilon_high: below 1 it caps every on-policy token (ratio 1), scaling the whole gradient by
    the cap and removing the importance correction. TRL's help recommends 5.0 (ScaleRL's epsilon_max)."""
    if ctx.config.loss_type != "cispo":
        return []
    high = ctx.config.epsilon_high
    cap = high if isinstance(high, (int, float)) else ctx.config.epsilon
    if not isinstance(cap, (int, float)) or isinstance(cap, bool) or cap >= 1:
        return []
    source = "epsilon_high" if isinstance(high, (int, float)) else "epsilon (epsilon_high unset)"
    return [finding(
        "cispo_cap_below_one", FIELD.epsilon_high, "warning",
        f"loss_type=cispo caps the importance weight itself at epsilon_high (clamp(ratio, max=epsilon_high)), and "
        f"the cap is {cap:g} from {source}: every token's ratio is about 1, so every token is capped, the gradient "
        f"is scaled by {cap:g} and the weight carries no importance correction, on-policy or off.",
        "set epsilon_high: 5.0 (TRL's recommendation for cispo, ScaleRL's epsilon_max)")]


# GSPO's clip range (arXiv 2507.18071, its experiments: 3e-4 low, 4e-4 high) is for a sequence ratio, the geometric
# mean of the token ratios: it stays within a fraction of a percent of 1, so a token-scale bound (PPO's 0.2) never
# clips.
SEQUENCE_CLIP_SCALE = 0.01
CLIPPED_LOSSES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")


def rule_sequence_clip_scale(ctx: Context) -> list[Finding]:
    cfg = ctx.config
    if (cfg.importance_sampling_level != "sequence" or cfg.loss_type not in CLIPPED_LOSSES
            or on_policy(ctx) is not False):
        return []
    low, high = cfg.epsilon, cfg.epsilon_high if isinstance(cfg.epsilon_high, (int, float)) else cfg.epsilon
    if not all(isinstance(v, (int, float)) for v in (low, high)) or min(low, high) < SEQUENCE_CLIP_SCALE:
        return []
    return [finding(
        "sequence_clip_token_scale", FIELD.epsilon, "warning",
        f"importance_sampling_level=sequence (GSPO) with clip bounds epsilon={low:g} / epsilon_high={high:g}: the "
        "sequence ratio is the geometric mean of the token ratios and stays within a fraction of a percent of 1, so "
        "token-scale bounds never clip and the reused samples are unconstrained.",
        "use GSPO's sequence-scale bounds: epsilon: 3e-4, epsilon_high: 4e-4 (the GSPO paper's)")]


def rule_sampler_correction_bounds(ctx: Context) -> list[Finding]:
    """vLLM's importance-sampling correction (grpo_trainer.py): the sampler/trainer ratio is about 1 when both
    agree, and `*_truncate` clamps it to [clip_min, clip_max], `*_mask` drops what falls outside. A range without 1
    pins every weight at a bound (truncate) or drops every sample (mask)."""
    cfg = ctx.config
    if not cfg.use_vllm or not cfg.vllm_importance_sampling_correction:
        return []
    low, high = cfg.vllm_importance_sampling_clip_min, cfg.vllm_importance_sampling_clip_max
    numbers = [v for v in (low, high) if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) < sum(v is not None for v in (low, high)):
        return []  # a wrong type: rule_value_types says so
    outside = (high is not None and high < 1) or (low is not None and low > 1)
    if not outside or (low is not None and high is not None and low >= high):  # TRL's GRPOConfig rejects that
        return []
    mode = str(cfg.vllm_importance_sampling_mode)
    masks = mode.endswith("_mask")
    return [finding(
        "sampler_correction_excludes_one", "vllm_importance_sampling_clip_max" if high is not None and high < 1
        else "vllm_importance_sampling_clip_min", "error" if masks else "warning",
        f"vllm_importance_sampling_mode={mode} with bounds [{low}, {high}], which exclude 1, the ratio of a sampler "
        "and a trainer that agree: " + ("every token or sequence falls outside and is masked out of the loss, so "
                                        "nothing trains." if masks else "every weight is pinned at the bound, "
                                        "which scales the whole gradient and corrects nothing."),
        "keep vllm_importance_sampling_clip_min below 1 and vllm_importance_sampling_clip_max above it (TRL's "
        "default: no minimum, maximum 3.0)")]


def rule_dr_grpo_scaling(ctx: Context) -> list[Finding]:
    """TRL's help for scale_rewards: 'The Dr. GRPO paper recommends not scaling rewards, as scaling by the standard
    deviation introduces a question-level difficulty bias.' dr_grpo with TRL's default 'group' keeps that bias."""
    scale = ctx.config.scale_rewards
    scale = {True: "group", False: "none"}.get(scale, scale) if isinstance(scale, bool) else scale
    if ctx.config.loss_type != "dr_grpo" or scale in ("none", None):
        return []
    return [finding(
        "dr_grpo_with_std_scaling", FIELD.scale_rewards, "warning",
        f"loss_type=dr_grpo with scale_rewards={scale!r}: Dr.GRPO is two changes, the constant normaliser and no "
        "std scaling of the advantages; dividing by each group's std keeps the difficulty bias the paper removes "
        "(TRL's help for scale_rewards).", "set scale_rewards: none (the dr_grpo variant does)")]


def rule_loss_level(ctx: Context) -> list[Finding]:
    """The combinations TRL 1.16 only warns about in the trainer's log when the run starts."""
    level, loss = ctx.config.importance_sampling_level, ctx.config.loss_type
    if level == "sequence" and loss in TOKEN_SUMMING_LOSSES:
        return [finding(
            "sequence_ratio_with_token_loss", FIELD.loss_type, "warning",
            f"importance_sampling_level=sequence with loss_type={loss}: the loss sums per-token terms, so each "
            "sequence's ratio is weighted by its length instead of GSPO's per-sequence objective (TRL warns about "
            "this only in the trainer's log).", "set loss_type: grpo for GSPO")]
    if loss == "luspo" and level != "sequence":
        return [finding("luspo_token_level", FIELD.importance_sampling_level, "warning",
                        "loss_type=luspo at token level: LUSPO's paper uses sequence-level ratios (TRL warns only "
                        "when the trainer starts).", "set importance_sampling_level: sequence")]
    if loss == "vespo" and level == "sequence":
        return [finding("vespo_sequence_level", FIELD.importance_sampling_level, "warning",
                        "loss_type=vespo computes its sequence weights itself and expects token-level ratios (TRL "
                        "warns only when the trainer starts).", "set importance_sampling_level: token")]
    return []


def rule_sampling_spread(ctx: Context) -> list[Finding]:
    out = []
    temperature = ctx.config.temperature
    if isinstance(temperature, (int, float)) and 0 < temperature < LOW_TEMPERATURE:
        out.append(finding(
            "temperature_too_low", FIELD.temperature, "warning",
            f"temperature={temperature:g}: the completions of a group are nearly identical, so their rewards are "
            "equal, the group's std is 0 and its advantage is 0: most steps learn nothing (frac_reward_zero_std near "
            "1).", "sample at temperature 1.0 (TRL's default, DAPO's setting); 0.7 at the lowest"))
    length = ctx.config.max_completion_length
    if ctx.config.mask_truncated_completions and isinstance(length, int) and 0 < length < SHORT_MASKED_LENGTH:
        out.append(finding(
            "masked_short_budget", FIELD.max_completion_length, "warning",
            f"mask_truncated_completions with max_completion_length={length}: nearly every completion is cut at "
            f"{length} tokens and masked out of the loss, so almost nothing trains.",
            "raise max_completion_length to the inspection's suggested length, or drop mask_truncated_completions"))
    return out


def rule_completion_budget(ctx: Context) -> list[Finding]:
    """max_completion_length against vLLM's context and a hybrid thinking model's traces (the model's own context
    needs its architecture: the memory verdict checks it)."""
    out = []
    length = ctx.config.max_completion_length
    if not isinstance(length, int) or length <= 0:
        return out
    vllm_len = ctx.config.vllm_max_model_length
    if ctx.config.use_vllm and isinstance(vllm_len, int) and length >= vllm_len:
        out.append(finding(
            "completion_beyond_vllm_context", FIELD.vllm_max_model_length, "error",
            f"max_completion_length={length} with vllm_max_model_length={vllm_len}: vLLM's context holds the prompt "
            "and the completion, so completions are capped below max_completion_length without a word.",
            f"set vllm_max_model_length to at least the longest prompt + {length}, or leave it unset (the model's "
            "context)"))
    model = ctx.given.model_name_or_path
    kwargs = ctx.config.chat_template_kwargs if isinstance(ctx.config.chat_template_kwargs, dict) else {}
    if (model and kwargs.get("enable_thinking") is not False and length < THINKING_FLOOR
            and is_hybrid_thinking(str(model))):
        out.append(finding(
            "thinking_budget_too_short", FIELD.max_completion_length, "warning",
            f"{model} thinks unless chat_template_kwargs says enable_thinking: false, and its traces run long "
            "(Qwen3's model cards recommend 32,768 output tokens): at max_completion_length="
            f"{length} every completion whose trace runs past {length} tokens is cut before its answer and scores "
            "as a failure, however right its reasoning.",
            f"set max_completion_length: {COMPLETION_LENGTH[True][0]} for thinking, or chat_template_kwargs: "
            f"{{enable_thinking: false}} with {COMPLETION_LENGTH[False][0]}"))
    return out


def rule_overlong_punishment(ctx: Context) -> list[Finding]:
    """DAPO's soft overlong punishment is computed against its own L_max: it must be max_completion_length."""
    length = ctx.config.max_completion_length
    out = []
    for i, spec in enumerate(ctx.reward_specs or []):
        spec = spec if isinstance(spec, dict) else spec.model_dump()
        if spec.get("name") != "soft_overlong_punishment" or not isinstance(length, int):
            continue
        limit = (spec.get("params") or {}).get("max_completion_len")
        if isinstance(limit, int) and limit != length:
            out.append(finding(
                "overlong_punishment_mismatch", f"rewards[{i}].params.max_completion_len", "error",
                f"soft_overlong_punishment's max_completion_len={limit} but max_completion_length={length}: "
                + ("completions between the two are all punished as overlong (-1 past its limit)" if limit < length
                   else "no completion can reach its punishment zone, so it never acts") + ".",
                f"set max_completion_len to {length} in train/rewards.json (and soft_punish_cache to ~20% of it)"))
    return out


def rule_server_memory_field(ctx: Context) -> list[Finding]:
    if ctx.config.use_vllm and ctx.config.vllm_mode == "server" and FIELD.vllm_gpu_memory_utilization in ctx.values:
        return [finding(
            "vllm_memory_ignored_in_server_mode", FIELD.vllm_gpu_memory_utilization, "warning",
            "vllm_gpu_memory_utilization applies to vllm_mode=colocate only (TRL's help; the server branch of "
            "trl/generation/vllm_generation.py never reads it): the server's share is `trl vllm-serve "
            "--gpu_memory_utilization` (0.9 by default).",
            "remove it, and pass --gpu_memory_utilization to `trl vllm-serve` (launch_training does)")]
    return []


def _data_files(ctx: Context) -> list[Path]:
    entries = ctx.given.datasets
    if not isinstance(entries, list):
        return []
    files = []
    for entry in entries:
        data_files = entry.get("data_files") if isinstance(entry, dict) else None
        for name in [data_files] if isinstance(data_files, str) else (data_files or []):
            path = Path(str(name)).expanduser()
            bases = [] if path.is_absolute() else [b for b in (ctx.base_dir, Path.cwd()) if b is not None]
            found = next((b / path for b in bases if (b / path).is_file()), path if path.is_file() else None)
            if found is None:
                return []  # a file not here (another machine): not counted
            files.append(found)
    return files


def data_prompts(ctx: Context) -> int | None:
    """The prompts of the config's local data files (those found here, each under COUNT_LIMIT_BYTES), else None;
    read once per validation (several rules ask)."""
    if "_data_prompts" not in ctx.__dict__:
        ctx.__dict__["_data_prompts"] = _count_prompts(ctx)
    return ctx.__dict__["_data_prompts"]


def _count_prompts(ctx: Context) -> int | None:
    files = _data_files(ctx)
    if not files or any(f.stat().st_size > COUNT_LIMIT_BYTES for f in files):
        return None
    try:
        return sum(len(read_file(f)) for f in files)
    except (UserInputError, OSError, ValueError):
        return None  # an unreadable file is the trainer's (and the inspection's) to report


def rule_dataset_size(ctx: Context) -> list[Finding]:
    """TRL's RepeatSampler yields only whole chunks of generation_batch_size / num_generations prompts and drops the
    rest (trl/trainer/utils.py): fewer prompts than one chunk train 0 steps."""
    g, batch = ctx.config.num_generations, generation_batch(ctx)
    if not isinstance(g, int) or g < 1 or not isinstance(batch, int) or batch % g:
        return []
    prompts = data_prompts(ctx)
    if prompts is None:
        return []
    chunk = batch // g
    if prompts >= chunk:
        return []
    return [finding(
        "dataset_smaller_than_generation_batch", FIELD.datasets, "error",
        f"the data set has {prompts} prompts, fewer than one generation batch of {chunk} prompts ({batch} "
        f"completions / num_generations {g}): TRL's sampler drops the incomplete chunk, so training runs 0 steps.",
        f"add prompts (at least {chunk}, many more to train), or shrink the generation batch "
        "(per_device_train_batch_size x GPUs x steps_per_generation)")]


def rule_plain_prompts(ctx: Context) -> list[Finding]:
    """Plain-text prompts (the first row of the first local data file) for a model whose tokenizer has a chat
    template: TRL renders only chat-message prompts through it (issue 49: a chat model answered empty or rambled,
    and only sampling said why)."""
    model, files = ctx.given.model_name_or_path, _data_files(ctx)
    if not model or not files or files[0].stat().st_size > COUNT_LIMIT_BYTES:
        return []
    try:
        rows = read_file(files[0])[:1]
    except (UserInputError, OSError, ValueError):
        return []  # an unreadable file is the trainer's (and the inspection's) to report
    prompt = rows[0].get(ctx.prompt_column or "prompt") if rows and isinstance(rows[0], dict) else None
    if not isinstance(prompt, str) or not has_chat_template(str(model)):
        return []
    return [finding("plain_prompts_for_chat_model", FIELD.datasets, "warning", plain_prompts_warning(shown_name(model)),
                    "write each prompt as a list of chat messages (role/content), or use a base model")]


RULES = (
    Rule(rule_model), Rule(rule_sync_ref_model), Rule(rule_clip_structure), Rule(rule_cispo_cap),
    Rule(rule_sequence_clip_scale), Rule(rule_sampler_correction_bounds), Rule(rule_dr_grpo_scaling),
    Rule(rule_loss_level), Rule(rule_sampling_spread), Rule(rule_completion_budget), Rule(rule_overlong_punishment),
    Rule(rule_server_memory_field), Rule(rule_dataset_size),
    Rule(rule_plain_prompts),
)

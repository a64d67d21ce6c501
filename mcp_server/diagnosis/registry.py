"""Every diagnosis rule, declared once: its code, family, severities, whether the live guard stops on it, what it
reads and what it can cause. The triage order is this file's order (FAMILIES, then the codes within a family);
references/failure-triage.md and the Markdown that cites the order are checked against it by tests
(tests/test_diagnose.py), never parsed at run time.

Adding a rule: write its function in the family's module and declare its code here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from mcp_server.diagnosis.agentic import rule_tool_calls, rule_tool_failures
from mcp_server.diagnosis.divergence import (
    rule_entropy,
    rule_entropy_rising,
    rule_fp16,
    rule_grad_spike,
    rule_kl,
    rule_learning_rate,
    rule_nan,
)
from mcp_server.diagnosis.environment import rule_config_not_the_runs, rule_environment, rule_no_steps
from mcp_server.diagnosis.sampler import rule_importance_ratio, rule_moe, rule_moe_router, rule_sampler_mismatch
from mcp_server.diagnosis.samples import (
    rule_length_collapse,
    rule_never_terminate,
    rule_reward_errors,
    rule_reward_none,
    rule_task_never_scores,
    rule_truncated,
)
from mcp_server.diagnosis.signal import rule_flat, rule_no_signal, rule_reward_falling, rule_signal_lost
from mcp_server.diagnosis.variant import rule_hacking, rule_length, rule_loss_near_zero

# The families in triage order: (name, heading in references/failure-triage.md's "The order of triage").
FAMILIES: list[tuple[str, str]] = [
    ("environment", "Environment"),
    ("samples", "Read the latest samples"),
    ("sampler", "Sampler/trainer mismatch"),
    ("update", "Precision and learning rate"),
    ("divergence", "Entropy direction and grad norm"),
    ("signal", "Signal"),
    ("variant", "Variant symptoms and reward hacking"),
    ("info", "Information"),
]

# What a broken update causes downstream (the mechanisms an expert knows).
_BROKEN_POLICY = ("completions_never_terminate", "completions_truncated", "completion_length_collapse",
                  "no_reward_signal", "signal_lost", "reward_falling")
_DIVERGENCE = ("grad_norm_spike", "nan_loss", "kl_explosion", "entropy_rising", "entropy_collapse",
               "importance_ratio_blowup") + _BROKEN_POLICY


@dataclass(frozen=True)
class Code:
    code: str
    family: str
    meaning: str
    severities: tuple[str, ...]
    reads: str  # "log", "config" (present from the start: no onset) or "metrics" (an onset step)
    guard: bool = False  # the live guard stops the run on this code at error severity
    causes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rule:
    check: Callable
    codes: tuple[Code, ...]


E, W, I = "error", "warning", "info"
RULES: list[Rule] = [
    Rule(rule_environment, (
        Code("import_error", "environment", "a package the run needs is missing or broken (ImportError / "
             "ModuleNotFoundError)", (E,), "log"),
        Code("disk_full", "environment", "a write was refused for lack of disk space or quota (a checkpoint save "
             "crashed)", (E,), "log"),
        Code("cuda_out_of_memory", "environment", "the training process ran out of GPU memory (torch "
             "OutOfMemoryError in the log)", (E,), "log"),
        Code("vllm_out_of_memory", "environment", "vLLM could not allocate its weights or KV cache", (E,), "log"),
        Code("nccl_timeout", "environment", "a distributed collective timed out (NCCL watchdog)", (E,), "log"),
    )),
    Rule(rule_config_not_the_runs, (Code("config_not_the_runs", "environment", "the metrics contradict the config "
                                         "read (kl logged with beta 0: TRL logs kl only when beta != 0): the run "
                                         "trained with another config", (W,), "config"),)),
    Rule(rule_no_steps, (Code("no_steps_trained", "environment", "training ended without one optimizer step (a "
                              "data set smaller than one generation batch)", (E,), "log", guard=True),)),
    Rule(rule_reward_errors, (Code("reward_function_error", "samples", "a reward function raised an exception "
                                   "(traceback in the log)", (E,), "log"),)),
    Rule(rule_reward_none, (Code("reward_returns_none", "samples", "a reward function returned None for every "
                                 "completion (its logged mean is NaN)", (E,), "metrics",
                                 causes=("no_reward_signal", "signal_lost", "reward_flat")),)),
    Rule(rule_task_never_scores, (Code("task_never_scores", "samples", "the task's (correctness) reward is exactly "
                                       "0 at every log from the first: base success 0 (SFT first) or a reward that "
                                       "never matches (answer extraction, answer column)", (E,), "metrics",
                                       causes=("no_reward_signal", "signal_lost", "reward_flat")),
                                  Code("reward_never_pays", "samples", "another reward (a format reward) is exactly 0 "
                                       "at every log from the first: it shapes no advantage (a prompt that never "
                                       "asks for its shape, a prefilled <think>, a pattern stricter than the "
                                       "model's output)", (W,), "metrics"))),
    Rule(rule_never_terminate, (Code("completions_never_terminate", "samples", "every completion hits "
                                     "max_completion_length and none ends (EOS, chat template, thinking)", (E,),
                                     "metrics", causes=("no_reward_signal", "signal_lost", "reward_flat",
                                                        "reward_falling", "task_never_scores", "reward_never_pays")),)),
    # an answer cut off is scored 0: a reward that never pays on truncated completions is the cut's effect
    Rule(rule_truncated, (Code("completions_truncated", "samples", "completions hit max_completion_length "
                               "(clipped_ratio over 0.1)", (E, W), "metrics",
                               causes=("no_reward_signal", "signal_lost", "reward_flat", "reward_falling",
                                       "task_never_scores", "reward_never_pays")),)),
    Rule(rule_length_collapse, (Code("completion_length_collapse", "samples", "mean completion length fell to "
                                     "under 0.4x its start", (W,), "metrics",
                                     causes=("no_reward_signal", "signal_lost", "reward_falling")),)),
    Rule(rule_tool_calls, (Code("tool_calls_collapsing", "samples", "an agentic run's tool calls per rollout fell "
                                "to under a quarter of their start", (E,), "metrics", guard=True),)),
    Rule(rule_tool_failures, (Code("tool_failures_rising", "samples", "an agentic run's share of failing tool "
                                   "calls rose past half", (E,), "metrics", guard=True),)),
    Rule(rule_sampler_mismatch, (Code("sampler_mismatch", "sampler", "vLLM's log-probs differ from the trainer's "
                                      "(sampling/* metrics)", (E, W), "metrics", guard=True,
                                      # not the policy ratio: TRL's clip_ratio compares the trainer to itself
                                      causes=tuple(c for c in _DIVERGENCE if c != "importance_ratio_blowup")),)),
    Rule(rule_importance_ratio, (Code("importance_ratio_blowup", "sampler", "many tokens' policy ratios are "
                                      "clipped (clip_ratio/*): off-policy updates too large", (E, W), "metrics",
                                      causes=("entropy_rising", "kl_explosion", "reward_falling")),)),
    Rule(rule_moe_router, (Code("moe_router_instability", "sampler", "the MoE router's load-balancing loss "
                                "(aux_loss) rises", (W,), "metrics",
                                causes=("importance_ratio_blowup", "sampler_mismatch", "entropy_rising",
                                        "reward_falling")),)),
    Rule(rule_moe, (Code("moe_without_gspo", "sampler", "mixture-of-experts model with token-level importance "
                         "ratios (-> GSPO)", (E, W, I), "config",
                         causes=("moe_router_instability", "importance_ratio_blowup", "sampler_mismatch",
                                 "entropy_rising", "reward_falling")),)),
    Rule(rule_fp16, (Code("fp16_divergence", "update", "fp16 on a GPU with bf16 (diverged, or at risk of "
                          "diverging)", (E, W), "config", causes=_DIVERGENCE),)),
    Rule(rule_learning_rate, (Code("lr_out_of_range", "update", "learning rate outside GRPO's settled range for "
                                   "the fine-tuning mode", (E, W, I), "config",
                                   causes=_DIVERGENCE + ("reward_flat",)),)),
    Rule(rule_entropy_rising, (Code("entropy_rising", "divergence", "policy entropy rises into gibberish", (E, W),
                                    "metrics", guard=True,
                                    causes=_BROKEN_POLICY + ("kl_explosion",)),)),
    Rule(rule_entropy, (Code("entropy_collapse", "divergence", "policy entropy fell fast (-> DAPO; an error when "
                             "it becomes deterministic)", (E, W), "metrics", guard=True,
                             causes=("no_reward_signal", "signal_lost", "reward_flat",
                                     "completion_length_collapse")),)),
    Rule(rule_grad_spike, (Code("grad_norm_spike", "divergence", "grad_norm jumped an order of magnitude over its "
                                "running level", (E, W), "metrics",
                                causes=("nan_loss", "kl_explosion", "entropy_rising", "entropy_collapse")
                                + _BROKEN_POLICY),)),
    Rule(rule_nan, (Code("nan_loss", "divergence", "loss or gradient norm became NaN/inf", (E,), "metrics",
                         guard=True, causes=("no_reward_signal", "signal_lost", "reward_falling")),)),
    Rule(rule_kl, (Code("kl_explosion", "divergence", "KL to the reference model grew large for the run's beta",
                        (E, W), "metrics", guard=True, causes=("reward_falling",)),)),
    Rule(rule_signal_lost, (Code("signal_lost", "signal", "every group at zero reward spread and grad_norm 0 for "
                                 "several logs after the first update, or no reward at all: nothing is learned",
                                 (E,), "metrics", guard=True),)),
    Rule(rule_no_signal, (Code("no_reward_signal", "signal", "groups get identical rewards (frac_reward_zero_std "
                               "near 1): no advantage", (E, W), "metrics", causes=("signal_lost",)),)),
    Rule(rule_reward_falling, (Code("reward_falling", "signal", "the reward (or correctness) falls significantly",
                                    (W,), "metrics"),)),
    Rule(rule_flat, (Code("reward_flat", "signal", "the mean reward does not move over many steps although "
                          "rewards vary", (W,), "metrics"),)),
    Rule(rule_length, (Code("length_reward_correlation", "variant", "the reward pays for length while correctness "
                            "stays flat (-> Dr.GRPO, a length penalty)", (W,), "metrics",
                            causes=("completions_truncated", "no_reward_signal")),)),
    Rule(rule_hacking, (Code("possible_reward_hacking", "variant", "one reward component climbs while correctness "
                             "(or KL) says otherwise", (W,), "metrics"),)),
    Rule(rule_loss_near_zero, (Code("loss_near_zero_expected", "info", "GRPO loss near zero at the start: normal, "
                                    "not a bug (info)", (I,), "metrics"),)),
]

REGISTRY: dict[str, Code] = {c.code: c for rule in RULES for c in rule.codes}
CODES: dict[str, str] = {c.code: c.meaning for c in REGISTRY.values()}
FAMILY_RANK = {name: i for i, (name, _) in enumerate(FAMILIES)}
# The triage order: families in order, codes in their declared order within a family.
TRIAGE_ORDER: dict[str, int] = {
    code: i for i, code in enumerate(sorted(REGISTRY, key=lambda c: (FAMILY_RANK[REGISTRY[c].family],
                                                                     list(REGISTRY).index(c))))
}
GUARD_RULES: tuple[Callable, ...] = tuple(r.check for r in RULES if any(c.guard for c in r.codes))
GUARD_CODES = frozenset(c.code for c in REGISTRY.values() if c.guard)
RULE_OF: dict[str, Callable] = {c.code: r.check for r in RULES for c in r.codes}


def triage_markdown() -> str:
    """The numbered triage order as references/failure-triage.md writes it (one line per family)."""
    lines = []
    for i, (family, heading) in enumerate(FAMILIES, 1):
        codes = [c for c in TRIAGE_ORDER if REGISTRY[c].family == family]
        lines.append(f"{i}. **{heading}**: " + ", ".join(f"`{c}`" for c in codes) + ".")
    return "\n".join(lines)

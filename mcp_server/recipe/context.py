"""The context every validation rule reads (the config, the installed TRL's fields, the target, and what the entry
point could supply: the model's architecture, the memory plan), the finding a rule returns ({code, field, severity,
message, fix}) and the declaration of a rule with what it needs (`Rule`, `NEEDS`).

Rules are about the target (GPU type and count), never about the machine the check runs on.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from mcp_server.config.target import Target
from mcp_server.model_ref import is_moe as detect_moe
from mcp_server.recipe.runspec import RunSpec
from mcp_server.config.grpo_fields import GRPOView
from mcp_server.errors import UserInputError
from mcp_server.recipe.models import Finding


@dataclass
class Context:
    spec: RunSpec  # the run: its config as written, target, recorded request, rewards, agentic record, base dir
    values: dict  # the config's fields as TRL's parser reads them (spec.values, converted)
    trl: dict
    gpu: object | None  # a gpus.GPU, or None for a CPU target
    gpu_name: str
    parse_errors: dict = field(default_factory=dict)  # {key: TRL's parser error} for values it cannot convert
    trl_missing: Exception | None = None  # why the installed TRL's fields are unknown (no training interpreter)
    # What the entry point can supply, by need ("architecture", "memory_plan"): called once, when a rule needs it.
    supply: dict[str, Callable[[], Any]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)  # what the rules before this one found, in order

    # ------------------------------------------------------------ the run's records, as rules read them
    @property
    def num_gpus(self) -> int:
        return self.spec.target.num_gpus

    @property
    def reward_specs(self) -> list | None:
        return self.spec.rewards

    @property
    def override_reason(self) -> str | None:
        return self.spec.override_reason

    @property
    def base_dir(self) -> Path | None:
        return self.spec.base_dir

    @property
    def agentic(self) -> dict | None:
        return self.spec.agentic

    @property
    def prompt_column(self) -> str | None:
        return self.spec.prompt_column

    @functools.cached_property
    def is_moe(self) -> bool | None:
        """Emission's finding, else detected from the model's files (None: no model, or unknown)."""
        if self.spec.is_moe is not None:
            return self.spec.is_moe
        model = self.given.model_name_or_path
        return detect_moe(str(model)) if model else None

    @functools.cached_property
    def config(self) -> GRPOView:
        """The config by field: its value, else the installed TRL's default (None when no TRL answered)."""
        return GRPOView(self.values, {name: meta["default"] for name, meta in self.trl["fields"].items()})

    @functools.cached_property
    def given(self) -> GRPOView:
        """The config by field, only what it says: an unset field is None."""
        return GRPOView.given(self.values)

    @functools.cached_property
    def architecture(self):
        """(model name, memory.params.Architecture) of the config's model, else None: not supplied (a check of one
        config change), no model, or unknown offline (the memory rule says what was not planned)."""
        if "architecture" not in self.supply or not self.given.model_name_or_path:
            return None
        try:
            return self.supply["architecture"]()
        except (UserInputError, ValueError):
            return None

    @functools.cached_property
    def rehearsal(self):
        """The run rehearsed on a miniature (recipe.rehearsal.Rehearsal), once, when a rule asks."""
        return self.supply["rehearsal"]()

    @functools.cached_property
    def memory_plan(self):
        """The memory plan's answer for the target (recipe.memory_rules.PlannedMemory), planned once."""
        return self.supply["memory_plan"]()

    def lacking(self, needs: tuple[str, ...]) -> list[str]:
        """The needs (NEEDS) this validation cannot meet."""
        return [need for need in needs if not self._has(need)]

    def _has(self, need: str) -> bool:
        if need in ("trl", "tokenizer"):  # both come from the training interpreter
            return self.trl_missing is None
        if need == "architecture":
            return self.architecture is not None
        return need in self.supply  # memory_plan: planned when a rule reads it

    @property
    def vllm_server_local(self) -> bool:
        return serves_locally(self.config)

    @property
    def target(self) -> Target:
        return self.spec.target

    @property
    def training_processes(self) -> int:
        """World size of training on the target: a local vLLM server holds its GPUs (config.target)."""
        return self.target.world(self.vllm_server_local)


def serves_locally(config) -> bool:
    """Whether a config (its GRPOView) starts its own vLLM server here, on GPUs the training world then lacks."""
    return (
        bool(config.use_vllm)
        and config.vllm_mode == "server"
        and not config.vllm_server_base_url
        and config.vllm_server_host in ("0.0.0.0", "127.0.0.1", "localhost", None)
    )


def finding(code, field, severity, message, fix=None) -> Finding:
    return Finding(code=code, field=field, severity=severity, message=message, fix=fix)


# What a rule may need beyond the config and the target (every rule has those: an unknown GPU is answered by
# `unknown_gpu` alone). A rule whose needs this validation cannot meet does not run; the result names it
# (ValidationResult.not_run) with what it lacked.
NEEDS: dict[str, str] = {
    "trl": "the installed TRL's fields, choices and GRPOConfig (the training interpreter answers)",
    "tokenizer": "the model's tokenizer and chat template (loaded in the training interpreter)",
    "architecture": "the model's architecture (config.json: a local directory, the HF cache or the catalog), "
                    "supplied by memory.verdict.validate",
    "memory_plan": "the memory plan for a GPU target, supplied by memory.verdict.validate when asked for it",
    "rehearsal": "the run built and trained one step on a miniature of its model (recipe.rehearsal), supplied by "
                 "memory.verdict.validate when asked for it",
}


@dataclass(frozen=True)
class Rule:
    """One validation rule: `check(ctx) -> list[Finding]` and what it needs (names in NEEDS). A topic module lists
    its rules in RULES, in the order they report; recipe.registry holds the topics' order."""

    check: Callable[[Context], list[Finding]]
    needs: tuple[str, ...] = ()

    def __post_init__(self):
        unknown = set(self.needs) - NEEDS.keys()
        if unknown:
            raise ValueError(f"{self.name} needs {sorted(unknown)}: not in recipe.context.NEEDS")

    @property
    def name(self) -> str:
        return self.check.__name__

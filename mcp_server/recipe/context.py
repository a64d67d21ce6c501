"""The context every validation rule reads (the config, the installed TRL's fields, the target) and the finding it
returns: {code, field, severity, message, fix}.

Rules are about the target (GPU type and count), never about the machine the check runs on.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

from mcp_server.config.batches import training_world
from mcp_server.config.grpo_fields import GRPOView
from mcp_server.recipe.models import Finding


@dataclass
class Context:
    values: dict
    trl: dict
    gpu: object | None  # a gpus.GPU, or None for a CPU target
    gpu_name: str
    num_gpus: int
    reward_specs: list | None = None
    override_reason: str | None = None
    is_moe: bool | None = None
    parse_errors: dict = field(default_factory=dict)  # {key: TRL's parser error} for values it cannot convert
    base_dir: Path | None = None  # where relative data_files resolve (the run directory of an emitted config)
    findings: list[Finding] = field(default_factory=list)

    @functools.cached_property
    def config(self) -> GRPOView:
        """The config by field: its value, else the installed TRL's default (None when no TRL answered)."""
        return GRPOView(self.values, {name: meta["default"] for name, meta in self.trl["fields"].items()})

    @functools.cached_property
    def given(self) -> GRPOView:
        """The config by field, only what it says: an unset field is None."""
        return GRPOView.given(self.values)

    @property
    def vllm_server_local(self) -> bool:
        return (
            bool(self.config.use_vllm)
            and self.config.vllm_mode == "server"
            and not self.config.vllm_server_base_url
            and self.config.vllm_server_host in ("0.0.0.0", "127.0.0.1", "localhost", None)
        )

    @property
    def training_processes(self) -> int:
        """World size of training on the target: a local vLLM server takes one GPU for itself."""
        return training_world(self.num_gpus, 1 if self.vllm_server_local else 0, cpu=self.gpu is None)


def finding(code, field, severity, message, fix=None) -> Finding:
    return Finding(code=code, field=field, severity=severity, message=message, fix=fix)

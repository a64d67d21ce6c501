"""Validation's runner: the context for a config on a target, then every rule of the registry (recipe.registry)
whose needs are met. The one validation entry point, which supplies what the architecture and the memory plan
decide, is memory.verdict.validate (validate_grpo_config, emit_grpo_config and the launch gate all answer through
it); validate_values without them is the check of one config change (the lever search, a diagnosis or resume
patch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from mcp_server.errors import UserInputError
from mcp_server.gpus import resolve_target
from mcp_server.model_ref import is_moe as detect_moe
from mcp_server.recipe import registry
from mcp_server.recipe.models import ValidateRequest, ValidationResult
from mcp_server.recipe.context import Context, finding
from mcp_server.config.grpo_fields import GRPOView
from mcp_server.recipe.trl_fields import installed_trl
from mcp_server.worker import in_training
from mcp_server.worker_targets import PARSE_LIKE_TRL
from mcp_server.recipe.recorded import RecordedRequest, read_recorded
from mcp_server.rewards.spec import read_reward_specs
from mcp_server.runs import sidecars
from mcp_server.userfiles import load_config_file, read_json


def _sidecars(config_path: Path | None) -> tuple[RecordedRequest, list | None]:
    """train/request.json (the target and reasons, recipe.recorded) and train/rewards.json beside an emitted
    config."""
    if config_path is None:
        return RecordedRequest(), None
    request_path, rewards_path = sidecars(config_path)
    request = read_recorded(request_path, "config_path")
    rewards = None
    if rewards_path.is_file():
        rewards = [spec.model_dump() for spec in read_reward_specs(rewards_path, "config_path")]
    return request, rewards


def no_trl() -> dict:
    """What validation knows of TRL when the training interpreter's TRL cannot answer: nothing."""
    return {"trl_version": None, "fields": {}, "choices": {}}


def validate_values(values: dict, gpu: str = "H100", num_gpus: int = 1, reward_specs: list | None = None,
                    override_reason: str | None = None, is_moe: bool | None = None,
                    base_dir: Path | None = None, agentic: dict | None = None, prompt_column: str | None = None,
                    supply: dict[str, Callable[[], Any]] | None = None,
                    vllm_server_gpus: int | None = None) -> ValidationResult:
    """Validate a dict of config fields for a target: every registered rule whose needs are met (`supply`: what the
    caller can give beyond the config, by need: "architecture", "memory_plan"; memory.verdict.validate gives both).
    Without a training interpreter every rule that needs no TRL still runs, and a finding says that TRL's own
    checks did not run and how to get them."""
    trl_missing = None
    try:
        trl = installed_trl()
    except UserInputError as exc:
        trl, trl_missing = no_trl(), exc
    try:
        gpu_obj, gpu_name = resolve_target(gpu)
    except UserInputError as exc:  # every rule is about the target: none runs
        return registry.result([finding("unknown_gpu", "gpu", "error", str(exc), "use a name from the GPU catalog")],
                               trl["trl_version"], f"{num_gpus}x {gpu}",
                               {rule.name: ["target"] for rule in registry.REGISTRY})
    parse_errors: dict = {}
    if trl_missing is None:  # judge every field by the value TRL's parser would give it, not by PyYAML's reading
        try:
            parsed = in_training(PARSE_LIKE_TRL, values)
            values, parse_errors = parsed["values"], parsed["errors"]
        except UserInputError as exc:  # TRL's fields are known (a probe kept on disk) but TRL does not import now
            if exc.field != "environment":
                raise
            trl, trl_missing = no_trl(), exc
    model = GRPOView.given(values).model_name_or_path
    if is_moe is None and model:
        is_moe = detect_moe(str(model))
    ctx = Context(values=values, trl=trl, gpu=gpu_obj, gpu_name=gpu_name, num_gpus=num_gpus,
                  reward_specs=reward_specs, override_reason=override_reason, is_moe=is_moe,
                  parse_errors=parse_errors, base_dir=base_dir, agentic=agentic, prompt_column=prompt_column,
                  trl_missing=trl_missing, vllm_server_gpus=vllm_server_gpus,
                  supply=supply or {})
    findings, not_run = registry.run(ctx)
    target = "CPU" if gpu_obj is None else f"{num_gpus}x {gpu_name}"
    return registry.result(findings, trl["trl_version"], target, not_run)


def read_config(config_path: str | Path | None = None, config: dict | None = None, gpu: str | None = None,
                num_gpus: int | None = None) -> tuple[dict, dict]:
    """(config values, validate_values' other arguments) for a YAML path or a dict, for the given target, else the
    one recorded beside the config (train/request.json), else 1x H100."""
    if (config_path is None) == (config is None):
        raise UserInputError("config_path", "give exactly one of config_path (a YAML file) or config (a dict)")
    values = load_config_file(str(config_path)) if config_path else dict(config)
    recorded, reward_specs = _sidecars(Path(config_path) if config_path else None)
    agentic_path = Path(config_path).parent / "agentic.json" if config_path else None
    agentic = read_json(agentic_path, "config_path", dict) if agentic_path and agentic_path.is_file() else None
    return values, {
        "gpu": gpu or recorded.gpu or "H100",
        "num_gpus": num_gpus or recorded.num_gpus,
        "reward_specs": reward_specs,
        "override_reason": recorded.override_reason,
        "base_dir": _run_dir_of(Path(config_path)) if config_path else None,
        "agentic": agentic,
        "prompt_column": recorded.fields_given().get("prompt_column"),  # None: the record names none
    }


def read_request_values(request: ValidateRequest) -> tuple[dict, dict]:
    """read_config for a validate_grpo_config request."""
    return read_config(request.config_path, request.config, request.gpu, request.num_gpus)


def validate_recipe_rules(request: ValidateRequest) -> ValidationResult:
    """The recipe's rules and TRL's checks only, for the requested (or recorded) target: no architecture, no memory
    plan. Validation as the tools answer it is memory.verdict.validate."""
    values, kwargs = read_request_values(request)
    return validate_values(values, **kwargs, vllm_server_gpus=request.vllm_server_gpus)


def _run_dir_of(config_path: Path) -> Path:
    """Where the config's relative data_files resolve: the run directory of train/config.yaml (train.py runs
    there), else the config's own folder."""
    folder = config_path.expanduser().resolve().parent
    return folder.parent if folder.name == "train" else folder

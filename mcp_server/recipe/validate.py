"""Validation's runner: the context for a config on a target, then every rule of the registry (recipe.registry)
whose needs are met. The one validation entry point, which supplies what the architecture and the memory plan
decide, is memory.verdict.validate (validate_grpo_config, emit_grpo_config and the launch gate all answer through
it); validate_values without them is the check of one config change (the lever search, a diagnosis or resume
patch)."""

from __future__ import annotations

from typing import Any, Callable

from mcp_server.errors import UserInputError
from mcp_server.gpus import resolve_target
from mcp_server.recipe import registry
from mcp_server.recipe.models import ValidateRequest, ValidationResult
from mcp_server.recipe.context import Context, finding
from mcp_server.config.target import Target
from mcp_server.recipe.trl_fields import installed_trl
from mcp_server.worker import in_training
from mcp_server.worker_targets import PARSE_LIKE_TRL
from mcp_server.recipe.recorded import RecordedRequest
from mcp_server.recipe.runspec import RunSpec


def no_trl() -> dict:
    """What validation knows of TRL when the training interpreter's TRL cannot answer: nothing."""
    return {"trl_version": None, "fields": {}, "choices": {}}


def validate_values(values: dict, gpu: str = "H100", num_gpus: int = 1, *, reward_specs: list | None = None,
                    override_reason: str | None = None, vllm_server_gpus: int | None = None) -> ValidationResult:
    """validate_spec for a config dict on a target, without the architecture or the memory plan: the check of one
    config change (a lever, a patch) and of a config alone."""
    request = RecordedRequest(override_reason=override_reason) if override_reason else RecordedRequest()
    return validate_spec(RunSpec(values=dict(values), target=Target(gpu, num_gpus, vllm_server_gpus),
                                 request=request, rewards=reward_specs))


def validate_spec(spec: RunSpec, supply: dict[str, Callable[[], Any]] | None = None) -> ValidationResult:
    """Validate a run for its target: every registered rule whose needs are met (`supply`: what the caller can
    give beyond the run, by need: "architecture", "memory_plan"; memory.verdict.validate gives both). Without a
    training interpreter every rule that needs no TRL still runs, and a finding says that TRL's own checks did not
    run and how to get them."""
    gpu, num_gpus = spec.target.gpu, spec.target.num_gpus
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
    values, parse_errors = spec.fields, {}
    if trl_missing is None:  # judge every field by the value TRL's parser would give it, not by PyYAML's reading
        try:
            parsed = in_training(PARSE_LIKE_TRL, values)
            values, parse_errors = parsed["values"], parsed["errors"]
        except UserInputError as exc:  # TRL's fields are known (a probe kept on disk) but TRL does not import now
            if exc.field != "environment":
                raise
            trl, trl_missing = no_trl(), exc
    ctx = Context(spec=spec, values=values, trl=trl, gpu=gpu_obj, gpu_name=gpu_name, parse_errors=parse_errors,
                  trl_missing=trl_missing, supply=supply or {})
    findings, not_run = registry.run(ctx)
    target = "CPU" if gpu_obj is None else f"{num_gpus}x {gpu_name}"
    return registry.result(findings, trl["trl_version"], target, not_run)


def request_spec(request: ValidateRequest) -> RunSpec:
    """The run a validate_grpo_config request names: its config file with the records beside it, or its config
    dict; on the requested target, else the recorded one, else 1x H100."""
    if (request.config_path is None) == (request.config is None):
        raise UserInputError("config_path", "give exactly one of config_path (a YAML file) or config (a dict)")
    if request.config_path:
        return RunSpec.read(request.config_path, gpu=request.gpu, num_gpus=request.num_gpus,
                            vllm_server_gpus=request.vllm_server_gpus, nodes=request.num_nodes)
    return RunSpec(values=dict(request.config), target=Target(request.gpu or "H100", request.num_gpus or 1,
                                                              request.vllm_server_gpus, nodes=request.num_nodes))


def validate_recipe_rules(request: ValidateRequest) -> ValidationResult:
    """The recipe's rules and TRL's checks only, for the requested (or recorded) target: no architecture, no memory
    plan. Validation as the tools answer it is memory.verdict.validate."""
    return validate_spec(request_spec(request))

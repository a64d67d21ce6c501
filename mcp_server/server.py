"""MCP door: each tool takes its request model's fields as flat arguments, calls the core and returns the pydantic
result.

One declaration per request: the pydantic request model is the tool's input schema (descriptions, defaults, enums,
bounds; unknown fields refused) and is what the core receives. The core modules are light at import (no torch, trl or
transformers: those are imported where the work needs them), so the server lists its tools fast.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import warnings
from typing import Annotated, Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resources import FileResource
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, ConfigDict, ValidationError

from mcp_server.content import RESOURCE_SCHEME, finetune_prompt_text, reference_files, reference_title
from mcp_server.emission import emit
from mcp_server.errors import UserInputError, describe_failure, validation_message
from mcp_server.evaluation import evaluate, export, promote
from mcp_server.evaluation.models import (
    EvaluateRequest,
    EvaluationResult,
    ExportRequest,
    ExportResult,
    PromoteRequest,
    PromotionResult,
)
from mcp_server.inputs import NoArguments
from mcp_server.inspection import gate, review, sampling
from mcp_server.inspection.models import (
    GateRequest,
    GateResult,
    InspectRequest,
    InspectResult,
    SampleRequest,
    SampleResult,
    VerdictRequest,
    VerdictResult,
)
from mcp_server.memory import planner
from mcp_server.memory.models import MemoryPlan, MemoryPlanRequest
from mcp_server.memory import verdict
from mcp_server.recipe.models import EmitResult, GRPORecipeRequest, ValidateRequest, ValidationResult
from mcp_server.reporting import Report
from mcp_server.rewards import registry
from mcp_server.rewards.models import RewardCatalog
from mcp_server.training import diagnose, environment, launch, prepare, status
from mcp_server.training.models import (
    DiagnoseRequest,
    Diagnosis,
    EnvironmentReport,
    EnvironmentRequest,
    LaunchRequest,
    LaunchResult,
    PrepareRequest,
    PrepareResult,
    RunList,
    RunRequest,
    StatusRequest,
    StopRequest,
    StopResult,
    TrainingStatus,
)

logger = logging.getLogger("llm-finetuning")
# MCP logging is deprecated from protocol 2026-07-28 (clients opt in per request) but still how today's clients
# show a server's messages; the SDK would warn on every call.
warnings.filterwarnings("ignore", message="The logging capability is deprecated", category=MCPDeprecationWarning)

TOOLS: list[Tool] = []


class _RawArguments(ArgModelBase):
    """Hands every argument to the tool as given. The SDK's argument model drops unknown names silently; the tool
    validates against its request model instead, so an unknown or bad field gets one message naming it."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


def _parse(model: type[BaseModel], arguments: dict[str, Any]) -> BaseModel:
    """The request, or a ToolError naming each bad field and, for an unknown one, what is accepted."""
    data = dict(arguments)
    for key, value in arguments.items():
        field = model.model_fields.get(key)
        # Some clients send a list or object as a JSON string (the SDK's own argument parsing allows it too).
        if field is not None and field.annotation is not str and isinstance(value, str) and value[:1] in "[{":
            try:
                data[key] = json.loads(value)
            except (ValueError, RecursionError):  # not JSON (or nested past what json reads): validated as given
                pass
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ToolError(validation_message(exc, model)) from None


def _reporter(ctx: Context, token) -> Report:
    """A `report` for the core (which runs in a worker thread): each call becomes an MCP log message and, when the
    client asked for progress, a progress notification, both sent on the server's event loop.

    A core reports stage by stage (each stage counting from 0), while MCP progress must only grow: a stage that
    starts again from 0 continues from where the previous one ended, with the total unknown from then on."""
    seen = {"offset": 0.0, "last": 0.0, "sent": -1.0}

    async def notify(progress: float | None, total: float | None, message: str) -> None:
        if progress is not None:
            await ctx.report_progress(progress, total, message)
        await ctx.log("info", message, logger_name="llm-finetuning")

    def report(done: float, total: float | None, message: str) -> None:
        if done < seen["last"]:
            seen["offset"] += seen["last"]
        seen["last"] = done
        progress = seen["offset"] + done
        fresh = progress > seen["sent"]
        seen["sent"] = max(seen["sent"], progress)
        try:
            anyio.from_thread.run(
                notify, progress if fresh else None, total if not seen["offset"] else None, message, token=token
            )
        except Exception as exc:  # a client gone away must not fail the work
            logger.debug("progress not sent: %r", exc)

    return report


def tool():
    """Register a tool whose flat arguments are the fields of the `request: Model` parameter (none without one).

    It may also take `report: Report` (progress and log messages while it works). The core runs in a worker thread.
    Every failure reaches the client as a tool error with one message: bad input names the field or file and what
    is accepted; anything unexpected keeps its type and text (the traceback goes to the server's log)."""

    def register(fn):
        signature = inspect.signature(fn, eval_str=True)
        params = signature.parameters
        model = params["request"].annotation if "request" in params else NoArguments

        async def call(ctx: Context, **arguments: Any):
            try:
                request = _parse(model, arguments)
                kwargs: dict[str, Any] = {"request": request} if "request" in params else {}
                if "report" in params:
                    kwargs["report"] = _reporter(ctx, anyio.lowlevel.current_token())
                return await anyio.to_thread.run_sync(functools.partial(fn, **kwargs))
            except (MCPError, ToolError):
                raise
            except Exception as exc:
                if not isinstance(exc, (UserInputError, ValidationError, OSError)):
                    logger.exception("tool %s failed unexpectedly", fn.__name__)
                raise ToolError(describe_failure(exc)) from None

        # The SDK builds the tool from this signature: the context only, and the declared result.
        call.__signature__ = inspect.Signature(
            [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)],
            return_annotation=signature.return_annotation,
        )
        call.__annotations__ = {"ctx": Context, "return": signature.return_annotation}
        registered = Tool.from_function(call, name=fn.__name__, description=fn.__doc__, structured_output=True)
        registered.parameters = model.model_json_schema()
        registered.fn_metadata.arg_model = _RawArguments
        TOOLS.append(registered)
        return fn

    return register


# ---------------------------------------------------------------- recipe (configs)
@tool()
def emit_grpo_config(request: GRPORecipeRequest) -> EmitResult:
    """Build a GRPO config for the installed TRL and the target hardware, validate it, and write
    train/config.yaml (for `trl grpo --config`), train/train.py and the request's JSON Schema into a run directory."""
    return emit.emit_grpo_config(request)


@tool()
def validate_grpo_config(request: ValidateRequest) -> ValidationResult:
    """Validate a GRPO config (a YAML path or a dict of fields) against the installed TRL and the target
    GPU type and count. Returns findings {code, field, severity, message, fix}; valid only with no errors."""
    return verdict.validate_config(request)


# ---------------------------------------------------------------- inspection gate


@tool()
def sample_completions(request: SampleRequest, report: Report) -> SampleResult:
    """Generate n completions per prompt from the policy model (settings from the run's train/config.yaml by
    default) and store them in <run>/inspection/samples.jsonl for reward inspection."""
    return sampling.sample_completions(request, report=report)


@tool()
def inspect_rewards(request: InspectRequest, report: Report) -> InspectResult:
    """Score the stored samples (50-100) with the run's rewards; write inspection/review.md for a person to read.
    Returns score distributions, zero-variance groups, malformed / well-formed-but-wrong / truncated counts,
    likely mis-scored samples and the base success rate (zero: route to SFT first; GRPO cannot learn)."""
    return review.inspect_rewards(request, report=report)


@tool()
def record_inspection_verdict(request: VerdictRequest) -> VerdictResult:
    """Record the person's verdict on review.md (per-sample agree/disagree, pass/fail, who) in
    inspection/verdict.json with the hashes of the reward code and samples. Only record what the person said."""
    return gate.record_inspection_verdict(request)


@tool()
def check_inspection_gate(request: GateRequest) -> GateResult:
    """Is the run cleared to train? Passes only with a passing verdict whose hashes match the current rewards
    (train/rewards.json and reward code) and samples. Says why not and how to clear it."""
    return gate.check_inspection_gate(request.run)


# ---------------------------------------------------------------- rewards


@tool()
def list_rewards() -> RewardCatalog:
    """The reward registry: each reward's name, what it scores, the data set columns it reads and its
    parameters with defaults. Name rewards in a recipe as {name, params, weight}; a dotted import path
    names your own reward function."""
    return registry.list_rewards()


# ---------------------------------------------------------------- memory planner


@tool()
def plan_memory(request: MemoryPlanRequest) -> MemoryPlan:
    """Will this GRPO run fit? Per-GPU GiB breakdown (weights, gradients, optimizer state, reference model,
    activations, logits, vLLM weights and KV cache, overhead), the peak and headroom; when it does not fit,
    the levers ranked by GiB saved and the smallest set that fits, each as a validated config change; the
    size-class anchor as a cross-check; rollout speed from the GPU's memory bandwidth. Give a model (catalog
    name, local path) or a train/config.yaml from emit_grpo_config, and the GPU type and count."""
    return planner.plan_memory(request)


# ---------------------------------------------------------------- diagnosis


@tool()
def diagnose_run(request: DiagnoseRequest) -> Diagnosis:
    """Why is this training run going wrong? Reads a run directory, a progress.jsonl, a TRL trainer_state.json
    or a CSV/JSONL metrics export (plus the run's config and stdout log when known) and returns findings, most
    important first: {code, severity, evidence [{metric, step, value}], explanation, patch}. Each patch is a dict
    of config changes, validated against the run's config. Works for runs this project did not launch."""
    return diagnose.diagnose_run(request)


# ---------------------------------------------------------------- training: environment, launch, status


@tool()
def check_environment(request: EnvironmentRequest) -> EnvironmentReport:
    """What can train here? GPUs (name, memory, compute capability, bf16), CUDA/driver, RAM, free disk, versions
    of torch/trl/transformers/peft/accelerate/vllm in the training interpreter, and a verdict ready |
    ready-with-warnings | blocked with reasons, judged against the run's target when a run is given.
    Writes env-report.json (in the run directory, else the workspace root)."""
    return environment.check_environment(request)


@tool()
def prepare_environment(request: PrepareRequest) -> PrepareResult:
    """Build a training environment (a venv with torch (the CPU build without an NVIDIA GPU), TRL, transformers
    and the rest) in the background, for when there is none to point LLM_FINETUNING_PYTHON at. Returns at once
    with the log to watch; call again for its status (running | ready | failed, with the log's tail). Once
    ready, the server samples, validates with TRL, trains and evaluates with it."""
    return prepare.prepare_environment(request)


@tool()
def launch_training(request: LaunchRequest) -> LaunchResult:
    """Start a run's training as a detached process (it outlives this server) and return at once. Refuses,
    naming the gate and how to clear it, unless the config validates, the inspection verdict is current and
    passing, and the environment is not blocked. Records config.yaml/train.py (git commit when in a repo, sha256
    in run.json). Several GPUs: accelerate with TRL's ZeRO/FSDP configs (+ `trl vllm-serve` in server mode);
    several nodes: writes a SLURM script."""
    return launch.launch_training(request)


@tool()
def training_status(request: StatusRequest) -> Annotated[CallToolResult, TrainingStatus]:
    """State of a run (starting | running | succeeded | failed | stopped), derived from its process and files,
    with the latest metrics, steps/s, ETA, health flags from the diagnosis rules, the log's last lines, and on
    request a PNG plot of reward, reward_std, KL, entropy and completion length (returned as an image)."""
    result = status.training_status(request)
    content = [TextContent(type="text", text=result.model_dump_json(indent=2))]
    if result.plot_path:
        content.append(Image(path=result.plot_path).to_image_content())
    return CallToolResult(content=content, structured_content=result.model_dump(mode="json"))


@tool()
def stop_training(request: StopRequest) -> StopResult:
    """Stop a run gracefully: it saves a checkpoint at its next step end and exits; after timeout_s its whole
    process group is killed."""
    return status.stop_training(request)


@tool()
def resume_training(request: RunRequest) -> LaunchResult:
    """Continue a stopped or failed run from its latest checkpoint, with the same process layout. Refuses when
    train/config.yaml changed since launch (its sha256 in run.json), when there is no checkpoint, or when a gate
    (inspection, environment) is closed."""
    return launch.resume_training(request)


@tool()
def list_runs() -> RunList:
    """Every run under the workspace's runs/ with its state (derived from process and files), step and model."""
    return status.list_runs()


# ---------------------------------------------------------------- evaluation, promotion, export


@tool()
def evaluate_model(request: EvaluateRequest, report: Report) -> EvaluationResult:
    """Greedy decoding (fixed seed) over a goldens file, graded pass/fail by the same verifiers as the rewards;
    pass rate with a 95% Wilson interval and per-item results. The first evaluation of a base model writes
    eval/baseline-<model>.json, which is never overwritten or loosened."""
    return evaluate.evaluate_model(request, report=report)


@tool()
def promote_checkpoint(request: PromoteRequest, report: Report) -> PromotionResult:
    """Judge a run's checkpoint: the same goldens (sha256), graders and decoding as the base model's baseline,
    plus a frozen drift suite under the drift budget (<= 1 point noise, 1-5 points rerun with other seeds,
    > 5 points hard fail). Writes promotion-report.md and promotion.json with PROMOTE or REJECT and evidence."""
    return promote.promote_checkpoint(request, report=report)


@tool()
def export_model(request: ExportRequest, report: Report) -> ExportResult:
    """Export a promoted run: merge LoRA adapters when present, save safetensors, tokenizer and a model card
    (base model, config hash, rewards, inspection and promotion verdicts) into <run>/export/, and check that
    greedy outputs on a few goldens are identical before and after."""
    return export.export_model(request, report=report)


mcp = MCPServer(
    "llm-finetuning",
    instructions=(
        "Fine-tune language models with GRPO / RLVR on Hugging Face TRL. Every number and check comes "
        "from these tools: emit and validate configs, plan memory, inspect rewards, launch, monitor and "
        "diagnose training, evaluate, promote and export."
    ),
    tools=TOOLS,
)


# ---------------------------------------------------------------- content: /finetune prompt, references
def _register_content() -> None:
    """The /finetune command as an MCP prompt and every references/*.md page as a resource, so a harness
    without plugin commands still gets the workflow and the reference pages."""
    @mcp.prompt(
        name="finetune",
        title="/finetune: seven gated phases from a goal to an exported checkpoint",
        description="The llm-finetuning lifecycle (eval baseline, method choice and reward inspection, data, "
        "environment, training, checkpoint gate, export) with the goal filled in.",
    )
    def finetune(goal: str) -> str:
        """goal: what the model should be reliably right at, e.g. 'Qwen2.5-1.5B solves our invoice questions'."""
        return finetune_prompt_text(goal)

    for path in reference_files():
        mcp.add_resource(
            FileResource(
                uri=RESOURCE_SCHEME + path.name,
                name=path.stem,
                title=reference_title(path),
                description=f"Reference page {path.name} of the llm-finetuning plugin.",
                mime_type="text/markdown",
                path=path,
            )
        )


_register_content()


def main() -> None:
    mcp.run("stdio")


if __name__ == "__main__":
    main()

"""Every tool, in the order the doors list them: each feature package's `tools.py` (its request and result
models, core, MCP description, command-line specifics and readable summary), plus the CLI's `demo`.

Adding a tool touches its package only: a ToolSpec in that package's TOOLS. A new package's list is added here.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from mcp_server.demo_models import DemoSummary
from mcp_server.diagnosis import tools as diagnosis
from mcp_server.emission import tools as emission
from mcp_server.evaluation import tools as evaluation
from mcp_server.inspection import tools as inspection
from mcp_server.memory import tools as memory
from mcp_server.recipe import tools as recipe
from mcp_server.rewards import tools as rewards
from mcp_server.errors import UserInputError
from mcp_server.reporting import Report, silent
from mcp_server.toolspec import Command, ToolSpec, print_result, read_only
from mcp_server.training import tools as training
from mcp_server.training.models import LaunchRequest, LaunchResult
from mcp_server.worker import apart
from mcp_server.worker_targets import BASELINE_WARNINGS


def _run_demo(quick: bool = False, run_name: str | None = None, as_json: bool = False,
              model: str = "tiny") -> DemoSummary:
    if model == "smollm2-135m":
        from mcp_server.demo_smollm2 import run_smollm2_demo

        return run_smollm2_demo(run_name=run_name, as_json=as_json)
    from mcp_server.demo import run_demo

    return run_demo(quick=quick, run_name=run_name, as_json=as_json)


def _add_demo_flags(p) -> None:
    p.add_argument("--quick", action="store_true", help="A shortened walk (fewer steps): checks the plumbing, "
                   "does not aim to improve the model.")
    p.add_argument("--run-name", help="Slug for runs/<date>-<slug>/ (default: demo, demo-quick with --quick, "
                   "demo-smollm2 with --model smollm2-135m).")
    p.add_argument("--model", choices=["tiny", "smollm2-135m"], default="tiny",
                   help="tiny: the embedded model (SFT warm start, then GRPO); smollm2-135m: SmolLM2-135M-Instruct "
                   "from a PyPI wheel, GRPO with LoRA from the base model (about 20 minutes on 2 cores; --quick does "
                   "not apply).")


def _demo(args, request) -> int:
    if args.model == "smollm2-135m" and args.quick:
        print("error: --quick applies to the tiny demo only", file=sys.stderr)
        return 2
    # the walk's imports (every core) only when it runs
    summary = _run_demo(quick=args.quick, run_name=args.run_name, as_json=args.json, model=args.model)
    if args.json:
        print_result(summary, True)
    return 0 if summary.ok else 1


DEMO = ToolSpec(
    "demo", _run_demo, DemoSummary,
    cli=Command(
        "Walk all seven phases on the embedded tiny model (or, with --model smollm2-135m, a real pretrained "
        "one): baseline, SFT warm-start, inspection, config, GRPO training, diagnosis, promotion, export (a few "
        "minutes on CPU).",
        json_help="Print the summary as JSON at the end.", extra=_add_demo_flags, handler=_demo,
    ),
)


def with_baseline_warnings(core):
    """launch_training or resume_training, then what promote_checkpoint would find wrong with the run's baseline, as
    warnings in the result (issue 49: a stale baseline was found only at promotion, after training). Here at the
    door, which may import both training and evaluation; the check imports the graders, so it runs apart."""

    def call(request: LaunchRequest, report: Report = silent) -> LaunchResult:
        result = core(request, report=report)
        if not result.launched:
            return result
        try:
            warnings = apart(BASELINE_WARNINGS, result.run_dir)
        except (UserInputError, OSError, ValueError) as exc:
            warnings = [f"the base model's baseline could not be checked ({exc}): promote-checkpoint will say"]
        return result.model_copy(update={"warnings": [*result.warnings, *warnings]})

    return call


def _at_the_door(spec: ToolSpec) -> ToolSpec:
    if spec.name in ("launch_training", "resume_training"):
        return replace(spec, core=with_baseline_warnings(spec.core))
    return spec


TOOLS: list[ToolSpec] = [
    *emission.TOOLS, *recipe.TOOLS, *memory.VALIDATION_TOOLS, *inspection.TOOLS, *rewards.TOOLS, *memory.TOOLS,
    *diagnosis.TOOLS, *map(_at_the_door, training.TOOLS), *evaluation.TOOLS, DEMO,
]


# What the MCP door lists: every tool with a description (the door refuses one without Effects), or in the read-only
# mode only those whose Effects say they write nothing.
MCP_TOOLS = [spec for spec in TOOLS if spec.description is not None
             and not (read_only() and (spec.effects is None or spec.effects.writes))]

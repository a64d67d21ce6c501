"""The diagnosis package's tool: diagnose_run, with its readable summary."""

from __future__ import annotations

import json

from mcp_server.diagnosis.models import DiagnoseRequest, Diagnosis
from mcp_server.toolspec import READS, Command, Flag, ToolSpec


# The core is imported on the first call, not with the registry: the doors start without the cores' imports.
def diagnose_run(request: DiagnoseRequest | str) -> Diagnosis:
    from mcp_server.diagnosis.diagnose import diagnose_run

    return diagnose_run(request)


def human_diagnosis(d: Diagnosis) -> str:
    icons = {"error": "ERROR  ", "warning": "WARN   ", "info": "INFO   "}
    lines = [f"{d.summary}", f"  source: {d.source} ({d.source_kind}, {d.steps_logged} logged steps)"]
    for f in d.findings:
        lines.append(f"  {icons[f.severity]}{f.code}: {f.explanation}")
        for e in f.evidence[:4]:
            where = f" @ step {e.step}" if e.step is not None else ""
            lines.append(f"         {e.metric}{where} = {e.value}")
        if f.caused_by:
            lines.append(f"         caused by {f.caused_by}" + (f" (or {', '.join(f.other_causes)})"
                                                                   if f.other_causes else ""))
        elif f.read_samples_at is not None:
            lines.append(f"         read the samples at step {f.read_samples_at} first"
                         + (f"; other causes that fit: {', '.join(f.other_causes)}" if f.other_causes else ""))
        if f.patch:
            checked = {True: "validates", False: "does NOT validate", None: "not checked"}[f.patch_valid]
            lines.append(f"         patch ({checked}): {json.dumps(f.patch)}")
    return "\n".join(lines)


TOOLS = [
    ToolSpec(
        "diagnose_run", diagnose_run, Diagnosis, request=DiagnoseRequest, effects=READS,
        description="""Why is this training run going wrong? Reads a run directory, a progress.jsonl, a TRL trainer_state.json
    or a CSV/JSONL metrics export (plus the run's config and stdout log when known) and returns findings, root cause
    first: {code, severity, evidence [{metric, step, value}], explanation, patch, onset, caused_by, other_causes,
    read_samples_at}. An effect names its root cause in caused_by and carries no patch; read the samples at the
    root's read_samples_at, then apply its patch (a dict of config changes, validated against the run's config).
    Works for runs this project did not launch.""",  # noqa: E501 (the text MCP clients list)
        cli=Command(
            "Diagnose a training run from its metrics (run dir, progress.jsonl, trainer_state.json, CSV/JSONL export) "
            "and log. Exit 0 when healthy, 1 with problems.", human_diagnosis, lambda r: r.healthy, flags={
                "source": Flag("source"),
                "config_path": Flag("--config"),
                "log_path": Flag("--log"),
                "validate_patches": Flag("--no-validate", "Skip validating the patches (faster; no TRL import).",
                                         invert=True),
            },
        ),
    ),
]

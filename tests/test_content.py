"""The plugin's Markdown: frontmatter, size limits, gates, links, and that it names the server's real tools."""

from __future__ import annotations

import pytest
import asyncio
import difflib
import functools
import re
from pathlib import Path

import yaml

from conftest import ROOT, call_mcp

COMMAND = ROOT / "commands" / "finetune.md"
AGENTS = sorted((ROOT / "agents").glob("*.md"))
SKILLS = sorted((ROOT / "skills").glob("*/SKILL.md"))
REFERENCES = sorted((ROOT / "references").glob("*.md"))
REQUIRED_SKILLS = {"finetuning-method-selection", "grpo-rlvr-training", "grpo-memory-planning", "eval-harness-first"}
REQUIRED_AGENTS = {"llm-finetuning-architect", "llm-finetuning-training-engineer", "llm-finetuning-eval-engineer"}
REQUIRED_REFERENCES = {
    "reward-functions.md",
    "grpo-memory.md",
    "failure-triage.md",
    "trl-metrics.md",
    "trl-versions.md",
    "model-catalog.md",
}
# Issue 4's stable diagnosis codes: each needs its own entry in references/failure-triage.md.
DIAGNOSIS_CODES = [
    "cuda_out_of_memory", "vllm_out_of_memory", "nccl_timeout", "import_error",
    "fp16_divergence", "lr_out_of_range", "nan_loss", "grad_norm_spike", "kl_explosion",
    "no_reward_signal", "completions_truncated", "reward_flat",
    "entropy_collapse", "length_reward_correlation", "moe_without_gspo", "possible_reward_hacking",
    "loss_near_zero_expected",
]
# Backticked words that look like tool calls (a verb of this server's tools, then more words): each must be
# a real tool, so a typo such as `launch_train` or a tool that was renamed fails here.
TOOLISH = re.compile(
    r"`((?:check|emit|validate|list|sample|inspect|record|launch|training|stop|resume|diagnose|plan|evaluate|"
    r"promote|export)_[a-z_]+)`"
)


def markdown_files() -> list[Path]:
    files = [COMMAND, *AGENTS, *SKILLS, *REFERENCES]
    files += sorted((ROOT / "docs").glob("*.md")) if (ROOT / "docs").is_dir() else []
    return files


def frontmatter(path: Path) -> tuple[dict, str]:
    text = path.read_text(encoding="utf-8")
    match = re.match(r"\A---\n(.*?)\n---\n", text, re.S)
    assert match, f"{path.relative_to(ROOT)}: no YAML frontmatter"
    meta = yaml.safe_load(match.group(1))
    assert isinstance(meta, dict), f"{path.relative_to(ROOT)}: frontmatter is not a mapping"
    return meta, text[match.end():]


@functools.lru_cache(maxsize=1)
def server_tools() -> frozenset[str]:
    from mcp_server.server import mcp

    return frozenset(tool.name for tool in asyncio.run(mcp.list_tools()))


# ---------------------------------------------------------------- frontmatter and sizes
def test_every_required_piece_exists():
    assert {p.parent.name for p in SKILLS} >= REQUIRED_SKILLS
    assert {p.stem for p in AGENTS} >= REQUIRED_AGENTS
    assert COMMAND.is_file()
    missing = REQUIRED_REFERENCES - {p.name for p in REFERENCES}
    assert not missing, f"references missing: {sorted(missing)}"


def test_skill_frontmatter_and_body_under_8kb():
    for path in SKILLS:
        meta, body = frontmatter(path)
        assert meta.get("name") == path.parent.name, f"{path}: name must equal its folder"
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", meta["name"]) and len(meta["name"]) <= 64
        description = meta.get("description", "")
        assert 40 <= len(description) <= 1024, f"{path}: description must say when to use it (<= 1024 chars)"
        assert "use" in description.lower(), f"{path}: description should say when to use the skill"
        # Codex reads at most 8 KB of a skill body; details belong in references/.
        assert len(body.encode("utf-8")) < 8 * 1024, f"{path}: body is {len(body.encode())} bytes"


def test_agent_and_command_frontmatter():
    for path in AGENTS:
        meta, body = frontmatter(path)
        assert meta.get("name") == path.stem, f"{path}: name must equal the file name"
        assert len(meta.get("description", "")) >= 40, f"{path}: description too short"
        assert body.strip()
    meta, _ = frontmatter(COMMAND)
    assert meta.get("description") and meta.get("argument-hint")
    assert "$ARGUMENTS" in COMMAND.read_text(encoding="utf-8")


# ---------------------------------------------------------------- the seven gated phases
def phases() -> dict[int, str]:
    text = COMMAND.read_text(encoding="utf-8")
    parts = re.split(r"^## Phase (\d+):", text, flags=re.M)
    return {int(parts[i]): parts[i + 1] for i in range(1, len(parts), 2)}


def test_seven_phases_each_with_gate_agent_and_tools():
    found = phases()
    assert sorted(found) == list(range(7)), f"phases found: {sorted(found)}"
    agent_names = {p.stem for p in AGENTS}
    for number, section in found.items():
        assert re.search(rf"^\*\*Gate {number}:\*\* .+", section, re.M), f"phase {number} has no gate"
        agent = re.search(r"^\*\*Agent:\*\* `([^`]+)`", section, re.M)
        assert agent and agent.group(1) in agent_names, f"phase {number}: agent missing or unknown"
        tools_line = re.search(r"^\*\*Tools:\*\*(.+?)(?:\n\n|\n[^`\n]*\n\n)", section, re.M | re.S)
        assert tools_line and re.findall(r"`([a-z_]+)`", tools_line.group(1)), f"phase {number}: no tools named"


def test_gates_name_their_artifacts():
    gates = {n: re.search(rf"\*\*Gate {n}:\*\*(.+?)(?:\n\n|\Z)", s, re.S).group(1) for n, s in phases().items()}
    artifacts = {
        0: "eval/baseline-<model>--<task>.json", 1: "training-brief.md", 2: "validation report", 3: "env-report.json",
        4: "outcome.json", 5: "promotion-report.md", 6: "export/",
    }
    for number, artifact in artifacts.items():
        assert artifact in gates[number], f"gate {number} should name {artifact}"
    assert "REJECT" in gates[5] and "stop" in gates[5].lower()
    assert "blocked" in phases()[3] and "ready-with-warnings" in gates[3]
    assert "check_inspection_gate" in gates[1]


# ---------------------------------------------------------------- tools named == tools served
def tools_lines(path: Path) -> set[str]:
    """The names on a file's `**Tools:**` lines (the command's phases)."""
    text = path.read_text(encoding="utf-8")
    names: set[str] = set()
    for line in re.findall(r"^\*\*Tools:\*\*(.+?)(?:\n\n|\n\*\*)", text, re.M | re.S):
        names |= set(re.findall(r"`([a-z_]+)`", line))
    return names


def documented_tools() -> dict[str, set[str]]:
    """tool name -> the files that name it (Tools: lines and backticked tool-like words)."""
    named: dict[str, set[str]] = {}
    for path in markdown_files():
        words = set(TOOLISH.findall(path.read_text(encoding="utf-8"))) | tools_lines(path)
        for word in words:
            named.setdefault(word, set()).add(str(path.relative_to(ROOT)))
    return named


def test_every_tool_the_markdown_names_exists_on_the_server():
    """Tools: lines must name served tools exactly; elsewhere a tool-like word that is not a tool but is
    close to one (`launch_train`, `list_reward`, `emit_config`) is a typo or a stale name. Field names such
    as `sample_index` are not close to any tool and pass."""
    tools = server_tools()
    unknown = {}
    for name, files in documented_tools().items():
        if name in tools:
            continue
        in_tools_line = any(name in tools_lines(ROOT / f) for f in files)
        if in_tools_line or difflib.get_close_matches(name, tools, n=1, cutoff=0.75):
            unknown[name] = sorted(files)
    assert not unknown, f"named in Markdown but not served: {unknown}"


def test_every_server_tool_is_documented():
    text = "\n".join(p.read_text(encoding="utf-8") for p in markdown_files())
    undocumented = sorted(t for t in server_tools() if f"`{t}`" not in text)
    assert not undocumented, f"server tools no Markdown page names: {undocumented}"


# ---------------------------------------------------------------- links and paths
PLUGIN_PATH = re.compile(
    r"`((?:references|agents|skills|commands|scripts|docs)/[A-Za-z0-9_./-]+\.(?:md|py|json|toml))`"
)


def test_every_relative_link_and_plugin_path_resolves():
    broken = []
    for path in markdown_files():
        text = path.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            if not (path.parent / target.split("#")[0]).exists():
                broken.append(f"{path.relative_to(ROOT)} -> {target}")
        for target in PLUGIN_PATH.findall(text):
            if "<" not in target and not (ROOT / target).exists():
                broken.append(f"{path.relative_to(ROOT)} -> {target}")
    assert not broken, "unresolved paths:\n" + "\n".join(broken)


def test_skills_and_agents_only_name_real_skills_and_agents():
    skills = {p.parent.name for p in SKILLS}
    agents = {p.stem for p in AGENTS}
    for path in markdown_files():
        text = path.read_text(encoding="utf-8")
        for name in re.findall(r"`(llm-finetuning-[a-z-]+)`", text):
            assert name in agents, f"{path.relative_to(ROOT)} names unknown agent {name}"
        for name in re.findall(r"`((?:finetuning|grpo|eval)-[a-z-]+)`", text):
            assert name in skills, f"{path.relative_to(ROOT)} names unknown skill {name}"


def test_failure_triage_covers_every_diagnosis_code():
    text = (ROOT / "references" / "failure-triage.md").read_text(encoding="utf-8")
    headings = set(re.findall(r"^### `([a-z0-9_]+)`", text, re.M))
    from mcp_server.diagnosis.diagnose import CODES

    codes = set(DIAGNOSIS_CODES) | set(CODES)  # the diagnosis module's own list and this test's
    missing = sorted(codes - headings)
    assert not missing, f"failure-triage.md lacks: {missing}"


def test_trl_versions_matches_the_installed_trl():
    """The page's *installed* claims are checked against the TRL in this environment."""
    import dataclasses

    from trl import GRPOConfig

    fields = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    assert "max_prompt_length" not in fields
    assert fields["loss_type"] == "dapo" and fields["beta"] == 0.0 and fields["vllm_mode"] == "colocate"
    assert fields["scale_rewards"] == "group" and fields["max_completion_length"] == 512
    text = (ROOT / "references" / "trl-versions.md").read_text(encoding="utf-8")
    for claim in ('`"dapo"`', "`0.0`", '`"colocate"`', '`"group"`', "`512`", "`max_prompt_length`"):
        assert claim in text
    # Every removal or rename the validator reports is explained on the page, with its replacement.
    from mcp_server.recipe.field_rules import REMOVED_OR_RENAMED

    for old, (new, _why) in REMOVED_OR_RENAMED.items():
        assert f"`{old}`" in text, f"trl-versions.md does not explain {old}"
        assert new is None or f"`{new}`" in text, f"trl-versions.md does not name {new}"


# ---------------------------------------------------------------- MCP prompt and resources over stdio
@pytest.mark.slow
def test_finetune_prompt_and_reference_resources_over_stdio():
    async def calls(client):
        prompts = await client.list_prompts()
        prompt = await client.get_prompt("finetune", {"goal": "sum two integers exactly"})
        resources = await client.list_resources()
        page = await client.read_resource("llm-finetuning://references/failure-triage.md")
        return prompts, prompt, resources, page

    prompts, prompt, resources, page = asyncio.run(call_mcp(calls))
    assert "finetune" in [p.name for p in prompts.prompts]
    text = prompt.messages[0].content.text
    assert "Goal: sum two integers exactly" in text and "$ARGUMENTS" not in text
    assert all(f"## Phase {n}:" in text for n in range(7))
    uris = {str(r.uri) for r in resources.resources}
    assert {f"llm-finetuning://references/{p.name}" for p in REFERENCES} <= uris
    assert "no_reward_signal" in page.contents[0].text

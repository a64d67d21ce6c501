"""Every harness's plugin files: generated from plugin.json without drift, consistent, pointing at the
launcher; the launcher itself; and the real external checks (Claude Code's validator, the MCP inspector)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

try:
    import tomllib  # Python 3.11+
except ModuleNotFoundError:  # 3.10: the TOML checks skip (fail under CI), the rest still run
    tomllib = None

from conftest import ROOT, skip_unless_ci

from mcp_server import manifests

LAUNCHER = ROOT / "scripts" / "launch_server.py"
SOURCE = json.loads((ROOT / "plugin.json").read_text(encoding="utf-8"))
AGENT_NAMES = {p.stem for p in (ROOT / "agents").glob("*.md")}
NPM_TOOLS = {"@anthropic-ai/claude-code": "2.1.197", "@modelcontextprotocol/inspector": "0.15.0"}


def load(rel: str):
    text = (ROOT / rel).read_text(encoding="utf-8")
    if rel.endswith(".toml"):
        if tomllib is None:
            skip_unless_ci("reading TOML needs tomllib, Python 3.11+")
        return tomllib.loads(text)
    return json.loads(text)


# ---------------------------------------------------------------- generation
def test_generated_files_have_not_drifted():
    stale = manifests.drift(ROOT)
    assert not stale, f"harness files differ from plugin.json + folders: {stale}; run `python -m mcp_server.manifests`"


def test_drift_is_detected_when_the_source_changes(tmp_path):
    for rel in ["plugin.json", "commands", "agents", "skills", *manifests.build(ROOT)]:
        src, dst = ROOT / rel, tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src, dst, dirs_exist_ok=True) if src.is_dir() else shutil.copy(src, dst)
    assert manifests.drift(tmp_path) == []
    source = json.loads((tmp_path / "plugin.json").read_text())
    source["version"] = "9.9.9"
    (tmp_path / "plugin.json").write_text(json.dumps(source))
    agent = tmp_path / "agents" / "llm-finetuning-architect.md"
    agent.write_text(agent.read_text().replace("You are the architect", "You are the planner"))
    stale = set(manifests.drift(tmp_path))
    assert {".claude-plugin/plugin.json", "gemini-extension.json", ".codex-plugin/plugin.json"} <= stale
    assert {".opencode/agent/llm-finetuning-architect.md", ".github/agents/llm-finetuning-architect.agent.md"} <= stale
    # The CLI door: --check fails on drift, a plain run repairs it.
    cmd = [sys.executable, "-m", "mcp_server.manifests", "--root", str(tmp_path)]
    assert subprocess.run(cmd + ["--check"], capture_output=True, cwd=ROOT).returncode == 1
    assert subprocess.run(cmd, capture_output=True, cwd=ROOT).returncode == 0
    assert manifests.drift(tmp_path) == []


def test_versions_and_names_agree_everywhere():
    pyproject = load("pyproject.toml")["project"]["version"]
    assert SOURCE["version"] == pyproject
    for rel in (".claude-plugin/plugin.json", ".cursor-plugin/plugin.json", ".codex-plugin/plugin.json", "gemini-extension.json"):
        data = load(rel)
        assert (data["name"], data["version"]) == (SOURCE["name"], SOURCE["version"]), rel
    market = load(".claude-plugin/marketplace.json")
    assert market["plugins"][0]["name"] == SOURCE["name"] and market["plugins"][0]["source"] == "./"


def test_cursor_and_codex_manifests_use_their_documented_fields():
    # The fields of Cursor's published plugin schema (additionalProperties: false).
    cursor_fields = {"name", "displayName", "description", "version", "author", "publisher", "homepage", "repository",
                     "license", "logo", "keywords", "category", "tags", "commands", "agents", "skills", "rules",
                     "hooks", "variables", "mcpServers"}
    cursor = load(".cursor-plugin/plugin.json")
    assert set(cursor) <= cursor_fields and re.fullmatch(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?", cursor["name"])
    codex = load(".codex-plugin/plugin.json")
    for key in ("skills", "mcpServers"):  # Codex resolves these inside the plugin root, written with ./
        assert codex[key].startswith("./") and (ROOT / codex[key]).exists()
    for key in ("commands", "agents", "skills", "mcpServers"):
        assert (ROOT / cursor[key]).exists()


def server_entries() -> dict[str, tuple[dict, str]]:
    """Each harness's server entry, with the root variable it uses."""
    gemini = load("gemini-extension.json")["mcpServers"]["llm-finetuning"]
    opencode = load("opencode.json")["mcp"]["llm-finetuning"]
    return {
        "claude-code": (load(".mcp.json")["mcpServers"]["llm-finetuning"], "${CLAUDE_PLUGIN_ROOT}"),
        "cursor-plugin": (load("mcp.json")["mcpServers"]["llm-finetuning"], "${CURSOR_PLUGIN_ROOT}"),
        "cursor-project": (load(".cursor/mcp.json")["mcpServers"]["llm-finetuning"], "${workspaceFolder}"),
        "codex-plugin": (load(".codex-mcp.json")["mcpServers"]["llm-finetuning"], ""),
        "codex-project": (load(".codex/config.toml")["mcp_servers"]["llm-finetuning"], ""),
        "gemini": ({**gemini, "args": [a.replace("${/}", "/") for a in gemini["args"]]}, "${extensionPath}"),
        "opencode": ({"command": opencode["command"][0], "args": opencode["command"][1:]}, ""),
        "copilot": (load(".vscode/mcp.json")["servers"]["llm-finetuning"], "${workspaceFolder}"),
    }


def test_every_harness_starts_the_launcher_with_python3():
    for harness, (entry, variable) in server_entries().items():
        assert entry["command"] == "python3", harness
        (script,) = entry["args"]
        path = script.replace(variable + "/", "") if variable else script
        assert (ROOT / path).resolve() == LAUNCHER, f"{harness}: {script}"


def test_agent_names_in_every_harness_copy_of_the_command_exist_in_that_harness():
    agents_of = {
        "commands/finetune.md": AGENT_NAMES,  # Claude Code, Cursor: agents/ at the plugin root
        ".opencode/command/finetune.md": {p.stem for p in (ROOT / ".opencode/agent").glob("*.md")},
        ".github/prompts/finetune.prompt.md": {p.name.removesuffix(".agent.md") for p in (ROOT / ".github/agents").glob("*.agent.md")},
        # Gemini runs no sub-agents: its copy tells the model to read agents/<name>.md, which must exist.
        "commands/finetune.toml": AGENT_NAMES,
    }
    assert agents_of[".opencode/command/finetune.md"] == agents_of[".github/prompts/finetune.prompt.md"] == AGENT_NAMES
    for rel, agents in agents_of.items():
        text = load(rel)["prompt"] if rel.endswith(".toml") else (ROOT / rel).read_text(encoding="utf-8")
        named = set(re.findall(r"\b(llm-finetuning-[a-z]+(?:-[a-z]+)*)\b", text)) - {"llm-finetuning-architect.md"}
        assert named, rel
        assert named <= agents, f"{rel} names agents this harness lacks: {sorted(named - agents)}"
        assert "Phase 6" in text


def test_harness_copies_have_valid_frontmatter_and_arguments():
    for path in [*(ROOT / ".opencode").rglob("*.md"), *(ROOT / ".github").rglob("*.md")]:
        match = re.match(r"\A---\n(.*?)\n---\n", path.read_text(encoding="utf-8"), re.S)
        assert match and yaml.safe_load(match.group(1)).get("description"), path
    assert "$ARGUMENTS" in (ROOT / ".opencode/command/finetune.md").read_text()
    assert "${input:goal" in (ROOT / ".github/prompts/finetune.prompt.md").read_text()
    assert "{{args}}" in load("commands/finetune.toml")["prompt"]


# ---------------------------------------------------------------- the launcher
def run_launcher(venv: Path, cwd: Path, **env):
    return subprocess.run(
        [sys.executable, str(LAUNCHER)], cwd=cwd, capture_output=True, text=True, timeout=60,
        env={**os.environ, "LLM_FINETUNING_VENV": str(venv), "LLM_FINETUNING_LAUNCH_DRY_RUN": "1", **env},
    )


def test_launcher_first_start_plan_says_so_on_stderr_only(tmp_path):
    proc = run_launcher(tmp_path / "venv", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""  # stdout is the MCP channel
    assert "first start" in proc.stderr and "later starts are instant" in proc.stderr
    # The server's environment is light: the base dependencies, no torch, no install of the plugin itself.
    assert "-m venv" in proc.stderr and "mcp>=2" in proc.stderr and "pydantic" in proc.stderr
    plan = [line for line in proc.stderr.splitlines() if "would run" in line]
    assert len(plan) == 2 and not any("torch" in line or " -e " in line for line in plan), plan


def ready_venv(tmp_path: Path) -> Path:
    """A venv the launcher considers prepared: built without pip, seeing this environment's packages."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python*/site-packages")) if os.name != "nt" else venv / "Lib/site-packages"
    (site / "_llm_finetuning_test.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    launcher = runpy.run_path(str(LAUNCHER))  # its functions, without running main()
    (venv / launcher["MARKER"]).write_text(launcher["fingerprint"]() + "\n")
    return venv


def test_launcher_execs_the_server_from_a_prepared_venv_over_stdio(tmp_path):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    venv = ready_venv(tmp_path)
    proc = run_launcher(venv, tmp_path)
    assert "environment ready" in proc.stderr and "would exec" in proc.stderr and proc.stdout == ""

    workspace = tmp_path / "project"
    workspace.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "LLM_FINETUNING_WORKSPACE"}
    params = StdioServerParameters(
        command=sys.executable, args=[str(LAUNCHER)], cwd=str(workspace), env={**env, "LLM_FINETUNING_VENV": str(venv)}
    )

    async def session():
        async with Client(params) as client:
            tools = await client.list_tools()
            prompt = await client.get_prompt("finetune", {"goal": "exact sums"})
            return {t.name for t in tools.tools}, prompt

    tools, prompt = asyncio.run(session())
    assert {"emit_grpo_config", "validate_grpo_config"} <= tools
    assert "Goal: exact sums" in prompt.messages[0].content.text


# ---------------------------------------------------------------- real external tools from npm
@pytest.fixture(scope="module")
def npm_bin() -> Path:
    """Claude Code and the MCP inspector installed from npm into a cache directory (once)."""
    if not shutil.which("npm"):
        skip_unless_ci("npm is not installed: cannot run Claude Code's validator or the MCP inspector")
    cache = Path(os.environ.get("LLM_FINETUNING_NPM_TOOLS") or Path.home() / ".cache" / "llm-finetuning" / "npm-tools")
    bin_dir = cache / "node_modules" / ".bin"
    if not ((bin_dir / "claude").exists() and (bin_dir / "mcp-inspector").exists()):
        cache.mkdir(parents=True, exist_ok=True)
        specs = [f"{name}@{version}" for name, version in NPM_TOOLS.items()]
        try:
            proc = subprocess.run(
                ["npm", "install", "--prefix", str(cache), "--no-audit", "--no-fund", *specs],
                capture_output=True, text=True, timeout=300,
            )
        except subprocess.TimeoutExpired:
            skip_unless_ci("npm registry did not answer within 300 s: cannot install Claude Code or the MCP inspector")
        if proc.returncode != 0:
            text = proc.stderr + proc.stdout
            unreachable = re.search(r".*(ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|network|offline).*", text, re.I)
            if unreachable:
                skip_unless_ci(f"npm registry unreachable, cannot install Claude Code / the MCP inspector: {unreachable.group(0).strip()}")
            raise AssertionError(f"npm install failed:\n{text}")
    return bin_dir


@pytest.mark.parametrize("target", [".claude-plugin/plugin.json", ".claude-plugin/marketplace.json"])
def test_claude_plugin_validate_strict(npm_bin, target):
    proc = subprocess.run(
        [str(npm_bin / "claude"), "plugin", "validate", "--strict", str(ROOT / target)],
        capture_output=True, text=True, timeout=180, cwd=ROOT, env={**os.environ, "CI": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Validation passed" in proc.stdout


def test_mcp_inspector_cli_lists_tools_and_calls_one_through_the_launcher(npm_bin, tmp_path):
    venv = ready_venv(tmp_path)
    env = {**os.environ, "LLM_FINETUNING_VENV": str(venv), "LLM_FINETUNING_WORKSPACE": str(tmp_path)}
    base = [str(npm_bin / "mcp-inspector"), "--cli", sys.executable, str(LAUNCHER)]
    listed = subprocess.run(base + ["--method", "tools/list"], capture_output=True, text=True, timeout=180, env=env)
    assert listed.returncode == 0, listed.stderr
    names = {tool["name"] for tool in json.loads(listed.stdout)["tools"]}
    assert {"emit_grpo_config", "validate_grpo_config"} <= names
    # Call a real tool (a light one: the suite is shared by 2 CPU cores; validate_grpo_config imports TRL).
    called = subprocess.run(
        base + ["--method", "tools/call", "--tool-name", "list_rewards"], capture_output=True, text=True, timeout=180, env=env
    )
    assert called.returncode == 0, called.stderr
    result = json.loads(called.stdout)
    assert not result.get("isError"), result
    names = {reward["name"] for reward in result["structuredContent"]["rewards"]}
    assert {"format_reward", "correctness_reward", "code_execution_reward"} <= names

"""The plugin's Markdown as MCP content: the /finetune command as a prompt, the references as resources.

Harnesses without plugin commands (or with MCP only) still get the workflow and the reference pages
this way. Standard library only: the MCP door imports it at start-up.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

RESOURCE_SCHEME = "llm-finetuning://references/"
_FRONTMATTER = re.compile(r"\A---\n.*?\n---\n", re.S)


def plugin_root() -> Path:
    """The plugin's root folder (commands/, agents/, skills/, references/ live there).

    The launcher sets LLM_FINETUNING_PLUGIN_ROOT; otherwise the package's parent folder, which is the
    plugin root for the editable install the launcher and the Makefile make.
    """
    env = os.environ.get("LLM_FINETUNING_PLUGIN_ROOT")
    return Path(env).resolve() if env else Path(__file__).resolve().parents[1]


def strip_frontmatter(text: str) -> str:
    return _FRONTMATTER.sub("", text, count=1).lstrip("\n")


def split_frontmatter(text: str) -> tuple[dict[str, str], str]:
    """Flat `key: value` YAML frontmatter (all this plugin uses) and the body after it."""
    match = _FRONTMATTER.match(text)
    if not match:
        return {}, text
    meta = {}
    for line in match.group(0).splitlines()[1:-1]:
        key, sep, value = line.partition(":")
        if sep and key.strip() and not line.startswith((" ", "\t", "-")):
            meta[key.strip()] = value.strip().strip('"').strip("'")
    return meta, text[match.end():]


def finetune_prompt_text(goal: str) -> str:
    """commands/finetune.md without its frontmatter, with the goal in place of $ARGUMENTS."""
    path = plugin_root() / "commands" / "finetune.md"
    body = strip_frontmatter(path.read_text(encoding="utf-8"))
    return body.replace("$ARGUMENTS", goal.strip() or "(ask the person for their goal first)")


def reference_files() -> list[Path]:
    folder = plugin_root() / "references"
    return sorted(folder.glob("*.md")) if folder.is_dir() else []


def reference_title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem

"""What the MCP door serves besides its tools: the /finetune command as a prompt, every references/*.md page as a
resource, the skills/ folder per SEP-2640 (the Skills extension, `io.modelcontextprotocol/skills`), and
`logging/setLevel`.

Skills (SEP-2640): each `skills/<name>/` folder is one skill. Every file in it is a resource
`skill://<name>/<path>` read with `resources/read`; `skills/list` returns every skill's entry and `skills/get`
one entry by the URI of its SKILL.md: `{uri, frontmatter (the SKILL.md YAML frontmatter, verbatim), resources
(each file's uri, sha256 digest of its bytes and size)}`, with `resultType: "complete"` and the cache hints
`ttlMs`/`cacheScope` the SEP requires; an unknown URI is error -32602. The extension is declared under the
capabilities' `extensions` (2026-07-28 on), and under `experimental` for the earlier versions, whose capabilities
have no `extensions` (this server's choice: the SEP is written against 2026-07-28). The optional
`resources/directory/read` is not served (`directoryRead` is not declared): every skill's entry lists all its files.

Logging: `logging/setLevel` (protocol versions before 2026-07-28) sets the least severe level the client wants;
serving it is what declares the `logging` capability. A tool's progress messages are `info`.
"""

from __future__ import annotations

import hashlib
import mimetypes
from pathlib import Path
from typing import Any, get_args

import yaml
from mcp.server.extension import Extension, MethodBinding, ResourceBinding
from mcp.server.mcpserver.resources import FileResource
from mcp.shared.exceptions import MCPError
from mcp_types import (INVALID_PARAMS, EmptyResult, LoggingLevel, PaginatedRequestParams, RequestParams,
                       SetLevelRequestParams)

from mcp_server.content import RESOURCE_SCHEME, finetune_prompt_text, plugin_root, reference_files, reference_title

SKILLS_EXTENSION = "io.modelcontextprotocol/skills"
SKILL_SCHEME = "skill://"
# Before 2026-07-28 a capability has no `extensions` field: the skills extension is declared under `experimental`.
LEGACY_CAPABILITIES = {SKILLS_EXTENSION: {}}
CACHE = {"ttlMs": 3_600_000, "cacheScope": "public"}  # the skills change only with the plugin
LEVELS: tuple[str, ...] = get_args(LoggingLevel)
LOG_LEVEL = {"level": LEVELS[0]}  # every level until the client asks for less; one stdio session per process


def logs(level: str) -> bool:
    """Whether a message at `level` goes to the client (its logging/setLevel)."""
    return LEVELS.index(level) >= LEVELS.index(LOG_LEVEL["level"])


async def _set_level(ctx, params: SetLevelRequestParams) -> EmptyResult:
    LOG_LEVEL["level"] = params.level
    return EmptyResult()


# ---------------------------------------------------------------- skills (SEP-2640)
def _frontmatter(text: str) -> dict[str, Any]:
    if not text.startswith("---\n"):
        return {}
    head, sep, _ = text[4:].partition("\n---")
    loaded = yaml.safe_load(head) if sep else None
    return loaded if isinstance(loaded, dict) else {}


def skills() -> dict[str, dict[str, Any]]:
    """Each skill's entry by the URI of its SKILL.md, and its files by URI (`files`, not served in the entry)."""
    folder = plugin_root() / "skills"
    found = {}
    for skill_md in sorted(folder.glob("*/SKILL.md")) if folder.is_dir() else []:
        root = skill_md.parent
        meta = _frontmatter(skill_md.read_text(encoding="utf-8"))
        if meta.get("name") != root.name or not meta.get("description"):
            continue  # SEP-2640: the path's last segment is the frontmatter's name; name and description required
        files = {f"{SKILL_SCHEME}{root.name}/{p.relative_to(root).as_posix()}": p
                 for p in sorted(root.rglob("*")) if p.is_file() and not p.name.startswith(".")}
        uri = f"{SKILL_SCHEME}{root.name}/SKILL.md"
        found[uri] = {"uri": uri, "frontmatter": meta, "resources": [
            {"uri": u, "digest": "sha256:" + hashlib.sha256(data).hexdigest(), "size": len(data)}
            for u, data in ((u, p.read_bytes()) for u, p in files.items())], "files": files}
    return found


def _entry(skill: dict) -> dict:
    return {k: v for k, v in skill.items() if k != "files"}


class SkillGetParams(RequestParams):
    uri: str


async def _list_skills(ctx, params: PaginatedRequestParams) -> dict:
    return {"resultType": "complete", "skills": [_entry(s) for s in skills().values()], **CACHE}


async def _get_skill(ctx, params: SkillGetParams) -> dict:
    found = skills().get(params.uri)
    if found is None:
        raise MCPError(INVALID_PARAMS, f"No skill is served at {params.uri}; skills/list names the "
                       f"{len(skills())} served ({SKILL_SCHEME}<name>/SKILL.md)")
    return {"resultType": "complete", "skill": _entry(found), **CACHE}


class Skills(Extension):
    """The skills/ folder per SEP-2640: skills/list, skills/get, and each skill's files as resources."""

    identifier = SKILLS_EXTENSION

    def methods(self):
        return (MethodBinding("skills/list", PaginatedRequestParams, _list_skills),
                MethodBinding("skills/get", SkillGetParams, _get_skill))

    def resources(self):
        return [ResourceBinding(FileResource(
            uri=uri, name=skill["frontmatter"]["name"] if uri == skill["uri"] else Path(uri).name,
            description=skill["frontmatter"]["description"] if uri == skill["uri"] else None,
            mime_type="text/markdown" if path.suffix == ".md" else mimetypes.guess_type(path.name)[0] or "text/plain",
            path=path.resolve())) for skill in skills().values() for uri, path in skill["files"].items()]


# ---------------------------------------------------------------- prompt, references, logging
def install(mcp) -> None:
    """The /finetune prompt, the reference pages as resources, and logging/setLevel, on the server `mcp`."""
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
        mcp.add_resource(FileResource(uri=RESOURCE_SCHEME + path.name, name=path.stem, title=reference_title(path),
                                      description=f"Reference page {path.name} of the llm-finetuning plugin.",
                                      mime_type="text/markdown", path=path))
    # MethodBinding refuses spec methods and MCPServer has no logging/setLevel hook; the SDK's docstring names the
    # low-level Server.add_request_handler for re-providing it (tests/test_sdk_internals.py).
    mcp._lowlevel_server.add_request_handler("logging/setLevel", SetLevelRequestParams, _set_level)

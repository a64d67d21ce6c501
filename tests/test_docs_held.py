"""The developer docs held to the source (issue 46): docs/development.md's layout block names only paths that exist
and every package and top-level module of mcp_server/; docs/architecture.md stays a reader's length, and every
section of it the code cites is there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mcp_server"
ARCHITECTURE_WORDS = 3000


def layout_paths() -> list[Path]:
    """The paths of docs/development.md's layout block: one entry per line (its first word), nested by indent;
    `#` lines are floor headings."""
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    block = text.split("## Layout\n", 1)[1].split("```\n", 2)[1]
    paths, stack = [], []  # stack: (indent, path) of the open folders
    for line in block.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        indent, name = len(line) - len(line.lstrip()), stripped.split()[0]
        if indent and re.match(r"\s{8,}", line) and not name.endswith(("/", ".py", ".json")):
            continue  # a description's continuation line
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (stack[-1][1] if stack else ROOT) / name.rstrip("/")
        paths.append(path)
        if name.endswith("/"):
            stack.append((indent, path))
    return paths


def test_the_layout_block_names_only_what_exists():
    paths = layout_paths()
    assert len(paths) > 40
    missing = [str(p.relative_to(ROOT)) for p in paths if not p.exists()]
    assert not missing, f"docs/development.md's layout names paths that do not exist: {missing}"


def test_the_layout_block_lists_every_package_and_top_level_module():
    listed = set(layout_paths())
    folders = {p.parent for p in PACKAGE.rglob("*") if p.is_file() and "__pycache__" not in p.parts
               and p.parent != PACKAGE}
    modules = {p for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    unlisted = sorted(str(p.relative_to(ROOT)) for p in (folders | modules) - listed)
    assert not unlisted, f"docs/development.md's layout lacks: {unlisted}"


def test_the_architecture_doc_is_a_reader_s_length_with_its_two_walks():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    words = len(text.split())
    assert words < ARCHITECTURE_WORDS, f"docs/architecture.md is {words} words; keep it under {ARCHITECTURE_WORDS}"
    for needle in ("RunSpec.of_run", "spec.write", "validate(spec)", "train/launch.sh"):
        assert needle in text, needle
    cells = [cell for line in text.splitlines() if line.startswith("|") for cell in line.split("|")]
    assert max(map(len, cells)) <= 300, "a table cell over 300 characters: move the detail to its module"


def test_every_section_of_the_architecture_doc_that_is_cited_exists():
    headings = set(re.findall(r"^## (.+)$", (ROOT / "docs" / "architecture.md").read_text(), re.M))
    cited = set()
    for path in [*PACKAGE.rglob("*.py"), *ROOT.glob("tests/*.py"), *ROOT.glob("docs/*.md"), ROOT / "README.md"]:
        text = " ".join(path.read_text(encoding="utf-8").split())
        cited |= {m for m in re.findall(r'architecture\.md\)?, \\?"([^"\\]+)\\?"', text)}
    assert cited, "the citation pattern found nothing"
    assert not cited - headings, f"cited sections of docs/architecture.md that are not there: {cited - headings}"


def test_the_markdown_says_the_sampling_defaults_the_tool_has():
    """Walk 10: docs/guide.md said "The base success rate counts 64 prompts by default"; on a CPU
    sample-completions samples 16. Every Markdown mention of the default prompt count names both targets'
    defaults, as the tool's constants are (inspection.models)."""
    from mcp_server.inspection.models import CPU_PROMPTS, RATE_PROMPTS

    folders = ("docs", "commands", "agents", "skills", "references", ".github", ".opencode", "bench")
    files = [p.relative_to(ROOT) for p in [*ROOT.glob("*.md"), *(f for d in folders for f in (ROOT / d).rglob("*.md"))]]
    pair = re.compile(r"(\d+)\s+prompts(?:\s+on\s+a\s+GPU)?,\s+(\d+)\s+on\s+a\s+CPU")
    bare, said = [], []
    for name in files:
        text = " ".join((ROOT / name).read_text(encoding="utf-8").split())
        bare += [f"{name}: {m[0]}" for m in re.finditer(r"\d+ prompts by default", text)]
        said += [(name, int(m[1]), int(m[2])) for m in pair.finditer(text)]
    assert not bare, f"a default prompt count without the CPU's: {bare}"
    assert len(said) >= 5, said
    wrong = [s for s in said if s[1:] != (RATE_PROMPTS, CPU_PROMPTS)]
    assert not wrong, f"Markdown defaults unlike the tool's ({RATE_PROMPTS} on a GPU, {CPU_PROMPTS} on a CPU): {wrong}"

"""Every TRL parameter name and metric name the Markdown mentions exists in the installed TRL (or is a name this
project, PEFT, accelerate or torch defines): a renamed or misspelled field in a skill fails here, not on a GPU."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARKDOWN = [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("references/*.md"), *ROOT.glob("skills/*/SKILL.md"),
            *ROOT.glob("agents/*.md"), *ROOT.glob("commands/*.md")]
# Names the Markdown cites from elsewhere, each with where it is defined.
ELSEWHERE = {
    "add_generation_prompt": "transformers apply_chat_template",
    "max_memory_reserved": "torch.cuda",
    "list_tools": "the MCP SDK client",
    "grpo_trl_lora_qlora": "TRL's examples/notebooks (a notebook name)",
    "tools/list": "the MCP protocol's method",
    "processed_logprobs": "vLLM's logprobs_mode, which TRL's vllm_generation.py requests",
}


def backticked(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # code blocks are examples, not claims
    return re.findall(r"`([^`\n]+)`", text)


def trl_fields() -> set[str]:
    from accelerate.parallelism_config import ParallelismConfig
    from peft import LoraConfig
    from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig
    from trl.scripts.grpo import GRPOScriptArguments

    from mcp_server.recipe.field_rules import REMOVED_OR_RENAMED

    from trl.experimental.async_grpo import AsyncGRPOConfig

    names = set(REMOVED_OR_RENAMED)  # documented as removed or renamed: the validator says so
    for owner in (GRPOConfig, ModelConfig, DatasetMixtureConfig, GRPOScriptArguments, LoraConfig, ParallelismConfig,
                  AsyncGRPOConfig):
        names |= {f.name for f in dataclasses.fields(owner)}
    return names


def trl_metrics() -> list[re.Pattern]:
    """What GRPOTrainer logs: its `_metrics[mode][...]` keys (f-strings become wildcards), Trainer's own and what
    this project's dynamic-sampling subclass adds."""
    import trl.trainer.grpo_trainer as grpo

    source = Path(grpo.__file__).read_text()
    keys = set(re.findall(r"_metrics\[mode\]\[(f?\"[^\"]+\")\]", source))
    patterns = [re.escape(k.lstrip("f").strip('"')) for k in keys]
    patterns = [re.sub(r"\\\{[^}]*\\\}|\{[^}]*\}", r"[^/]+", p) for p in patterns]
    from mcp_server.recipe.dynamic_sampling_trainer import METRICS  # this project's trainer logs them too

    patterns += [re.escape(name) for name in METRICS]
    return [re.compile(p + "$") for p in patterns + ["loss", "grad_norm", "learning_rate", "epoch"]]


def project_words() -> set[str]:
    words = set()
    for folder in ("mcp_server", "tests", "bench", "scripts"):
        for path in (ROOT / folder).rglob("*.py"):
            words |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", path.read_text()))
    import trl.experimental

    for path in Path(trl.experimental.__file__).parent.parent.rglob("*.py"):  # TRL's own functions and classes
        words |= set(re.findall(r"^\s*(?:def|class) ([A-Za-z_][A-Za-z0-9_]*)", path.read_text(), re.M))
    return words | {p.name for p in Path(trl.experimental.__file__).parent.iterdir()}  # trl.experimental.<module>


def logged(token: str, metrics: list[re.Pattern]) -> bool:
    """Whether GRPOTrainer logs `token`; `<name>` and `*` in the Markdown stand for one path segment."""
    examples = [m.pattern.rstrip("$").replace("[^/]+", "x").replace("\\", "") for m in metrics]
    wanted = re.compile(re.sub(r"<[^>]+>|\\\*", "[^/]+", re.escape(token)))
    return any(wanted.fullmatch(e) for e in examples)


@pytest.fixture(scope="module")
def known():
    return trl_fields(), trl_metrics(), project_words()


def test_every_setting_the_markdown_writes_is_a_field(known):
    fields, _, words = known
    setting = re.compile(r"^([a-z][a-z0-9_]*)\s*(?::|=)\s*[^:=]")
    from mcp_server.rewards.registry import REGISTRY

    reward_params = {p.name for entry in REGISTRY.values() for p in entry.info.params}
    request_fields = {w for w in words if w.islower()}  # request models' fields are identifiers in mcp_server
    wrong = []
    for path in MARKDOWN:
        for token in backticked(path):
            match = setting.match(token)
            if not match or "==" in token:  # `torch==2.13.0` is a pin, not a setting
                continue
            name = match[1]
            if (
                name not in fields
                and name not in reward_params
                and name not in ELSEWHERE
                and name not in request_fields
            ):
                wrong.append(f"{path.relative_to(ROOT)}: `{token}`")
    assert not wrong, "settings naming no TRL/PEFT field, request field or reward parameter:\n" + "\n".join(wrong)


def test_every_metric_the_markdown_names_is_logged_by_trl(known):
    _, metrics, _ = known
    prefixes = {p.pattern.split("/")[0] for p in metrics if "/" in p.pattern}
    wrong = []
    for path in MARKDOWN:
        for token in backticked(path):
            if (
                "/" in token
                and token.split("/")[0] in prefixes
                and "." not in token
                and not token.endswith("/")
                and token not in ELSEWHERE
            ):
                if not logged(token, metrics):
                    wrong.append(f"{path.relative_to(ROOT)}: `{token}`")
    assert not wrong, "metric names GRPOTrainer does not log:\n" + "\n".join(wrong)


def test_metric_reference_table_names_only_trl_metrics_and_progress_keys(known):
    _, metrics, _ = known
    from mcp_server.training.trainer.progress import PROGRESS_KEYS

    progress = set(PROGRESS_KEYS) | {"step", "mem_gb", "temp_c", "step_time"}  # runs.py's progress.jsonl contract

    table = [
        line for line in (ROOT / "references" / "trl-metrics.md").read_text().splitlines() if line.startswith("| `")
    ]
    assert len(table) > 15
    wrong = []
    for line in table:
        first_cell = line.split("|")[1]
        for token in re.findall(r"`([^`]+)`", first_cell):
            if not logged(token, metrics) and token not in progress:
                wrong.append(token)
    assert not wrong, f"references/trl-metrics.md lists names TRL 1.16 does not log: {wrong}"


def test_every_snake_case_name_the_markdown_mentions_exists(known):
    fields, metrics, words = known
    snake = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)+$")
    wrong = []
    for path in MARKDOWN:
        for token in backticked(path):
            if not snake.match(token) or token in fields or token in words or token in ELSEWHERE:
                continue
            if any(m.match(token) for m in metrics):
                continue
            wrong.append(f"{path.relative_to(ROOT)}: `{token}`")
    assert not wrong, ("names found in neither the installed TRL/PEFT/accelerate nor this project:\n"
                       + "\n".join(sorted(set(wrong))))


def test_one_drift_rule_everywhere():
    """The drift band the Markdown states is the one drift_rule.judge_drift applies."""
    from mcp_server.evaluation.drift_rule import HARD_FAIL_POINTS, NOISE_POINTS

    stating = {p: re.sub(r"\s+", " ", p.read_text()) for p in MARKDOWN
                if re.search(r"points?[^.]{0,80}hard fail|hard fail[^.]{0,80}points?", p.read_text())}
    assert len(stating) >= 4
    for path, text in stating.items():
        assert f"at most {NOISE_POINTS:g} point" in text and f"up to {HARD_FAIL_POINTS:g} points" in text, path
        assert not re.search(r"\b[12]-5 points", text), path


def test_trainer_facts_in_trl_versions_hold_for_the_installed_trl():
    import importlib

    import trl

    text = (ROOT / "references" / "trl-versions.md").read_text()
    assert "KTO trainer | stable in 1.16" in text and hasattr(trl, "KTOTrainer")
    for module, trainer in (("cpo", "CPOTrainer"), ("orpo", "ORPOTrainer"), ("online_dpo", "OnlineDPOTrainer"),
                            ("gkd", "GKDTrainer")):
        assert hasattr(importlib.import_module(f"trl.experimental.{module}"), trainer)
        assert not hasattr(trl, trainer)  # not in the stable API
    files = list(Path(trl.__file__).parent.rglob("*.py"))
    shipped = {p.stem for p in files} | {p.parent.name for p in files}
    sources = "\n".join(p.read_text() for p in files)
    for gone in ("PPOTrainer", "BCOTrainer", "XPOTrainer", "NashMDTrainer", "PRMTrainer"):
        assert f"class {gone}(" not in sources, gone
    assert not {"ppo", "bco", "xpo", "nash_md", "prm"} & shipped

"""Issue 48, round 10 G2: what judges user code runs its source, the source the hash pins and the trainer trains.

A .pyc compiled from other code beside a reward's source (its header stamped with the source's mtime and size), a
stale one (the source rewritten in the same second at the same size), a hash-based one marked unchecked, and a
sourceless module.pyc with no .py: the review showed one reward's scores while training ran another's. Every
place the package imports user code goes through rewards.source_only (import_user, load_user_file,
install_source_only); the sites are found in the package's source, and each is a row of the table: site x
bytecode case, the result follows the source or the sourceless module is refused, named."""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import os
import py_compile
import struct
import sys
from pathlib import Path

import pytest

from support import PACKAGE

SOURCE = "def f(completions, **kw):\n    return [1.0 for c in completions]\n"
OTHER = "def f(completions, **kw):\n    return [0.5 for c in completions]\n"  # the same size as SOURCE
SCRIPT = "def build_trainer(argv):\n    return [1.0]\n"
OTHER_SCRIPT = "def build_trainer(argv):\n    return [0.5]\n"
CASES = ("forged", "stale", "unchecked-hash", "sourceless")


def _compile(text: str, where: Path, target: Path, mode=py_compile.PycInvalidationMode.TIMESTAMP) -> bytes:
    where.write_text(text)
    target.parent.mkdir(parents=True, exist_ok=True)
    py_compile.compile(str(where), cfile=str(target), doraise=True, invalidation_mode=mode)
    return target.read_bytes()


def plant(folder: Path, name: str, case: str, source: str = SOURCE, other: str = OTHER) -> Path:
    """folder/name.py holding `source`, with bytecode of `other` where the interpreter would load it (`case`)."""
    assert len(source) == len(other)
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / f"{name}.py"
    cache = Path(importlib.util.cache_from_source(str(src)))
    scratch = folder.parent / f"{folder.name}-{name}-other.py"
    if case == "sourceless":
        _compile(other, scratch, folder / f"{name}.pyc")
        return src
    if case == "stale":  # compiled from the earlier version; the source rewritten in the same second
        _compile(other, src, cache)
        when = src.stat().st_mtime_ns
        src.write_text(source)
        os.utime(src, ns=(when, when))
        return src
    src.write_text(source)
    if case == "unchecked-hash":
        _compile(other, scratch, cache, py_compile.PycInvalidationMode.UNCHECKED_HASH)
        return src
    data = bytearray(_compile(other, scratch, cache))  # forged: the source's mtime and size in the header
    data[8:16] = struct.pack("<II", int(src.stat().st_mtime) & 0xFFFFFFFF, src.stat().st_size & 0xFFFFFFFF)
    cache.write_bytes(bytes(data))
    return src


def _reward(root: Path, name: str) -> object:
    from mcp_server.rewards.dotted import import_dotted

    return import_dotted(f"{name}.f", "rewards")(["a"])[0]


def _agentic(root: Path, name: str) -> object:
    from mcp_server.agentic.spec import resolve

    return resolve(f"{name}:f", root, "tools[0]")(["a"])[0]


def _rule(root: Path, name: str) -> object:
    from mcp_server.recipe.reward_rules import _resolve_dotted

    problem = _resolve_dotted(f"{name}.f")
    return problem if problem else sys.modules[name].f(["a"])[0]


def _trainer(root: Path, name: str) -> object:
    from mcp_server.inspection.trained import _source_imports

    _source_imports()
    return importlib.import_module(name).f(["a"])[0]


def _train_script(root: Path, name: str) -> object:
    from mcp_server.inspection.trajectories import _build_trainer
    from mcp_server.runs import Run

    return _build_trainer(Run(root / name), str(root / "out"))[0]


# Each site that imports user code (module, function), with how the table reaches it: found in the source below.
SITES = {
    ("mcp_server.rewards.dotted", "import_dotted"): _reward,  # rewards, graders, judges: every door that scores
    ("mcp_server.agentic.spec", "_fresh_import"): _agentic,  # an environment or a tool
    ("mcp_server.recipe.reward_rules", "_resolve_dotted"): _rule,  # validation's reward check
    ("mcp_server.inspection.trained", "_source_imports"): _trainer,  # the trainer
    ("mcp_server.inspection.trajectories", "_build_trainer"): _train_script,  # a run's train.py (trajectories)
}
DOORS = ("import_user", "load_user_file", "install_source_only")
# Imports that load no user code (the package's own modules, the installed packages), each with why.
NOT_USER = {
    ("mcp_server.worker", "_resolve"): "a worker target: this package's own function (worker_targets)",
    ("mcp_server.training.launchers", None): "this package's launcher backends",
    ("mcp_server.interpreter", "broken_companions"): "whether installed packages import",
    ("mcp_server.rewards.harness_tests", "scope_of_tests"): "the sandbox's tester: standard-library modules only",
    ("mcp_server.rewards.source_only", None): "the mechanism itself",
}
RAW = {"import_module", "__import__", "spec_from_file_location", "exec_module", "run_path", "run_module",
       "SourceFileLoader", "SourcelessFileLoader", "load_module"}


def _calls(names: set[str]):
    """(module, enclosing function or None, called name) of each call in the package of a name in `names`."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(path.read_text())
        scopes = [(node, node.name) for node in ast.walk(tree)
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in names:
                inner = [name for scope, name in scopes if scope.lineno <= node.lineno <= scope.end_lineno]
                yield module, (inner[-1] if inner else None), called


def test_every_import_of_user_code_goes_through_the_one_mechanism():
    """A call that imports or executes a module is either a site of the table (through rewards.source_only) or
    loads no user code (NOT_USER, with why); a new one fails here until it is one or the other."""
    raw = {(m, f) for m, f, _ in _calls(RAW)}
    unexplained = sorted(str(site) for site in raw if site not in NOT_USER and (site[0], None) not in NOT_USER)
    assert unexplained == [], f"these import modules without rewards.source_only: {unexplained}"
    through = {(m, f) for m, f, _ in _calls(set(DOORS)) if m != "mcp_server.rewards.source_only"}
    assert through == set(SITES), "the table's sites are where the package imports user code"


@pytest.fixture()
def stock_loaders(monkeypatch):
    """The standard loaders as a fresh process has them: each row shows that its own site installs the mechanism
    (install_source_only changes them for the rest of the process; restored after the row)."""
    try:
        from mcp_server.rewards import source_only
    except ImportError:  # before the fix: there is nothing to undo
        return
    if source_only._STOCK:
        monkeypatch.setattr(importlib.machinery.SourceFileLoader, "get_code", source_only._STOCK["source"])
        monkeypatch.setattr(importlib.machinery.SourcelessFileLoader, "get_code", source_only._STOCK["sourceless"])
        monkeypatch.setattr(source_only, "_STOCK", {})


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("site", list(SITES), ids=lambda s: s[1])
def test_what_a_site_imports_is_the_source_never_bytecode(tmp_path, monkeypatch, stock_loaders, site, case):
    name = f"g2_{site[1].strip('_')}_{case.replace('-', '_')}_{abs(hash(str(tmp_path))) % 10**8}"
    root = tmp_path / "user"
    if site[1] == "_build_trainer":
        plant(root / name / "train", "train", case, SCRIPT, OTHER_SCRIPT)
    else:
        plant(root, name, case)
    monkeypatch.chdir(root)
    monkeypatch.setattr("sys.path", [str(root), *sys.path])
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    before = sorted(p.name for p in root.rglob("*"))
    try:
        got = SITES[site](root, name)
    except Exception as exc:  # noqa: BLE001 - the refusal, whatever the door raises, is read below
        got = f"{type(exc).__name__}: {exc}"
    finally:
        sys.modules.pop(name, None)
    if case == "sourceless":
        assert isinstance(got, str) and (name in got or "train.py" in got) and "source" in got, got
    else:
        assert got == 1.0, f"{site} ran the {case} bytecode ({got}), not the source"
    assert sorted(p.name for p in root.rglob("*")) == before, "no bytecode is written for user code"


@pytest.mark.parametrize("case", CASES)
def test_a_library_loading_user_code_by_its_path_runs_the_source(tmp_path, stock_loaders, case):
    """Once installed, the mechanism holds for a library's own loader too: spec_from_file_location and
    exec_module, as transformers loads a trust_remote_code model's modeling file (the package never sees that
    import site)."""
    from mcp_server.rewards.source_only import install_source_only

    name = f"g2_library_{case.replace('-', '_')}_{abs(hash(str(tmp_path))) % 10**8}"
    src = plant(tmp_path / "modules", name, case)
    install_source_only()
    where = src.with_suffix(".pyc") if case == "sourceless" else src
    spec = importlib.util.spec_from_file_location(name, where)
    module = importlib.util.module_from_spec(spec)
    if case == "sourceless":
        with pytest.raises(ImportError, match=f"{name}.*no source"):
            spec.loader.exec_module(module)
        return
    spec.loader.exec_module(module)
    assert module.f(["a"]) == [1.0]


def test_the_review_scores_the_source_not_a_forged_pyc(workspace, tiny_model, monkeypatch, stock_loaders):
    """The probe's door: inspect_rewards on a reward whose __pycache__ holds a forged .pyc reports the source's
    scores (1.0), the ones training gets."""
    from mcp_server.inspection.models import InspectRequest
    from mcp_server.inspection.review import inspect_rewards
    from support import hand_made_run

    name = f"g2_review_{abs(hash(str(workspace))) % 10**8}"
    plant(workspace, name, "forged")
    monkeypatch.syspath_prepend(str(workspace))
    run_dir = hand_made_run(workspace, tiny_model, "g2", [["x", "y"]] * 2, ["1"] * 2,
                            rewards=[{"name": f"{name}.f"}])
    try:
        result = inspect_rewards(InspectRequest(run=str(run_dir)))
    finally:
        sys.modules.pop(name, None)
    means = {d.name: d.mean for d in result.distributions}
    assert means.get("f", means.get(f"{name}.f")) == 1.0, means


@pytest.mark.slow
def test_the_cli_review_in_its_worker_scores_the_source_of_a_package_reward(workspace, tiny_model):
    """Round 10's probe end to end: `llm-finetuning inspect-rewards` (a process; the review runs in its worker)
    on a reward in a package whose __pycache__ holds a forged .pyc: the review's mean is the source's."""
    import json
    import os

    from conftest import run_cli_json
    from support import hand_made_run

    package = workspace / "code" / f"g2pkg_{abs(hash(str(workspace))) % 10**8}"
    (package.parent).mkdir()
    package.mkdir()
    (package / "__init__.py").write_text("")
    plant(package, "r", "forged")
    run_dir = hand_made_run(workspace, tiny_model, "g2cli", [["x", "y"]] * 2, ["1"] * 2,
                            rewards=[{"name": f"{package.name}.r.f"}])
    path = os.pathsep.join(filter(None, [str(package.parent), os.environ.get("PYTHONPATH")]))
    proc, result = run_cli_json("inspect-rewards", str(run_dir), cwd=workspace, process=True, timeout=600,
                                env={"PYTHONPATH": path, "LLM_FINETUNING_WORKSPACE": str(workspace)})
    assert proc.returncode == 0, proc.stderr
    means = {d["name"]: d["mean"] for d in result["distributions"]}
    assert means.get("f", means.get(f"{package.name}.r.f")) == 1.0, (means, json.dumps(result)[:400])
    assert not list(package.rglob("*.pyc"))[1:], "no bytecode written beside the reward"

"""Every tool's and every command's arguments, fuzzed (issue 12, "Done when": the hostile user): hypothesis draws
arguments for every MCP tool, from the input schema the server publishes, and for every CLI command, from its
flags, mixing plausible values with hostile ones (empty and huge strings, NUL, '..', devices, binary and UTF-16
files, too-deep JSON, damaged runs, wrong types, NaN, huge numbers, unknown fields). Whatever it draws:
- no traceback and no 'unexpected' failure: a refusal is one message that names the field or file;
- the server never dies (it answers after every draw, and its log holds no traceback);
- nothing is written outside the workspace, emit's run_dir included (round 12, D3: `--run-dir /tmp/x` wrote a run
  there).

Derandomized (a fixed sequence of draws, no example database), so CI sees the same calls every time, and small:
tens of draws per tool, seconds in all. The arena's runs name no real model, so no draw trains or samples.
prepare_environment, check_environment and demo are left out (SKIPPED_TOOLS says why); their bad input is
covered in test_mcp_doors.py and test_bad_input.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, checkout_env
from mcp_server.cli import build_parser, main
from mcp_server.tools import TOOLS

# prepare_environment builds a virtualenv, demo trains for minutes; check_environment probes the training
# interpreter (a subprocess importing torch, seconds) and takes only `run`, read by the same resolve_run as every
# run argument here (test_bad_input.py gives it '' and a non-run).
SKIPPED_TOOLS = {"prepare_environment", "check_environment"}
SKIPPED_COMMANDS = {"prepare-environment", "demo", "check-environment"}
SLOW = {"launch_training": 4, "resume_training": 4, "launch-training": 3, "resume-training": 3}  # they validate
DRAWS = 12
BUG = re.compile(r"Traceback|unexpected [A-Z]\w*(Error|Exception)|Error executing tool \w+$")


def hostile_settings(n: int):
    return settings(max_examples=n, derandomize=True, database=None, deadline=None, print_blob=False,
                    suppress_health_check=list(HealthCheck))


# ---------------------------------------------------------------- the arena
def _snapshot(root: Path, skip: tuple[Path, ...]) -> dict[str, tuple[int, int]]:
    out = {}
    for path in root.rglob("*"):
        if any(path == s or s in path.parents for s in skip):
            continue
        stat = path.lstat()
        out[str(path)] = (stat.st_size, stat.st_mtime_ns)
    return out


def _git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def arena(tmp_path_factory):
    """A workspace with a good run and damaged ones, hostile files, a plain folder outside the workspace, and an
    empty current directory; HOME and the per-user folders point inside the arena."""
    base = tmp_path_factory.mktemp("hostile")
    ws, home, cwd, outside, files, logs = (base / n for n in ("ws", "home", "cwd", "outside", "files", "logs"))
    for folder in (ws, home, cwd, outside, files, logs):
        folder.mkdir()
    (outside / "keep.txt").write_text("not a run\n")
    runs = ws / "runs"
    good = runs / "2026-01-01-good"
    (good / "train").mkdir(parents=True)
    (good / "train" / "config.yaml").write_text("model_name_or_path: /nonexistent/model\nlearning_rate: 1.0e-6\n"
                                                "max_steps: 8\noutput_dir: checkpoints\n")
    (good / "train" / "request.json").write_text(json.dumps({"model": "/nonexistent/model", "gpu": "cpu"}))
    (good / "train" / "rewards.json").write_text(json.dumps([{"name": "format_reward", "params": {}, "weight": 1}]))
    damaged = {"run.json": b"[1, 2]", "train/logs/progress.jsonl": b"\xff\xfe\x00garbage\n[1]\n",
               "train/logs/outcome.json": b'"x"', "train/config.yaml": b"[" * 5000 + b"]" * 5000,
               "inspection/samples.jsonl": b"{oops\n", "inspection/verdict.json": b'{"verdict": 3}',
               "train/request.json": b"\xff\xfe"}
    for i, (name, data) in enumerate(damaged.items()):
        run = runs / f"2026-01-0{i + 2}-damaged"
        (run / "train").mkdir(parents=True)
        (run / "train" / "config.yaml").write_text("model_name_or_path: /nonexistent/model\n")
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(data)
    (runs / "2026-01-09-stdout-dir" / "train" / "logs" / "stdout.log").mkdir(parents=True)
    (files / "binary.yaml").write_bytes(bytes(range(256)) * 4)
    (files / "utf16.yaml").write_bytes("learning_rate: 1.0e-6\n".encode("utf-16"))
    (files / "utf16.json").write_bytes(b'\xff\xfe[\x001\x00]\x00')
    (files / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (files / "empty.jsonl").write_text("")
    (files / "list.json").write_text("[]")
    (files / "metrics.csv").write_bytes(b"step,loss\n1,\xff\n")
    env = {"LLM_FINETUNING_WORKSPACE": str(ws), "HOME": str(home), "XDG_DATA_HOME": str(home / "data"),
           "XDG_CACHE_HOME": str(home / "cache"), "XDG_CONFIG_HOME": str(home / "config"), "HF_HUB_OFFLINE": "1"}
    named: set[Path] = set()  # directories a call named as the place to write (emit's run_dir)
    arena = SimpleNamespace(base=base, ws=ws, home=home, cwd=cwd, outside=outside, files=files, logs=logs, env=env,
                            good=good, named=named)
    arena.before = _snapshot(base, (ws, home, logs))
    arena.git_before = _git_status()
    return arena


def _strings(arena) -> list[str]:
    """Hostile and plausible text: every path or name field draws from these (and from random text)."""
    f = arena.files
    return ["", " ", "\x00", "a\x00b", "x" * 300, "y" * 5000, "[" * 3000, "{", "[1,2]", '{"a": 1}', "/", ".", "..",
            "../..", "~", "~nobody/x", "/dev/zero", "/dev/null", "/proc/self/mem", "/etc/passwd", "runs", "runs/..",
            str(arena.outside), str(arena.outside / "keep.txt"), str(arena.ws), str(arena.good), arena.good.name,
            "2026-01-02-damaged", "2026-01-04-damaged", "2026-01-05-damaged", "2026-01-09-stdout-dir",
            str(arena.good / "train" / "config.yaml"), str(f / "binary.yaml"), str(f / "utf16.yaml"),
            str(f / "utf16.json"), str(f / "deep.json"), str(f / "empty.jsonl"), str(f / "list.json"),
            str(f / "metrics.csv"), "Qwen/Qwen2.5-0.5B", "no-such/model", "H100", "T4", "cpu", "nan", "-1", "1e309",
            "file:///nonexistent", "correctness_reward", "os.system", "a.b.c"]


def _text():
    """Random text that is not 'tiny' (the one name that would load a real model and sample or train)."""
    return st.text(st.characters(exclude_categories=("Cs",)), max_size=24).filter(lambda t: t.strip() != "tiny")


SCALARS = [None, True, False, -1, 0, 1, 2**31, 2**63, -(2**63), 1e308, -1e308, 0.5, 1e-320, [], {}, [[[]]],
           {"a": {"b": {}}}, [None], {"": None}]


# ---------------------------------------------------------------- the MCP door
@pytest.fixture(scope="module")
def mcp(arena):
    """One MCP session over stdio for the whole suite, driven from synchronous hypothesis tests through a portal."""
    from anyio.from_thread import start_blocking_portal
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_server"], cwd=str(arena.cwd),
                                   env=checkout_env(arena.env))
    log = arena.logs / "server-stderr.log"
    with open(log, "w") as errlog, start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(Client(stdio_client(params, errlog=errlog))) as client:
            tools = {t.name: t.input_schema for t in portal.call(client.list_tools).tools}
            yield SimpleNamespace(call=lambda name, args: portal.call(client.call_tool, name, args), tools=tools,
                                  list_tools=lambda: portal.call(client.list_tools), log=log)


# Arguments that name a run or a file: drawn more often from the arena's runs, so draws reach the core's readers.
RUN_FIELDS = ("run", "source", "config_path", "run_dir", "checkpoint", "log_path", "goldens", "drift_suite")


def _typed(prop: dict, defs: dict, strings: list[str], depth: int = 0, name: str = ""):
    """Values of the type the schema says (a request that passes validation and reaches the core), hostile within
    that type: the strings are paths, names, devices and damaged files; the numbers sit on and past the bounds."""
    if "$ref" in prop:
        prop = defs.get(prop["$ref"].rsplit("/", 1)[-1], {})
    if "enum" in prop:
        return st.sampled_from(prop["enum"])
    if "anyOf" in prop:
        return st.one_of(*[_typed(sub, defs, strings, depth + 1, name) for sub in prop["anyOf"]])
    kind = prop.get("type")
    if kind == "string":
        runs = [x for x in strings if "2026-01-" in x]
        return st.one_of(
            st.sampled_from(strings), _text(), *([st.sampled_from(runs)] * 2 if name in RUN_FIELDS else [])
        )
    if kind == "integer":
        low, high = prop.get("minimum", -(2**63)), prop.get("maximum", 2**63)
        return st.one_of(st.sampled_from(sorted({low, high, max(low, min(high, 0)), max(low, min(high, 1))})),
                         st.integers(min_value=low, max_value=high))
    if kind == "number":
        return st.floats(min_value=prop.get("minimum"), max_value=prop.get("maximum"), allow_nan=False,
                         allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array" and depth < 3:
        return st.lists(_typed(prop.get("items", {}), defs, strings, depth + 1), max_size=3)
    if kind == "object" and depth < 3:
        props = prop.get("properties", {})
        if props:
            required = prop.get("required", [])
            return st.fixed_dictionaries({k: _typed(props[k], defs, strings, depth + 1) for k in required},
                                         optional={k: _typed(v, defs, strings, depth + 1) for k, v in props.items()
                                                   if k not in required})
        return st.dictionaries(st.sampled_from(["learning_rate", "max_steps", "num_generations", "beta", "x", ""]),
                               st.sampled_from(SCALARS + ["nan", ".inf", "5e-7", float("inf")]), max_size=3)
    return st.sampled_from(SCALARS)


def _anything(prop: dict, defs: dict, strings: list[str]):
    """A value of any type: wrong types, nested lists, huge numbers, hostile strings."""
    return st.one_of(st.sampled_from(SCALARS), st.sampled_from(strings), _typed(prop, defs, strings))


def _arguments(schema: dict, strings: list[str]):
    """Mostly well-typed requests (they reach the core), sometimes anything at all, with an unknown argument."""
    props, defs, required = schema.get("properties", {}), schema.get("$defs", {}), schema.get("required", [])
    typed = st.fixed_dictionaries({k: _typed(props[k], defs, strings, name=k) for k in required},
                                  optional={k: _typed(p, defs, strings, name=k) for k, p in props.items()
                                            if k not in required})
    loose = {k: _anything(p, defs, strings) for k, p in props.items()}
    loose["zz_unknown"] = st.sampled_from(SCALARS)  # an argument no tool has
    return st.one_of(typed, typed, typed, st.fixed_dictionaries({}, optional=loose))


def _note_named(arena, name: str, args: dict) -> None:
    value = args.get("run_dir")
    if name == "emit_grpo_config" and isinstance(value, str) and value.strip() and "\x00" not in value:
        path = Path(value).expanduser()
        for folder in ([path] if path.is_absolute() else [arena.ws / path, arena.ws / "runs" / path, arena.cwd / path]):
            if folder.resolve().is_relative_to(arena.ws.resolve()):  # never a place outside (round 12, D3)
                arena.named.add(folder.resolve())


def _check_mcp_result(name: str, args: dict, result) -> None:
    text = " ".join(getattr(c, "text", "") for c in result.content)
    if result.is_error:
        assert not BUG.search(text), f"{name}({args!r}) -> {text[:2000]}"
        assert len(text) < 2200, f"{name}: a message of {len(text)} characters"
    else:
        assert result.structured_content is not None, f"{name}({args!r}) -> {text[:500]}"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_no_tool_argument_gives_a_traceback_or_kills_the_server(arena, mcp):
    strings = _strings(arena)
    tools = sorted(set(mcp.tools) - SKIPPED_TOOLS)
    assert {"emit_grpo_config", "training_status", "list_runs", "diagnose_run"} <= set(tools)
    for name in tools:

        @hostile_settings(SLOW.get(name, DRAWS))
        @given(args=_arguments(mcp.tools[name], strings))
        def draw(args):
            _note_named(arena, name, args)
            _check_mcp_result(name, args, mcp.call(name, args))

        draw()
        assert mcp.list_tools().tools, f"the server stopped answering after {name}"
    runs = mcp.call("list_runs", {})
    listed = {r["run"]: r for r in runs.structured_content["runs"]}
    assert listed[arena.good.name]["state"] == "not_launched"
    assert listed["2026-01-02-damaged"]["state"] == "unreadable" and "run.json" in listed["2026-01-02-damaged"]["error"]
    log = mcp.log.read_text(errors="replace")
    assert "Traceback" not in log, log[-4000:]


# ---------------------------------------------------------------- the CLI door
def _flags(command: str) -> tuple[list[str], list[tuple[str, bool]]]:
    """(positional names, [(option, takes a value)]) of one command, read from its argparse parser."""
    parser = build_parser(only=command)
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    positional = [a.dest for a in sub._actions if not a.option_strings]
    options = [(a.option_strings[-1], a.nargs != 0) for a in sub._actions
               if a.option_strings and a.dest not in ("help", "json")]
    return positional, options


def _argv(command: str, strings: list[str]):
    positional, options = _flags(command)
    values = st.one_of(st.sampled_from(strings + ["@", "@/dev/zero", "@" + strings[-1], "a=b", "--json"]), _text())
    chosen = st.lists(st.sampled_from(options), max_size=4, unique=True) if options else st.just([])
    opts = chosen.flatmap(
        lambda chosen: st.tuples(*[st.tuples(st.just(flag), values if takes else st.just(None))
                                   for flag, takes in chosen]))
    return st.tuples(st.lists(values, min_size=len(positional), max_size=len(positional)), opts).map(
        lambda drawn: [
            command,
            *drawn[0],
            *[x for flag, v in drawn[1] for x in ((flag, v) if v is not None else (flag,))],
        ]
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_no_command_line_gives_a_traceback(arena, monkeypatch, capsys):
    for key, value in arena.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(arena.cwd)
    strings = _strings(arena)
    commands = [s.command for s in TOOLS if s.command not in SKIPPED_COMMANDS]
    for command in commands:

        @hostile_settings(SLOW.get(command, DRAWS))
        @given(argv=_argv(command, strings))
        def draw(argv):
            if "--run-dir" in argv[:-1]:
                _note_named(arena, "emit_grpo_config", {"run_dir": argv[argv.index("--run-dir") + 1]})
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse refused the command line: its usage and one error line
                code = exc.code
            out, err = capsys.readouterr()
            assert code in (0, 1, 2), f"{argv!r} -> exit {code}: {err[-2000:]}"
            assert not BUG.search(err), f"{argv!r} -> {err[-2000:]}"
            if code == 2 and "usage:" not in err:
                assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), f"{argv!r} -> {err[-2000:]}"

        draw()


# ---------------------------------------------------------------- what the draws left behind
@pytest.mark.slow
def test_nothing_was_written_outside_the_workspace(arena):
    """Run last (pytest keeps a module's order): the arena outside the workspace, HOME and the server's log is as it
    was (a run_dir named there is refused: only one inside the workspace is noted as named); the checkout has no new
    or changed file."""
    after = _snapshot(arena.base, (arena.ws, arena.home, arena.logs))
    changed = {p for p in set(after) | set(arena.before) if after.get(p) != arena.before.get(p)}
    allowed = {p for p in changed if any(Path(p) == n or n in Path(p).parents for n in arena.named)}
    assert changed - allowed == set(), sorted(changed - allowed)[:20]
    assert not any(arena.cwd.iterdir()) or all(Path(p) in arena.named for p in arena.cwd.iterdir())
    assert (arena.outside / "keep.txt").read_text() == "not a run\n"
    assert _git_status() == arena.git_before
    assert os.environ.get("LLM_FINETUNING_WORKSPACE") != str(arena.ws)  # the CLI test's environment was restored

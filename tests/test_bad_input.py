"""Bad input through the CLI door (issue 12, "Bad input"): each input that once gave a traceback or a wrong meaning
gets one line naming the field or file and what is accepted, and the rest keeps working.

The CLI is driven in-process (`cli.main`, the console script's own function: argparse, the request model, the core,
the error handling), so the many small cases cost no interpreter start each; test_cli.py runs the real console
script. Everything here is constructed: no training, no model loaded.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from mcp_server.cli import main
from mcp_server.runs import Run
from support import write_signed_lines

GOOD = "2026-01-01-good"
BAD = "2026-01-01-bad"


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `llm-finetuning argv...`."""
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code: int, err: str) -> str:
    """The single 'error: ...' line of a refused command (exit 2), never a traceback or an 'unexpected' bug."""
    assert code == 2, err
    assert "Traceback" not in err and "unexpected" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def make_run(ws: Path, name: str) -> Run:
    """A run as emit_grpo_config leaves it, written by hand: a config naming no real model, so nothing trains."""
    run = Run(ws / "runs" / name)
    run.train.mkdir(parents=True)
    run.config.write_text(yaml.safe_dump({"model_name_or_path": "/nonexistent/model", "learning_rate": 1e-6,
                                          "max_steps": 8, "output_dir": "checkpoints"}))
    run.request.write_text(json.dumps({"model": "/nonexistent/model", "gpu": "cpu", "num_gpus": 1}))
    run.rewards.write_text(json.dumps([{"name": "format_reward", "params": {}, "weight": 1.0}]))
    return run


@pytest.fixture()
def files(workspace, tmp_path, monkeypatch):
    """A workspace with one good run, and hostile files beside it; the current directory is an empty folder."""
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    make_run(workspace, GOOD)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "binary.yaml").write_bytes(bytes(range(256)))
    (bad / "utf16.yaml").write_bytes("learning_rate: 1.0e-6\n".encode("utf-16"))
    (bad / "utf16.json").write_bytes('{"model": "tiny"}'.encode("utf-16"))
    (bad / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (bad / "bomb.yaml").write_text("learning_rate: 1.0e-6\n" + alias_bomb(7))
    return bad


def alias_bomb(levels: int) -> str:
    """Round 15, M2: nested anchors, ten aliases a level (10^levels values once expanded, a kilobyte written)."""
    return f"x_lol0: &l0 [{', '.join(['lol'] * 10)}]\n" + "".join(
        f"x_lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, levels + 1))


# ---------------------------------------------------------------- observed: a traceback or a wrong meaning before
@pytest.mark.parametrize("argv, says", [
    (["validate-config", ""], "config_path: empty; give a path or a name (an empty string does not mean the current "
                              "directory)"),
    (["validate-config", "z" * 5000], "config_path: String should have at most 4096 characters"),
    (["validate-config", "z" * 300], "no file or directory name is longer than 255 bytes"),
    (["validate-config", "{bad}/binary.yaml"], "binary.yaml is not UTF-8 text"),
    (["validate-config", "{bad}/utf16.yaml"], "utf16.yaml is not UTF-8 text"),
    (["validate-config", "/dev/zero"], "config_path: not a regular file: /dev/zero"),
    (["validate-config", "{bad}/bomb.yaml", "--no-rehearse"], "bomb.yaml line 5: its YAML aliases (*l2) expand to "
                                                              "more than 10,000 values"),
    (["emit-config", "--request", "[1,2]"], "--request: expected a JSON object of the request's fields, got list"),
    (["emit-config", "--request", "@{bad}/utf16.json"], "utf16.json is not UTF-8 text"),
    (["emit-config", "--request", "@{bad}/deep.json"], "deep.json nests JSON too deeply to read"),
    # walk 13: `--graders @rewardz.json` said only "No such file or directory"
    (["emit-config", "--request", "@{bad}/utf61.json"], "utf61.json: No such file or directory. Did you mean "
                                                        "'{bad}/utf16.json'"),
    (["emit-config", "--model", "tiny", "--dataset", "", "--gpu", "cpu"], "dataset: empty"),
    (["emit-config", "--model", "tiny", "--dataset", "/dev/zero", "--gpu", "cpu"],
     "dataset: /dev/zero is not a regular file or a directory"),
    # A file name that is not here was taken for a hub data set: VALID, and training failed at its first load.
    (["emit-config", "--model", "tiny", "--dataset", "nope.jsonl", "--gpu", "cpu"],
     "dataset: no such file: nope.jsonl"),
    (["emit-config", "--request", '{"overrides": [1]}', "--override", "learning_rate=x"],
     "--override: the request's overrides must be a JSON object of fields"),
    (["training-status", ""], "run: empty"),
    (["training-status", "."], "is not a run directory"),
    (["stop-training", "/"], "/ is not a run directory"),
    (["check-environment", "--run", ""], "run: empty"),
    (["diagnose-run", "/dev/zero"], "/dev/zero is not a regular file or a directory"),
    (["diagnose-run", "{bad}/deep.json"], "deep.json"),
], ids=lambda v: " ".join(v)[:40] if isinstance(v, list) else None)
def test_observed_inputs_get_one_line_naming_what_is_wrong(files, capsys, tiny_model, argv, says):
    argv = [a.replace("{bad}", str(files)) for a in argv]
    line = one_line_error(*cli(capsys, *argv)[::2])
    assert says.replace("{bad}", str(files)) in line
    assert not any(Path.cwd().iterdir())  # "" and "." never wrote into the current directory


def test_a_yaml_alias_bomb_in_a_runs_config_is_refused_at_once_naming_the_line(workspace, capsys):
    """Round 15, M2: 1.2 KB of nested aliases in train/config.yaml held check-inspection-gate 47 s (7 levels) and
    validate-config 187 s; every door reading the config refuses it, naming the file and the line."""
    run = make_run(workspace, "bombed")
    with run.config.open("a") as handle:
        handle.write(alias_bomb(7))
    for argv in (["sample-completions", str(run.dir)],
                 ["validate-config", str(run.config), "--no-rehearse"]):
        code, out, err = cli(capsys, *argv)
        said = "config.yaml line 8: its YAML aliases (*l2) expand to more than 10,000 values"
        assert code == 2 and said in err, (argv, out, err)
        assert "lol" not in out + err and "Traceback" not in err


# ---------------------------------------------------------------- one damaged file in a run
DAMAGE = {
    "a list": b"[1, 2]",
    "binary": b"\xff\xfe\x00\x80 garbage",
    "deeply nested": b"[" * 5000 + b"]" * 5000,
    "wrong field types": json.dumps({"pid": "x", "create_time": "y", "started_ts": [], "state": 5, "max_steps": "q",
                                     "step": "s", "time": "t"}).encode(),
    "NaN times": b'{"pid": 4242, "started_ts": NaN, "create_time": Infinity, "max_steps": NaN, "time": NaN}',
    "a negative pid": b'{"pid": -1, "pgid": 0, "started_ts": 1.0}',
    "a directory": None,
}
FILES = (
    "run_json",
    "outcome",
    "train_begin",
    "request",
    "config",
    "progress",
    "stdout",
    "stopped",
    "verdict",
    "review",
    "samples",
)


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_run_file_is_one_line_and_the_other_runs_still_list(files, workspace, capsys, damage):
    for member in FILES:
        bad = make_run(workspace, f"{BAD}-{member.replace('_', '-')}")
        path = getattr(bad, member)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        path.mkdir() if DAMAGE[damage] is None else path.write_bytes(DAMAGE[damage])
        for command in ("training-status", "stop-training", "launch-training", "resume-training"):
            code, out, err = cli(capsys, command, bad.name, "--json")
            if code == 2:  # refused: one line naming the damaged file (or the run it belongs to)
                assert bad.name in one_line_error(code, err), (member, command, err)
            else:  # read around it: a result, never a crash
                assert code in (0, 1) and json.loads(out)["run_dir"] == str(bad.dir), (member, command, err)
        code, out, err = cli(capsys, "list-runs", "--json")
        listed = {r["run"]: r for r in json.loads(out)["runs"]}
        assert code == 0 and listed[GOOD]["state"] == "not_launched" and listed[GOOD]["model"] == "/nonexistent/model"
        entry = listed[bad.name]
        if entry["state"] == "unreadable":
            assert path.name in entry["error"] and "unexpected" not in entry["error"], entry
        else:
            assert entry["error"] is None


def test_a_damaged_run_json_is_named_by_status_stop_launch_and_list(files, workspace, capsys):
    bad = make_run(workspace, BAD)
    bad.run_json.write_text("[1, 2]")
    for command in ("training-status", "stop-training", "launch-training"):
        line = one_line_error(*cli(capsys, command, BAD)[::2])
        assert f"run: {bad.run_json} is not a launch record (expected a JSON object, got list)" in line
    code, out, _ = cli(capsys, "list-runs")
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert code == 0 and "unreadable" in rows[BAD] and "run.json is not a launch record" in rows[BAD]
    assert "not_launched" in rows[GOOD]


# ---------------------------------------------------------------- learning rates that cannot train
@pytest.mark.parametrize("lr", [".nan", ".inf", "-.inf", "0", "-1", "-1.0e-6"])
def test_nan_infinite_and_non_positive_learning_rates_are_errors(files, tmp_path, capsys, lr):
    config = tmp_path / "config.yaml"
    config.write_text(f"model_name_or_path: /nonexistent/model\nlearning_rate: {lr}\n")
    code, out, err = cli(capsys, "validate-config", str(config), "--gpu", "H100", "--json")
    result = json.loads(out)
    found = {f["code"]: f for f in result["findings"]}
    assert code == 1 and not result["valid"], err
    assert found["lr_invalid"]["severity"] == "error" and found["lr_invalid"]["field"] == "learning_rate"
    assert "not a positive finite number" in found["lr_invalid"]["message"]


def test_an_override_that_is_not_json_is_kept_as_text(files, capsys):
    code, out, err = cli(capsys, "emit-config", "--model", "/nonexistent/model", "--dataset", "tiny", "--gpu", "cpu",
                         "--override", "learning_rate=nan", "--override", "beta=[")
    assert "'/nonexistent/model' is not a model directory" in one_line_error(code, err)  # read, then refused


def test_a_positive_learning_rate_is_not_refused(files, tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text("model_name_or_path: /nonexistent/model\nlearning_rate: 1.0e-6\n")
    _, out, _ = cli(capsys, "validate-config", str(config), "--gpu", "H100", "--json")
    assert "lr_invalid" not in {f["code"] for f in json.loads(out)["findings"]}


# ---------------------------------------------------------------- paths
def test_a_relative_run_dir_is_the_one_named_and_its_paths_move_with_it(files, workspace, tmp_path, capsys, tiny_model):
    # A folder named relative to where the command ran, outside the workspace: refused, nothing written (round 12,
    # D3: a run is written inside the workspace).
    (Path.cwd() / "mine").mkdir()
    code, out, err = cli(capsys, "emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu",
                         "--run-dir", "mine", "--json")
    assert code == 2 and "run_dir" in err and "outside the workspace" in err, err
    assert not any((Path.cwd() / "mine").iterdir())
    (workspace / "mine").mkdir()
    code, out, err = cli(capsys, "emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu",
                         "--run-dir", "mine", "--json")
    assert code == 0, err
    config = yaml.safe_load((workspace / "mine" / "train" / "config.yaml").read_text())
    # The run is the one named, relative to the workspace from any directory; training runs from the run
    # directory, and the paths inside the run are relative to it, so none depends on where the emit ran (and the
    # run can move).
    assert json.loads(out)["run_dir"] == str(workspace / "mine")
    assert config["output_dir"] == "checkpoints"
    assert (workspace / "mine" / config["datasets"][0]["data_files"]).is_file()
    # A name relative to the workspace works from any directory.
    code, out, err = cli(capsys, "training-status", f"runs/{GOOD}", "--json")
    assert code == 0 and json.loads(out)["run_dir"] == str(workspace / "runs" / GOOD), err


# ---------------------------------------------------------------- a long progress log, streamed
def test_a_long_progress_log_is_read_in_bounded_memory_by_status_and_diagnosis(files, workspace, monkeypatch, capsys):
    """A log past PROGRESS_EXACT_BYTES is sampled: every line counted, the latest lines and a NaN in the middle
    kept, the rest parsed only at evenly spaced offsets. The threshold is lowered so a 1 MB log is 'long'."""
    from mcp_server.diagnosis import metrics, progress_log

    run = Run(workspace / "runs" / GOOD)
    run.logs.mkdir(parents=True)
    steps = 6000
    write_signed_lines(run.progress, [  # signed as the trainer appends them; the last half-written by a live run
        {"step": step, "time": 1000.0 + step, "loss": math.nan if step == 3333 else 0.01, "reward": 0.5,
         "reward_std": 0.3, "kl": 0.001, "learning_rate": 1e-6} for step in range(1, steps + 1)],
        tail='{"step": 6001, "loss"')
    monkeypatch.setattr(progress_log, "PROGRESS_EXACT_BYTES", 64 * 1024)

    read = metrics.read_progress_records(run.progress)
    assert read.sampled and read.lines == steps + 1 and read.last_line_bad and len(read.bad) == 1
    kept = [r["step"] for r in read.records]
    assert kept == sorted(kept) and len(kept) <= metrics.PROGRESS_SAMPLE + metrics.PROGRESS_TAIL + 1
    assert kept[-metrics.PROGRESS_TAIL:] == list(range(steps - metrics.PROGRESS_TAIL + 1, steps + 1))
    assert 3333 in kept  # the NaN, wherever it falls

    code, out, err = cli(capsys, "training-status", GOOD, "--json")
    status = json.loads(out)
    assert code == 0 and status["step"] == steps and status["latest"]["step"] == steps, err
    code, out, err = cli(capsys, "diagnose-run", GOOD, "--json", "--no-validate")
    diagnosis = json.loads(out)
    assert diagnosis["steps_logged"] == steps + 1 and diagnosis["last_step"] == steps
    assert "nan_loss" in {f["code"] for f in diagnosis["findings"]}

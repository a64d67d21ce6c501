"""Where the tools build a Python environment (issue 48, round 18 b04): prepare_environment (CLI
`prepare-environment --path`) and the launcher (scripts/launch_server.py, LLM_FINETUNING_VENV) build only in a new or
empty folder, or in one they built themselves (the marker each writes first); a person's own environment or any other
folder is never installed into, removed or marked, and a build of their own starts from nothing, so no link left in it
carries a write outside."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import ROOT

LAUNCHER = ROOT / "scripts" / "launch_server.py"
MISSING_TORCH = "/nonexistent/torch-0.0.1-py3-none-any.whl"  # step 2 fails at once, nothing downloaded


def tree(folder: Path) -> str:
    """Every entry under `folder` (not following links): its path, kind, link target and content."""
    digest = hashlib.sha256()
    for top, dirs, files in sorted(os.walk(folder)):
        for name in sorted(dirs + files):
            path = Path(top) / name
            digest.update(str(path.relative_to(folder)).encode() + b"\0")
            if path.is_symlink():
                digest.update(b"link:" + os.readlink(path).encode())
            elif path.is_file():
                digest.update(path.read_bytes())
    return digest.hexdigest()


def persons_venv(where: Path) -> Path:
    """A person's own virtual environment, with their settings in pyvenv.cfg and their own activate script."""
    (where / "bin").mkdir(parents=True)
    (where / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    (where / "pyvenv.cfg").write_text("home = /usr/local/bin\ninclude-system-site-packages = true\n"
                                      "version = 3.11.2\nprompt = my-project\n")
    (where / "bin" / "activate").write_text("# my own activate script\nexport MY_PROJECT=1\n")
    (where / "lib" / "python3.11" / "site-packages" / "mypkg.py").write_text("print('mine')\n")
    return where


def prepare(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "mcp_server.cli", "prepare-environment", *args,
                           "--torch-spec", MISSING_TORCH, "--wait"], capture_output=True, text=True, env=env,
                          timeout=600, cwd=tmp_path)


def refused(tmp_path: Path, monkeypatch, folder: Path) -> str:
    """prepare_environment (the core API) on `folder`: its refusal's message."""
    from mcp_server.errors import UserInputError
    from mcp_server.training.models import PrepareRequest
    from mcp_server.training.tools import prepare_environment

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    with pytest.raises(UserInputError) as refusal:
        prepare_environment(PrepareRequest(path=str(folder), torch_spec=MISSING_TORCH))
    assert not (tmp_path / "data" / "llm-finetuning" / "training-env.json").exists()  # no build was started
    return str(refusal.value)


def test_prepare_environment_refuses_a_persons_own_environment_and_leaves_it_as_it_was(tmp_path, monkeypatch):
    mine = persons_venv(tmp_path / "myvenv")
    before = tree(mine)
    out = refused(tmp_path, monkeypatch, mine)
    assert tree(mine) == before
    # names the folder, what it holds, why, and what to pass instead
    assert str(mine) in out and "pyvenv.cfg" in out and "did not build" in out, out
    assert ".llm-finetuning-training-env" in out and "new folder" in out and "LLM_FINETUNING_PYTHON" in out, out


def test_prepare_environment_refuses_a_folder_that_is_not_empty(tmp_path, monkeypatch):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "todo.txt").write_text("mine\n")
    out = refused(tmp_path, monkeypatch, folder)
    assert "todo.txt" in out and "not empty" in out, out
    assert sorted(os.listdir(folder)) == ["todo.txt"]


@pytest.mark.slow
def test_prepare_environment_builds_its_own_from_nothing_never_through_a_link_inside(tmp_path):
    """A new folder is marked first; building there again (restart) starts from nothing: links planted in it
    (pyvenv.cfg, bin/activate, the site-packages folder) are removed, never written through."""
    where = tmp_path / "training-venv"
    first = prepare(tmp_path, "--path", str(where))
    assert "step 2" in first.stdout and (where / ".llm-finetuning-training-env").is_file(), first.stdout
    assert (where / "pyvenv.cfg").is_file()  # step 1 (the venv) ran for real

    outside = tmp_path / "outside"
    (outside / "site").mkdir(parents=True)
    for name in ("pyvenv.cfg", "activate", "site/keep.py"):
        (outside / name).write_text(f"the person's {name}\n")
    before = tree(outside)
    site = next((where / "lib").glob("python*/site-packages"))
    for link, target in ((where / "pyvenv.cfg", outside / "pyvenv.cfg"), (where / "bin" / "activate",
                         outside / "activate")):
        link.unlink()
        link.symlink_to(target)
    os.rename(site, site.with_name("old-site"))
    site.symlink_to(outside / "site", target_is_directory=True)

    again = prepare(tmp_path, "--path", str(where), "--restart")
    assert "step 2" in again.stdout, again.stdout + again.stderr
    assert tree(outside) == before
    assert not (where / "pyvenv.cfg").is_symlink() and not site.is_symlink() and not site.with_name("old-site").exists()


# ---------------------------------------------------------------- the launcher (LLM_FINETUNING_VENV)
def stand_in_uv(tmp_path: Path) -> tuple[Path, Path]:
    """A uv that records its commands ("venv --quiet", "pip install"); its `venv` makes one without pip, its
    `pip install` installs nothing."""
    uv, calls = tmp_path / "bin" / "uv", tmp_path / "uv-calls.log"
    uv.parent.mkdir()
    uv.write_text(f"#!/bin/sh\necho \"$1 $2\" >> '{calls}'\neval last=\\${{$#}}\n"
                  f"[ \"$1\" = venv ] && exec '{sys.executable}' -m venv --without-pip \"$last\"\nexit 0\n")
    uv.chmod(0o755)
    return uv, calls


def launch(venv: Path, uv: Path, *args: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(LAUNCHER), *args], capture_output=True, text=True, timeout=300,
        env={**os.environ, "LLM_FINETUNING_VENV": str(venv), "PATH": f"{uv.parent}{os.pathsep}{os.environ['PATH']}",
             "XDG_CACHE_HOME": str(venv.parent / "cache"), **env})


@pytest.mark.slow
def test_the_launcher_never_installs_into_a_persons_environment_without_its_dependencies(tmp_path):
    mine = tmp_path / "mine"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(mine)], check=True, timeout=120)
    before = tree(mine)
    uv, calls = stand_in_uv(tmp_path)
    for args in ((), ("--prepare",)):
        proc = launch(mine, uv, *args, LLM_FINETUNING_LAUNCH_FRONT="0")
        assert proc.returncode == 1 and proc.stdout == "", proc.stderr
        assert str(mine) in proc.stderr and "did not build" in proc.stderr and "it lacks mcp" in proc.stderr
        assert "new folder" in proc.stderr and ".llm-finetuning-server-env" in proc.stderr
    assert tree(mine) == before and not calls.exists()


@pytest.mark.slow
def test_the_launcher_serves_from_a_persons_environment_as_it_is(tmp_path):
    """A person's environment that has the package's dependencies is used as it is: nothing is installed into it
    or written into it (no marker, no bytecode)."""
    mine = tmp_path / "mine"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(mine)], check=True, timeout=120)
    site = next((mine / "lib").glob("python*/site-packages"))
    (site / "_test_deps.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    before = tree(mine)
    uv, calls = stand_in_uv(tmp_path)
    dry = launch(mine, uv, LLM_FINETUNING_LAUNCH_DRY_RUN="1")
    assert dry.returncode == 0 and "used as it is" in dry.stderr and "would exec" in dry.stderr, dry.stderr
    built = launch(mine, uv, "--prepare")
    assert built.returncode == 0, built.stderr
    assert tree(mine) == before and not calls.exists()


@pytest.mark.slow
def test_the_launcher_rebuilds_its_own_half_built_environment_with_a_link_out_from_nothing(tmp_path):
    """Its own half-built environment (its marker) is finished by the next start, unless a link inside leads out
    of it: then it starts from nothing (the link removed, not followed). A new folder is marked before the build."""
    owned = ".llm-finetuning-server-env"  # scripts/launch_server.py's OWNED
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    (venv / owned).write_text("built by llm-finetuning's scripts/launch_server.py\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.py").write_text("mine\n")
    (next((venv / "lib").glob("python*/site-packages")) / "planted").symlink_to(outside, target_is_directory=True)
    uv, calls = stand_in_uv(tmp_path)
    proc = launch(venv, uv, "--prepare")
    assert proc.returncode == 0 and "resuming" not in proc.stderr, proc.stderr
    assert calls.read_text().splitlines() == ["venv --quiet", "pip install"]  # from nothing: venv, then install
    assert (outside / "keep.py").read_text() == "mine\n" and (venv / owned).is_file()
    assert f"{uv} venv --quiet --allow-existing" in proc.stderr  # uv builds in the folder the marker is in

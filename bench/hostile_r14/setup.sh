#!/bin/bash
# Round 14 builds its gated workspace as round 13 does: the same script, not a copy of it.
# usage: setup.sh WS [extra emit args...]
exec "$(dirname "$0")/../hostile_r13/setup.sh" "$@"

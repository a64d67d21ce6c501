"""list_runs' order (m14 #11): every run, newest first (RunList.runs: "Every run, newest first"; a run's name starts
with its date, runs.unique_run_name), through both doors: the CLI (--json and the human table) and MCP over stdio.
What is no run is left out: a file, a hidden folder. The runs are folders made by hand (nothing launched)."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import call_mcp, cli_here, run_cli_json
from support import hand_run

# Names in the order they are made (not the order listed): a later month, a later day, the same day, a later year.
MADE = ["2026-01-15-b", "2026-03-01-a", "2025-12-31-z", "2026-01-15-a", "2026-01-02-c", "2027-01-01-x"]
NEWEST_FIRST = ["2027-01-01-x", "2026-03-01-a", "2026-01-15-b", "2026-01-15-a", "2026-01-02-c", "2025-12-31-z"]


@pytest.fixture()
def runs(workspace):
    for name in MADE:
        hand_run(workspace, name)
    (workspace / "runs" / ".hidden-2099-01-01").mkdir()
    (workspace / "runs" / "2099-notes.txt").write_text("not a run")
    return workspace


def test_the_cli_lists_every_run_newest_first(runs):
    env = {"LLM_FINETUNING_WORKSPACE": str(runs)}
    proc, listed = run_cli_json("list-runs", here=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert [r["run"] for r in listed["runs"]] == NEWEST_FIRST, listed
    table = cli_here("list-runs", env=env).stdout
    assert sorted(NEWEST_FIRST, key=table.index) == NEWEST_FIRST, table  # the human table in the same order
    assert ".hidden" not in table and "notes" not in table, table


@pytest.mark.slow
def test_mcp_lists_every_run_newest_first(runs):
    async def calls(client):
        return await client.call_tool("list_runs", {})

    result = asyncio.run(call_mcp(calls, env={"LLM_FINETUNING_WORKSPACE": str(runs)}))
    assert not result.is_error, result
    listed = result.structured_content or json.loads(result.content[0].text)
    assert [r["run"] for r in listed["runs"]] == NEWEST_FIRST, listed

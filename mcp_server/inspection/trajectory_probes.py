"""Probing an agentic run's environment after a sampled batch (training interpreter).

For the first rollout of each group: two fresh instances reset with the row must agree (observation and state),
the same calls replayed on a fresh instance must return what the rollout saw, and the pooled instance the
rollout used, reset again with the row, must be in the state a fresh one is in (TRL reuses instances).
"""

from __future__ import annotations

from mcp_server.errors import one_line, short


def _state(env) -> str:
    return repr(sorted(vars(env).items()))


def _replay(env, calls: list[dict]) -> list[str]:
    results = []
    for call in calls:
        if call["status"] not in ("executed", "failed", "dropped"):
            continue
        try:
            results.append(str(getattr(env, call["name"])(**(call.get("arguments") or {}))))
        except Exception as exc:  # noqa: BLE001 - the recorded failure is compared, not re-raised
            results.append(f"error: {exc}")
    return results


def _recorded(calls: list[dict]) -> list[str]:
    out = []
    for call in calls:
        if call["status"] == "executed":
            out.append(call["result"])
        elif call["status"] == "failed":
            out.append(f"error: {call['error']}")
    return out


def _probe_group(factory, pooled, row: dict, record: dict, probes: dict) -> None:
    first, second = factory(), factory()
    starts = [str(first.reset(**row)), str(second.reset(**row))]
    label = f"group {record['group']}"
    if starts[0] != starts[1] or _state(first) != _state(second):
        probes["replay_differs"].append(f"{label}: two fresh resets with the same row differ")
        return
    fresh_state = _state(second)
    calls = [c for c in record["calls"] if c["status"] in ("executed", "failed")]
    replayed = [r[:300] for r in _replay(first, calls)]
    if replayed != _recorded(calls):
        probes["replay_differs"].append(f"{label}: replaying {len(calls)} calls gave {replayed[:2]} vs "
                                        f"{_recorded(calls)[:2]}")
    pooled.reset(**row)
    if _state(pooled) != fresh_state:
        probes["keeps_state"].append(f"{label}: after reset {short(_state(pooled), 120)} vs fresh "
                                     f"{short(fresh_state, 120)}")


def probe_environments(trainer, inputs: list[dict], records: list[dict], group: int) -> dict:
    """{'replay_differs': [...], 'keeps_state': [...], 'errors': [...]} for the single-environment case."""
    probes: dict[str, list[str]] = {"replay_differs": [], "keeps_state": [], "errors": []}
    factory = next(iter(trainer.environment_factories.values()))
    for start in range(0, len(records), group):
        try:
            _probe_group(factory, trainer.environments[start], inputs[start], records[start], probes)
        except Exception as exc:  # noqa: BLE001 - the environment's own code
            probes["errors"].append(f"group {start // group}: {type(exc).__name__}: {one_line(short(exc))}")
    return probes

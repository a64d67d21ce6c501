"""Memory and speed per node of a SLURM job, from the run's memory plan (plan_memory) and the job's layout.

One row per node, in the order of the job's node list: the training nodes first, then (vLLM server mode) the
node that serves. Each row: role, GPUs, the planned peak per GPU and the GPU's capacity (GiB), and the expected
rollout tokens/s of the node (the speed model, memory/speed.py: in server mode the server generates for every
training GPU, so the rate is the server node's; otherwise each GPU generates its own share). The rows go into
run.json's `slurm.plan_per_node`, as a comment block at the top of train/launch.slurm, and next to the
scheduler's node list in training_status.
"""

from __future__ import annotations

from mcp_server.memory.models import MemoryPlan
from mcp_server.training.launchers.slurm.script import SlurmLayout


def node_table(plan: MemoryPlan, layout: SlurmLayout) -> list[dict]:
    """The per-node rows for `layout` under `plan` (a GPU layout: layout.gpus_per_node > 0)."""
    server = layout.vllm_port is not None
    speed = plan.speed.rollout_tokens_per_s
    generating = plan.run.get("use_vllm") and not server
    tp = max(int(plan.run.get("vllm_tensor_parallel_size") or 1), 1) if generating else 1
    rows = [{"index": i, "role": "train", "gpus": layout.processes_per_node, "peak_gib_per_gpu": plan.peak_gib,
             "capacity_gib": plan.capacity_gib,
             "rollout_tokens_per_s": None if server else round(speed * layout.processes_per_node / tp, 1)}
            for i in range(layout.train_nodes)]
    if server:
        sp = plan.server
        peak = round(sp.weights_gib + sp.kv_cache_gib, 2) if sp else None
        rows.append({"index": layout.train_nodes, "role": "vllm-server", "gpus": layout.gpus_per_node,
                     "peak_gib_per_gpu": peak, "capacity_gib": plan.capacity_gib, "rollout_tokens_per_s": speed})
    return rows


def _row_text(row: dict) -> str:
    peak = "?" if row["peak_gib_per_gpu"] is None else f"{row['peak_gib_per_gpu']:.2f}"
    rate = (f"{row['rollout_tokens_per_s']:.1f} rollout tokens/s" if row["rollout_tokens_per_s"] is not None
            else "rollouts from the vLLM server node")
    return (f"{row['role']}, {row['gpus']} GPU(s), planned peak {peak} of {row['capacity_gib']:.2f} GiB per GPU, "
            f"{rate}")


def comment_block(rows: list[dict], plan: MemoryPlan) -> list[str]:
    """The script's head comment: one line per node (node <index> of the job's node list)."""
    model = " ".join(str(plan.model).split())  # one comment line, whatever the name holds
    lines = [f"# Memory plan (plan_memory: {model} on {plan.gpu}, {plan.status}) per node, in node-list order:"]
    lines += [f"#   node {row['index']}: {_row_text(row)}" for row in rows]
    return lines


def beside_scheduler(rows: list[dict], nodes: list[str]) -> str:
    """The plan's rows next to the scheduler's node names (empty names while the job is not placed yet)."""
    named = [f"{nodes[row['index']] if row['index'] < len(nodes) else 'node ' + str(row['index'])}: "
             f"{_row_text(row)}" for row in rows]
    return "; planned per node: " + " | ".join(named) if named else ""

"""The image as the node of a multi-node torchrun job: two containers on a user-defined
Docker network, c10d rendezvous, gloo on the CPU (NCCL where GPUs are).

The distributed smoke collectives and the PPO benchmark run across both; killing one
node ends the job within a bounded time with one line naming the rank and the
collective that did not complete; with --max-restarts a crashed rank's worker group
restarts and ppo_bench resumes from the last checkpoint both nodes hold.
"""

from __future__ import annotations

import io
import json
import time
import uuid

import pytest
import torch

from pipeline.containers import fetch_dir
from tests.image.tracked_container import TrackedContainer, wait_until

pytestmark = pytest.mark.image

LABELS = {"io.proven-torch.role": "test"}
PORT = 29400
# TORCH_DISABLE_SHARE_RDZV_TCP_STORE: with the store torchrun shares with its workers, a worker
# group restarted on one node can read the previous round's addresses and fail to connect
# ("Connection refused"; pytorch/pytorch#135712, seen here with the 2.9-cu128 image). docs/scale-out.md says so.
ENV = {"GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
PPO = ["-m", "ppo_bench", "--device", "cpu", "--seed", "1", "--num-envs", "32", "--num-steps", "16", "--threads", "1"]


@pytest.fixture
def network(docker):
    net = docker.networks.create(f"proven-torch-test-{uuid.uuid4().hex[:8]}", driver="bridge", labels=LABELS)
    yield net.name
    net.remove()


def torchrun(job: str, *worker: str, restarts: int = 0) -> list[str]:
    launch = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--max-restarts", str(restarts)]
    return ["torchrun", *launch, "--rdzv-endpoint", f"node0-{job}:{PORT}", "--rdzv-id", job, *worker]


def start_nodes(docker, image, network: str, job: str, *worker: str, restarts: int = 0) -> list[TrackedContainer]:
    nodes = []
    for index in range(2):
        node = TrackedContainer(
            docker,
            image,
            command=torchrun(job, *worker, restarts=restarts),
            name=f"node{index}-{job}",
            hostname=f"node{index}-{job}",
            network=network,
            environment=ENV,
            shm_size="256m",
        )
        nodes.append(node.start())
    return nodes


def finish(nodes: list[TrackedContainer], timeout: float) -> list[int]:
    return [node.wait_exit(timeout=timeout) for node in nodes]


def test_the_distributed_smoke_collectives_pass_across_two_containers(docker, image, network):
    job = uuid.uuid4().hex[:8]
    nodes = start_nodes(docker, image, network, job, "-m", "smoke.dist_worker", "--backend", "gloo", "--out", "/tmp")
    try:
        codes = finish(nodes, timeout=180)
        assert codes == [0, 0], [n.logs()[-2000:] for n in nodes]
        reports = [fetch_dir(node.container, "/tmp") for node in nodes]
        ranks = sorted(name for files in reports for name in files if name.startswith("rank"))
        assert ranks == ["rank0.json", "rank1.json"]
    finally:
        for node in nodes:
            node.remove()


def test_ppo_ranks_on_two_containers_end_with_identical_weights(docker, image, network):
    """A tight KL limit makes the ranks stop epochs early: decided together, they stay in step."""
    job = uuid.uuid4().hex[:8]
    worker = [*PPO, "--total-timesteps", str(2 * 32 * 16 * 10), "--target-kl", "0.001", "--out-dir", "/tmp/out", "--no-progress"]
    nodes = start_nodes(docker, image, network, job, *worker)
    try:
        codes = finish(nodes, timeout=300)
        assert codes == [0, 0], [n.logs()[-2000:] for n in nodes]
        saved = [fetch_dir(node.container, "/tmp/out") for node in nodes]
        ckpts = [
            torch.load(io.BytesIO(files[f"checkpoint-rank{r}.pt"]), map_location="cpu", weights_only=False)
            for r, files in enumerate(saved)
        ]
        assert ckpts[0]["update_epochs"] == ckpts[1]["update_epochs"] and min(ckpts[0]["update_epochs"]) < 4
        for key, value in ckpts[0]["agent"].items():
            assert torch.equal(value, ckpts[1]["agent"][key]), key
        assert "result.json" in saved[0]  # rank 0 writes the result
    finally:
        for node in nodes:
            node.remove()


def test_a_killed_node_ends_the_job_in_bounded_time_with_one_clear_line(docker, image, network):
    job = uuid.uuid4().hex[:8]
    worker = [*PPO, "--total-timesteps", "100000000", "--dist-timeout", "20", "--out-dir", "/tmp/out", "--progress-interval", "1"]
    nodes = start_nodes(docker, image, network, job, *worker)
    try:
        wait_until(lambda: "| mean return" in nodes[0].logs(), 180, "rank 0 training (its progress line)")
        killed_at = time.monotonic()
        nodes[1].container.kill()
        code = nodes[0].wait_exit(timeout=180)
        took = time.monotonic() - killed_at
        logs = nodes[0].logs()
        assert code != 0 and took < 120, (code, took)
        lines = [line for line in logs.splitlines() if line.startswith("ppo_bench: error: rank 0 of 2:")]
        assert len(lines) == 1 and "did not complete" in lines[0], logs[-3000:]
    finally:
        for node in nodes:
            node.remove()


# A shell loop, not pkill: only torchrun's workers carry RANK in their environment (the agent does not).
KILL_WORKER = "for p in /proc/[0-9]*; do grep -qz '^RANK=' $p/environ 2>/dev/null && kill -KILL ${p#/proc/}; done"


def test_with_max_restarts_a_crashed_rank_resumes_from_the_last_checkpoint(docker, image, network):
    job = uuid.uuid4().hex[:8]
    total = 2 * 32 * 16 * 160  # about 20 s of training on 2 busy cores; the kill comes in its first 3
    worker = [*PPO, "--total-timesteps", str(total), "--checkpoint-every", "0.3", "--out-dir", "/tmp/out", "--no-progress"]
    nodes = start_nodes(docker, image, network, job, *worker, restarts=1)
    try:
        has_two = "ls /tmp/out/checkpoint-rank*.prev.pt"  # two checkpoints on node 1: well into the run
        wait_until(lambda: nodes[1].exec(["bash", "-c", has_two])[0] == 0, 180, "a second checkpoint on node 1")
        nodes[1].exec(["bash", "-c", KILL_WORKER])
        codes = finish(nodes, timeout=300)
        logs = [node.logs() for node in nodes]
        assert codes == [0, 0], [text[-3000:] for text in logs]
        resumed = [
            ln for text in logs for ln in text.splitlines() if "ppo_bench: after a torchrun restart, every rank resumes" in ln
        ]
        assert len(resumed) == 1, logs[0][-3000:]  # said once, by rank 0, on whichever node it is now
        saved = [fetch_dir(node.container, "/tmp/out") for node in nodes]
        result = json.loads(next(files["result.json"] for files in saved if "result.json" in files))
        assert result["resumed"] is True and result["total_env_steps"] == total
        # Per node, its newest checkpoint (a node whose rank number changed keeps its old file too).
        finals = [
            max(
                (
                    torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
                    for name, data in files.items()
                    if name.startswith("checkpoint-rank") and not name.endswith(".prev.pt")
                ),
                key=lambda ckpt: ckpt["iteration"],
            )
            for files in saved
        ]
        assert len(finals) == 2 and finals[0]["iteration"] == finals[1]["iteration"] == total // (2 * 32 * 16)
        for key, value in finals[0]["agent"].items():
            assert torch.equal(value, finals[1]["agent"][key]), key
    finally:
        for node in nodes:
            node.remove()

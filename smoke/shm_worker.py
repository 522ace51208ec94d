"""The shm check's DataLoader round trip, in a child of its own; started by checks.shm_roundtrip.

    python -m smoke.shm_worker --timeout SECONDS [--workers 2] [--pin-memory]

Prints one JSON line, {"problem": ""} when the data came through intact, else
{"problem": "<what went wrong>"}, then exits at once (procs.exit_now), stopping its
DataLoader workers first: a worker blocked on a lock (a fork taken while another
thread held it) cannot keep it alive. The check stops it, workers included, at its
own deadline when no answer comes at all.

Tests only: PROVEN_TORCH_TEST_HANG=shm makes every worker block forever and the
DataLoader wait on them without a timeout (a check whose worker never answers: the
check stops it); PROVEN_TORCH_TEST_HANG=shm-worker makes every worker block forever
under the DataLoader's own timeout (it answers that the DataLoader timed out).
"""

from __future__ import annotations

import argparse
import json
import os
import threading

from common import procs

TEST_HANG = "PROVEN_TORCH_TEST_HANG"


def dataloader_roundtrip(pin_memory: bool, workers: int, timeout: float, hang: str = "") -> str:
    """Iterate a tiny dataset through worker processes (shared memory), waiting at most `timeout`
    seconds for any one batch; '' when the data came through intact. `hang` (the test hook):
    "shm", every worker blocks forever and the DataLoader waits without a timeout; "shm-worker",
    every worker blocks forever."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    data = torch.arange(64 * 3 * 64 * 64, dtype=torch.float32).reshape(64, 3, 64, 64)
    labels = torch.arange(64)
    dataset = _Unanswered(TensorDataset(data, labels)) if hang else TensorDataset(data, labels)
    wait = 0 if hang == "shm" else timeout  # 0: the DataLoader waits forever
    loader = DataLoader(dataset, batch_size=8, num_workers=workers, pin_memory=pin_memory, timeout=wait)
    seen, total = 0, 0.0
    for batch, idx in loader:
        if pin_memory and not batch.is_pinned():
            return "pin_memory=True but the batch is not pinned"
        if not torch.equal(batch, data[idx]):
            return f"batch for indices {idx.tolist()} came back corrupted"
        seen += len(idx)
        total += float(batch.double().sum())
    if seen != len(data) or total != float(data.double().sum()):
        return f"saw {seen}/{len(data)} samples"
    return ""


class _Unanswered:
    """A dataset whose every item blocks forever (in the DataLoader's worker that fetches it)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index):
        threading.Event().wait()  # never set


def answer(problem: str) -> None:
    print(json.dumps({"problem": problem}), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, required=True, help="seconds the DataLoader waits for any one batch")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pin-memory", action="store_true")
    args = parser.parse_args(argv)
    hang = os.environ.get(TEST_HANG, "") if os.environ.get(TEST_HANG) in ("shm", "shm-worker") else ""
    try:
        problem = dataloader_roundtrip(args.pin_memory, args.workers, args.timeout, hang)
    except (
        Exception
    ) as err:  # "DataLoader timed out after 60 seconds", "DataLoader worker (pid 7) is killed by signal: Bus error"
        # answered here, while the loader is still referenced: its teardown joins the workers, which may be what hangs
        answer((f"{type(err).__name__}: {err}".strip().splitlines() or [type(err).__name__])[0][:300])
        procs.exit_now(0)
    answer(problem)
    return 0


if __name__ == "__main__":
    procs.exit_now(main())

"""The run's collectives across torchrun ranks: one process group, each collective bounded by
--dist-timeout, a collective that does not complete one line naming the rank and what it waited for."""

from __future__ import annotations

import os

import torch

from ppo_bench.errors import DistributedError


class Collectives:
    """The run's collectives across torchrun ranks (one rank: no-ops).

    Each is bounded by the process group's timeout (--dist-timeout). One that
    does not complete, because another rank stalled or died, raises one line
    naming this rank and the collective instead of waiting forever.
    """

    def __init__(self, device: torch.device, timeout_s: float):
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank, self.timeout_s, self.device = 0, timeout_s, device
        if self.world_size == 1:
            return
        import datetime

        import torch.distributed as dist

        self.dist = dist
        if not dist.is_initialized():
            timeout = datetime.timedelta(seconds=timeout_s)
            if device.type == "cuda":  # device_id: the communicator is bound to this rank's GPU
                dist.init_process_group("nccl", timeout=timeout, device_id=device)
            else:
                dist.init_process_group("gloo", timeout=timeout)
        self.rank = dist.get_rank()

    def _bounded(self, what: str, run):
        try:
            return run()
        except RuntimeError as err:  # gloo: "Timed out waiting ..." / "Connection closed by peer"; NCCL: DistBackendError
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            raise DistributedError(
                f"rank {self.rank} of {self.world_size}: {what} did not complete within {self.timeout_s:g} s "
                f"(another rank stalled or died): {first}"
            ) from None

    def broadcast_(self, tensor: torch.Tensor, what: str) -> None:
        if self.world_size > 1:
            self._bounded(what, lambda: self.dist.broadcast(tensor, src=0))

    def mean_(self, tensor: torch.Tensor, what: str) -> None:
        """Average `tensor` over the ranks, in place."""
        if self.world_size > 1:
            self._bounded(what, lambda: self.dist.all_reduce(tensor))
            tensor /= self.world_size

    def any(self, flag: bool, what: str) -> bool:
        """True on every rank when it is true on one (a decision all ranks must take together)."""
        if self.world_size == 1:
            return flag
        tensor = torch.tensor([int(flag)], device=self.device)
        self._bounded(what, lambda: self.dist.all_reduce(tensor, op=self.dist.ReduceOp.MAX))
        return bool(tensor.item())

    def gather(self, obj, what: str) -> list:
        if self.world_size == 1:
            return [obj]
        gathered = [None] * self.world_size
        self._bounded(what, lambda: self.dist.all_gather_object(gathered, obj))
        return gathered

    def barrier(self, what: str) -> None:
        if self.world_size > 1:
            self._bounded(what, self.dist.barrier)

    def close(self) -> None:
        if self.world_size > 1 and self.dist.is_initialized():
            self.dist.destroy_process_group()

"""Where the run computes: the device (this rank's GPU under torchrun), and the speed options
--adam, --amp, --compile and --cuda-graphs (docs/ppo-benchmark.md measures what each is
worth). Each leaves the algorithm as it is."""

from __future__ import annotations

import contextlib
import functools

import torch
import torch._dynamo  # noqa: F401  torch.optim imports it on first use (seconds); do it here, not in the timed run

from ppo_bench.checkpoint import rng_state, set_rng_state
from ppo_bench.config import Args
from ppo_bench.errors import ConfigError, GpuRequiredError


def pick_device(args: Args, local_rank: int) -> torch.device:
    has_cuda = torch.cuda.is_available()
    if (args.require_gpu or args.device == "cuda") and not has_cuda:
        flag = "--require-gpu" if args.require_gpu else "--device cuda"
        raise GpuRequiredError(
            f"{flag}: torch {torch.__version__} (CUDA build {torch.version.cuda}) sees no CUDA GPU; "
            "run on a GPU host (docker run --gpus all ...) or drop the flag"
        )
    if args.device == "cpu" or (args.device == "auto" and not has_cuda):
        if args.cuda_graphs:
            raise ConfigError("--cuda-graphs needs a CUDA device (this run is on the CPU)")
        if args.amp == "fp16":
            raise ConfigError("--amp fp16 needs a CUDA device; on the CPU use --amp bf16")
        return torch.device("cpu")
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    # Bind this rank to its GPU before anything touches CUDA: NCCL stages
    # all_gather_object on the current device, and CUDA-graph capture uses its
    # current stream; left at cuda:0, every rank would share GPU 0.
    torch.cuda.set_device(device)
    return device


def resolve_amp(args: Args, device: torch.device) -> str:
    """--amp auto: bf16 where `device` computes it natively, else off; any other value as given."""
    if args.amp != "auto":
        return args.amp
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "off"
    # oneDNN's bf16 kernels need AVX512-BF16 or AMX; elsewhere bf16 is emulated and slower than float32.
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    return "bf16" if native else "off"


def make_optimizer(args: Args, params) -> torch.optim.Adam:
    impl = {"fused": True} if args.adam in ("auto", "fused") else {"foreach": True}
    return torch.optim.Adam(params, lr=args.learning_rate, eps=1e-5, **impl)


def make_autocast(args: Args, device: torch.device):
    """A context-manager factory: autocast to the --amp dtype, or nothing."""
    dtype = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.amp]
    if dtype is None:
        return contextlib.nullcontext
    # A CUDA graph must not keep autocast's cached weight casts (they would go stale).
    return functools.partial(torch.autocast, device.type, dtype=dtype, cache_enabled=not args.cuda_graphs)


def maybe_compile(fn, args: Args, graphs: bool = False):
    """torch.compile `fn` with --compile; with `graphs`, in mode 'reduce-overhead': inductor then
    replays the compiled graphs as CUDA graphs (--cuda-graphs where the environments step on the host)."""
    if not args.compile:
        return fn
    if not graphs:
        return torch.compile(fn)
    compiled = torch.compile(fn, mode="reduce-overhead")

    def graphed(*inputs):
        # Each call is a new step: the caller has copied out what it needs of the previous call's
        # outputs, which the next replay overwrites (CUDA graph trees' static output buffers).
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(*inputs)

    return graphed


def graph_of_rollout(rollout, envs, next_obs: torch.Tensor, device: torch.device) -> torch.cuda.CUDAGraph:
    """Capture the rollout; its warm-up runs step the environments, so put them (and the
    rollout's next observation, and the RNG) back where they were."""
    saved_env, saved_obs, saved_rng = envs.state_dict(), next_obs.clone(), rng_state(device)
    graph = capture_cuda_graph(rollout, device)
    envs.load_state_dict(saved_env)
    next_obs.copy_(saved_obs)
    set_rng_state(saved_rng, device)
    return graph


def capture_cuda_graph(fn, device: torch.device, warmup: int = 2) -> torch.cuda.CUDAGraph:
    """Warm `fn` up on a side stream of `device`, then record it into a CUDA graph
    (pytorch.org/docs/stable/notes/cuda.html#cuda-graphs)."""
    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.device(device), torch.cuda.graph(graph):
        fn()
    return graph

"""Run CleanRL's unmodified ppo.py (or ppo_atari_envpool.py) with timestamps on its output
(used by bench-ppo.py and bench-ppo-atari.py).

    CLEANRL_VENV/bin/python bench-ppo-cleanrl-runner.py PATH/TO/ppo.py [ppo.py args...]

Nothing of CleanRL is copied or edited. This wrapper imports ppo.py's heavy
dependencies first, starts the clock (wall and process CPU time), then runs the
file as __main__ with runpy, and prefixes every line ppo.py prints with
"@<wall seconds> <cpu seconds>@" since that start. So CleanRL's times cover its
own setup and training loop, like ppo_bench's `seconds_to_target` and
`cpu_seconds_to_target`, and exclude interpreter start-up and imports for both.

It runs in its own virtual environment with gymnasium 0.29.1 (the version
CleanRL pins): under gymnasium 1.x, ppo.py's `if "final_info" in infos` never
fires and it records no episode returns.
"""

import builtins
import contextlib
import runpy
import sys
import time

import gymnasium  # noqa: F401  (imported before the clock starts, like ppo_bench's imports)
import numpy  # noqa: F401
import torch  # noqa: F401
import torch._dynamo  # noqa: F401  (torch.optim.Adam imports it on first use; ppo_bench imports it up front too)
import tyro  # noqa: F401
from torch.utils.tensorboard import SummaryWriter  # noqa: F401

with contextlib.suppress(ImportError):  # ppo_atari_envpool.py's own imports, also before the clock
    import envpool  # noqa: F401
    import gym  # noqa: F401

_print = builtins.print
_t0, _c0 = time.perf_counter(), time.process_time()


def _stamped_print(*args, **kwargs):
    stamp = f"@{time.perf_counter() - _t0:.4f} {time.process_time() - _c0:.4f}@"
    kwargs.setdefault("flush", True)
    _print(stamp, *args, **kwargs)


builtins.print = _stamped_print
path = sys.argv[1]
sys.argv = [path] + sys.argv[2:]
runpy.run_path(path, run_name="__main__")

"""Typed errors; `ppo_bench.__main__` turns each into one line and an exit code.

Exit codes: the shared ones (common.cli: 0 ok, 1 anything unexpected, with a
traceback, 2 bad arguments or --require-gpu without a GPU), then ppo_bench's own.
"""

from common.cli import EXIT_USAGE, CommandError

EXIT_BELOW_TARGET = 3  # --fail-below-target and the target return was not reached
EXIT_DISTRIBUTED = 4  # a collective across torchrun ranks did not complete in time


class PPOBenchError(CommandError):
    """Base class; `exit_code` is what the CLI exits with."""


class ConfigError(PPOBenchError):
    """The arguments cannot work together (or a resume does not match its checkpoint)."""

    exit_code = EXIT_USAGE


class GpuRequiredError(PPOBenchError):
    """--require-gpu (or --device cuda) was given and torch sees no CUDA device."""

    exit_code = EXIT_USAGE


class DistributedError(PPOBenchError):
    """A collective across torchrun ranks did not complete within --dist-timeout."""

    exit_code = EXIT_DISTRIBUTED

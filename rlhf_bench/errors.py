"""Typed errors and exit codes; `rlhf_bench.__main__` turns each error into one line
`rlhf_bench: error: ...` on stderr and its exit code.

Exit codes: the shared ones (common.cli: 0 passed, 1 anything unexpected, 2 bad
arguments, or --device cuda without a GPU or with fewer GPUs than --processes), then
rlhf_bench's own.
"""

from common.cli import EXIT_USAGE, CommandError

EXIT_NO_RISE = 3  # the mean reward did not rise by --min-gain
EXIT_POLICY = 4  # save/reload/generate failed, or the multi-process run failed or its ranks' weights differ


class RLHFBenchError(CommandError):
    """Base class; `exit_code` is what the command line exits with."""


class ConfigError(RLHFBenchError):
    """The arguments cannot work here (--device cuda without CUDA, or with fewer GPUs than --processes)."""

    exit_code = EXIT_USAGE


class NoRiseError(RLHFBenchError):
    """The mean reward of the last window did not exceed the first window's by --min-gain."""

    exit_code = EXIT_NO_RISE


class PolicyError(RLHFBenchError):
    """The trained policy could not be saved, reloaded with from_pretrained, or generate."""

    exit_code = EXIT_POLICY


class RanksError(RLHFBenchError):
    """The multi-process run failed or timed out, or its ranks ended with different weights."""

    exit_code = EXIT_POLICY

"""Typed errors of the build pipeline, each with its documented exit code.

Library code raises these; build.py's main() turns them into one line on
stderr and the exit code below. The README's "Exit codes" table lists them.
"""

from __future__ import annotations

from common import cli


class PipelineError(cli.CommandError):
    """Base class: `str(err)` is the one line shown to the user; exit 1 (common.cli's EXIT_FAILED)
    unless a subclass says otherwise."""


class UsageError(PipelineError, cli.UsageError):
    """Bad input: unknown CUDA line, a combination that does not exist, a missing file. Exit 2:
    common.cli's one usage error, as a pipeline error."""


class MatrixError(PipelineError):
    """images/variants.toml is malformed or incomplete."""

    exit_code = 2


class DockerUnavailable(PipelineError):
    """The Docker daemon cannot be reached, or no BuildKit-capable client exists."""

    exit_code = 3


class BuildFailed(PipelineError):
    """`docker build` failed (including: the wheel index could not be reached)."""

    exit_code = 4


class ValidationFailed(PipelineError):
    """The built image did not pass its checks; nothing was tagged."""

    exit_code = 5


class PushFailed(PipelineError):
    """The registry could not be reached or refused the push."""

    exit_code = 6


class NotVerified(PipelineError):
    """`build.py verify`: a signature, a subject or a result did not hold; the message names the
    statement and why."""

    exit_code = 1


class RegistryDataRefused(NotVerified):
    """What a registry sent cannot be read safely: too large, too deep, too many pages or referrers,
    a link to another host, a digest that does not match, JSON of the wrong shape. Exit 1, like any
    other reason not to verify; the line starts "registry data refused"."""

    def __init__(self, message: str):
        super().__init__(f"registry data refused: {message}")


class RegistryUnreachable(PipelineError):
    """`build.py verify`: the registry could not be reached or would not answer."""

    exit_code = 6


class Interrupted(PipelineError):
    """Ctrl-C: the running step and its processes were stopped. The message names the step
    (pipeline.hostprocs.step) and what the run had already tagged or pushed (pipeline.line,
    pipeline.all_lines: only they know)."""

    exit_code = 130


EXIT_CODES = {
    0: "success",
    1: "verify: not verified (the line names the statement and why; 'registry data refused' for data it will not "
    "read); sign: refused, the proof is not bound to the digest (another image or line, an edited report, not a whole "
    "proof); any other command: an unexpected internal error (a bug: please report it with the traceback from --debug)",
    UsageError.exit_code: "bad input: unknown CUDA line, nonexistent torch/CUDA combination, malformed matrix, missing file, "
    "a registry that would be spoken to without TLS, a bad key or passphrase, a command run without the host venv",
    DockerUnavailable.exit_code: "Docker daemon unreachable or no BuildKit-capable docker CLI",
    BuildFailed.exit_code: "docker build failed (network errors reaching the wheel index included)",
    ValidationFailed.exit_code: "validation failed: the image was not tagged (sign: the proof did not pass; nothing signed)",
    PushFailed.exit_code: "push failed: registry unreachable or refused (verify: the registry unreachable or past --timeout)",
    Interrupted.exit_code: "interrupted (Ctrl-C): the step is stopped with its processes; the message names it and "
    "what the run had already tagged or pushed (nothing is tagged before validation passed)",
}

"""Typed errors of the build pipeline: build.py's main() prints `str(err)` as one line on stderr and exits
with the class's code (what each means: EXIT_CODES below, which `--help` and the README list)."""

from __future__ import annotations

from common import cli


class PipelineError(cli.CommandError):
    """Exit 1 (common.cli's EXIT_FAILED) unless a subclass says otherwise."""


class UsageError(PipelineError, cli.UsageError):
    """common.cli's one usage error (exit 2), as a pipeline error."""


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
    """`build.py verify`: a signature, a subject or a result did not hold; `sign`: refused."""

    exit_code = 1


class RegistryDataRefused(NotVerified):
    """What a registry sent cannot be read safely (too large, too deep, a link to another host, a digest
    that does not match, JSON of the wrong shape): not verified, the line starting "registry data refused"."""

    def __init__(self, message: str):
        super().__init__(f"registry data refused: {message}")


class RegistryUnreachable(PipelineError):
    """`build.py verify`: the registry could not be reached or would not answer."""

    exit_code = 6


class Interrupted(PipelineError):
    """Ctrl-C: the running step and its processes were stopped (pipeline/hostprocs.py says who names what)."""

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

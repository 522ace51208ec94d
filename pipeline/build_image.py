"""Build one variant with BuildKit, streaming progress, without tagging it.

The image is built by ID only (`--iidfile`): a tag is given later, and only
after validation passed, so a failed build or a failed check leaves nothing
tagged behind.
"""

from __future__ import annotations

import re
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from common.deadlines import DEADLINES
from pipeline import hostprocs, rebuild_config
from pipeline.docker_env import BuildCli
from pipeline.errors import BuildFailed, UsageError
from pipeline.render import PIP_CA_ID, build_arg, dockerfile_path, stale_files
from pipeline.validation import audit
from pipeline.variants import AMD64, REPO_ROOT, Matrix, Variant, arch, pypi_alternatives

_STEP = re.compile(r"^#\d+ \[[^\]]+\] ")
_DONE = re.compile(r"^#\d+ (DONE|CACHED|ERROR)")

# What pip prints when it cannot reach an index, and what it prints for TLS.
_TLS_PATTERNS = ("CERTIFICATE_VERIFY_FAILED", "certificate verify failed", "SSLError")
_NETWORK_PATTERNS = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Name or service not known",
    "Temporary failure in name resolution",
    "ProxyError",
    "Max retries exceeded",
    "Connection refused",
    "Network is unreachable",
    "Read timed out",
    "ConnectTimeoutError",
    "403 Client Error",
    "(from versions: none)",
)
_HASH_PATTERNS = ("DO NOT MATCH THE HASHES", "hash mismatch")


@dataclass(frozen=True)
class BuildResult:
    image_id: str
    seconds: float


SOURCE = "https://github.com/proven-torch/proven-torch"  # the image's source label; provenance's builder


def build_args(variant: Variant, revision: str, started: str, root: Path = REPO_ROOT) -> dict[str, str]:
    """The build arguments of one variant's build from the checkout at `root`: its labels' source, revision
    and created time, and the epochs that make it reproducible (rebuild_config.epochs): created is then its
    newest input's time, else (no git) when the run `started`."""
    epochs = rebuild_config.epochs(variant, root)
    return {"SOURCE": SOURCE, "REVISION": revision, "CREATED": rebuild_config.created(epochs) or started, **epochs}


def base_build_ref(client, repo: str, base: str, image_id: str) -> str:
    """A local name for a just-built base image, for the flavor's `FROM` (BuildKit resolves names, not IDs).
    It names a build, not a validated image: it is never pushed."""
    ref, tag = f"{repo}-base-build", base
    client.images.get(image_id).tag(ref, tag)
    return f"{ref}:{tag}"


def build_command(cli: BuildCli, build: Build, iidfile: Path) -> list[str]:
    """The `docker build` of `build`: its context's own Dockerfile for the line, untagged (`--iidfile`)."""
    dockerfile = dockerfile_path(build.variant, build.context)
    argv = [*cli.argv, "--progress=plain", "--platform", build.platform, "-f", str(dockerfile), "--iidfile", str(iidfile)]
    argv += ["--no-cache"] if build.no_cache else []
    for key, value in {**build_arg(build.variant), **build.args}.items():  # TORCH picks the line in its CUDA line's file
        argv += ["--build-arg", f"{key}={value}"]
    if build.ca_cert is not None:
        argv += ["--secret", f"id={PIP_CA_ID},src={build.ca_cert}"]
    argv.append(str(build.context))
    return argv


def classify_failure(log_tail: str, variant: Variant, log_path: Path) -> str:
    """One line that says why the build failed and what to do."""
    host = urlparse(variant.index).netloc or variant.index
    if any(p in log_tail for p in _TLS_PATTERNS):
        return (
            f"TLS verification failed while downloading wheels from {host}: behind a TLS-intercepting "
            f"proxy, pass its CA bundle with --ca-cert FILE (full log: {log_path})"
        )
    if any(p in log_tail for p in _HASH_PATTERNS):
        return f"a downloaded wheel did not match the hash in the lock file; regenerate the lock or check the index (full log: {log_path})"
    if any(p in log_tail for p in _NETWORK_PATTERNS):
        where = "PyTorch's wheel index" if "pytorch.org" in host else "the package index"
        return (
            f"network error: could not download torch {variant.torch} for CUDA {variant.cuda} from {where} "
            f"({variant.index}); build {variant.name} on a host that can reach {host} (full log: {log_path})"
        )
    failed = [line for line in log_tail.splitlines() if _STEP.match(line)]
    step = failed[-1].split("] ", 1)[-1][:100] if failed else "unknown step"
    return f"docker build failed at: {step} (full log: {log_path})"


def _show(line: str, verbose: bool) -> bool:
    if verbose:
        return "━" not in line
    return bool(_STEP.match(line) or _DONE.match(line) or "ERROR" in line or line.startswith("#0 error"))


def index_unreachable(index: str, ca_cert: Path | None, timeout: float = 10.0) -> str | None:
    """Why `index` cannot be reached from this host (no DNS name, refused, timed out), or None when it
    answers (any HTTP status: a proxy's refusal or a TLS problem is left to the build, which names it)."""
    context = ssl.create_default_context(cafile=str(ca_cert) if ca_cert else None)
    request = urllib.request.Request(index.rstrip("/") + "/torch/", method="HEAD")
    try:
        urllib.request.urlopen(request, timeout=timeout, context=context).close()
    except urllib.error.HTTPError:
        return None
    except urllib.error.URLError as err:
        if isinstance(err.reason, ssl.SSLError):
            return None
        return str(err.reason)
    except (TimeoutError, OSError) as err:
        return str(err) or type(err).__name__
    return None


def check_index_reach(matrix: Matrix, variant: Variant, ca_cert: Path | None) -> None:
    """Refuse at once, before any build step, a line whose wheel index this host cannot reach, naming
    what it can build instead."""
    if variant.uses_pypi:
        return  # a host without PyPI fails every line; the build's own message says so
    why = index_unreachable(variant.index, ca_cert)
    if why is None:
        return
    host = urlparse(variant.index).netloc
    instead = pypi_alternatives(matrix, variant)
    raise BuildFailed(
        f"network error: {variant.name} needs PyTorch's wheel index {variant.index}, which this host cannot reach "
        f"({why}); build it on a host that reaches {host}" + (f"; {instead}" if instead else "")
    )


@dataclass(frozen=True)
class Build:
    """One `docker build` asked for: the line on one platform, its build arguments, where its log goes."""

    variant: Variant
    out_dir: Path
    args: dict[str, str]
    platform: str = AMD64
    ca_cert: Path | None = None  # the proxy's CA, as a BuildKit secret (never a layer)
    verbose: bool = False
    context: Path = REPO_ROOT  # the checkout built: its Dockerfiles, locks and files
    no_cache: bool = False  # BuildKit's cache unused (a rebuild); pip's cache holds only wheels the locks' hashes check


def build_image(client, cli: BuildCli, matrix: Matrix, build: Build) -> BuildResult:
    """Run `docker build` for the variant on its platform; return the untagged image ID (its config
    written again to be reproducible, rebuild_config.normalise, when the build has its epochs)."""
    variant, out_dir, platform, verbose = build.variant, build.out_dir, build.platform, build.verbose
    # The drift check is this checkout's: another (a rebuild's worktree of an older revision) is built as committed
    stale = stale_files(matrix, audit.disclosures([variant]), variants=[variant]) if build.context.resolve() == REPO_ROOT else []
    if stale:
        raise UsageError(f"{', '.join(p.name for p in stale)} out of date with images/; run `python build.py render` and commit")
    out_dir.mkdir(parents=True, exist_ok=True)
    iidfile = out_dir / "image-id"
    iidfile.unlink(missing_ok=True)
    log_path = out_dir / "build.log"
    argv = build_command(cli, build, iidfile)
    on = f" for {platform}" if variant.multi_arch else ""
    print(f"==> build {variant.name}{on} with {cli.description} (log: {log_path})", flush=True)
    start = time.monotonic()
    tail: list[str] = []
    with open(log_path, "w") as log:

        def show(line: str) -> None:
            log.write(line + "\n")
            tail.append(line + "\n")
            del tail[:-200]
            if _show(line.rstrip(), verbose):
                print(f"  [{time.monotonic() - start:6.1f}s] {line.rstrip()[:160]}", flush=True)

        # Ctrl-C stops the CLI and BuildKit's build with it; pipeline.line says what the run had tagged
        ran = hostprocs.run_host(argv, "docker build", env=cli.environ(), on_line=show)
    if ran.returncode is None:
        raise BuildFailed(
            f"docker build of {variant.name} did not finish within {DEADLINES['docker build']:.0f} s and was stopped (log: {log_path})"
        )
    seconds = time.monotonic() - start
    if ran.returncode != 0 or not iidfile.exists():
        raise BuildFailed(classify_failure("".join(tail), variant, log_path))
    image_id = iidfile.read_text().strip()
    if rebuild_config.SYSTEM_EPOCH in build.args:  # its config's times too: the same revision, the same image ID
        image_id = rebuild_config.normalise(client, image_id, build.args["CREATED"])
        how = f"its times the epochs of {build.args['CREATED']}"
    else:
        how = "no git history: its times the build's clock"
    print(f"==> built {image_id[:19]} ({arch(platform)}) in {seconds:.0f}s ({how}; untagged until validated)", flush=True)
    return BuildResult(image_id=image_id, seconds=seconds)

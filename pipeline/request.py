"""The request: what `build.py build` was asked, checked before anything is built (a push that
would be refused after the build is refused now), and the host it runs on (its platform, qemu)."""

from __future__ import annotations

import os
import platform as host
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline import docker_env, push, registry
from pipeline.attest import KeySource, key_source
from pipeline.errors import UsageError
from pipeline.variants import AMD64, BASE, PLATFORMS, REPO_ROOT, Matrix, Variant, resolve


@dataclass(frozen=True)
class Request:
    """Everything one `build.py build` or `matrix` run needs, parsed once from the command line (from_cli);
    the stages take it, never a list of keywords."""

    matrix: Matrix
    variant: Variant
    push: bool = False
    registry: str | None = None
    repo: str = "proven-torch"
    ca_cert: Path | None = None
    advisories: Path | None = None
    allow_cpu_validation: bool = False
    hold_moving_tags: bool = False  # push the immutable tag only; a release moves the others after a GPU proof
    compression: str = "gzip"  # push.COMPRESSIONS
    report_dir: Path = REPO_ROOT / "reports"
    verbose: bool = False
    platforms: tuple[str, ...] = (AMD64,)  # build.py --platform; "all" is the line's platforms
    sign_key: KeySource | None = None  # --sign-key or PROVEN_TORCH_SIGN_KEY: sign what is pushed (pipeline/attest.py)
    command: tuple[str, ...] = ()  # the command line, for provenance (default: this process's argv)


def check_request(config: Request, gpus: int) -> None:
    """Refuse bad input before building, not after (each refusal says what to do instead)."""
    if os.environ.get("REQUIRE_GPU") == "1" and gpus == 0:
        raise UsageError(
            "REQUIRE_GPU=1 but this host has no GPU visible (nvidia-smi -L lists none); check the driver and the "
            "NVIDIA Container Toolkit, or unset REQUIRE_GPU to validate on the CPU"
        )
    if config.push and gpus == 0 and not config.allow_cpu_validation:
        raise UsageError(
            "--push refused: this host has no GPU, so the image can only be validated on the CPU; "
            "add --allow-cpu-validation to push it anyway (it is labelled io.proven-torch.gpu-validated=false)"
        )
    if config.registry is not None and not config.push:
        raise UsageError("--registry is only used with --push; add --push or drop --registry")
    where = registry.parse_ref(f"{config.registry or 'localhost'}/{config.repo}")  # the one grammar, for every push path
    if config.registry is not None and where.host != config.registry:
        raise UsageError(f"--registry {config.registry[:200]!r}: not a registry host; write HOST[:PORT]")
    if config.compression != "gzip":
        if not config.push:
            raise UsageError(f"--compression {config.compression} is only used with --push; add --push or drop it")
        push.skopeo()  # before the build, not after it
    if config.hold_moving_tags and not config.push:
        raise UsageError("--hold-moving-tags is only used with --push; add --push or drop --hold-moving-tags")
    if config.sign_key is not None and not config.push:
        raise UsageError("--sign-key signs what is pushed; add --push or drop --sign-key")
    if config.ca_cert is not None and not config.ca_cert.is_file():
        raise UsageError(f"--ca-cert {config.ca_cert}: no such file; pass your proxy's CA bundle (PEM)")
    check_platforms(config)
    emulated = [p for p in config.platforms if p != host_platform()]
    if config.push and emulated and not config.allow_cpu_validation:
        raise UsageError(
            f"--push refused: {', '.join(emulated)} runs under emulation on this {host_platform()} host, so it can only "
            "be validated on the CPU; add --allow-cpu-validation to push it anyway, or build it on its own hardware"
        )


def host_platform() -> str:
    """This host's platform ('linux/amd64' on x86_64)."""
    machine = host.machine()
    return next((p for p, names in PLATFORMS.items() if machine in (names["machine"], names["arch"])), f"linux/{machine}")


def emulation_problem(platform: str, binfmt: Path = Path("/proc/sys/fs/binfmt_misc")) -> str | None:
    """Why this host cannot run `platform`'s binaries under qemu, or None when it can (flag F: containers too)."""
    entry = binfmt / f"qemu-{PLATFORMS[platform]['machine']}"
    try:
        text = entry.read_text()
    except OSError:
        return f"qemu is not registered for {platform} (no {entry})"
    flags = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("flags:")), "")
    if "enabled" not in text.splitlines()[0] or "F" not in flags:
        return f"qemu for {platform} is registered without the F flag or disabled ({entry}), so containers cannot use it"
    return None


def check_platforms(config: Request) -> None:
    """Refuse a platform the line is not built for, and an emulated one this host cannot run, before building."""
    variant = config.variant
    other = [p for p in config.platforms if p not in variant.platforms]
    if other:
        multi = [v.name for v in config.matrix.variants if set(other) <= set(v.platforms)]
        raise UsageError(
            f"{variant.name} is built for {', '.join(variant.platforms)} only: {variant.platforms_note or 'see images/variants.toml'}; "
            f"lines with {', '.join(other)}: {', '.join(multi) or 'none'}"
        )
    if len(config.platforms) > 1 and config.compression != "gzip":
        raise UsageError("--compression zstd/both is for one platform at a time; push the multi-arch index in gzip")
    for platform in config.platforms:
        if platform != host_platform() and (why := emulation_problem(platform)):
            raise UsageError(
                f"--platform {platform} on this {host_platform()} host needs emulation: {why}; "
                "run `sudo bash scripts/prepare-host.sh --arm64`"
            )


def check_push_target(config: Request, client) -> None:
    """Refuse, before building, a push that would leave TLS behind: Docker and skopeo speak plain HTTP
    (or TLS unverified) to a registry that resolves to a loopback address or that Docker lists as
    insecure; only one written as loopback (localhost, 127.0.0.1, [::1]) may be spoken to that way."""
    if (
        config.push
        and config.registry
        and (why := registry.plain_http_refusal(config.registry, docker_env.registry_security(client)))
    ):
        raise UsageError(f"--registry {config.registry} refused: {why}; or give the registry TLS")


def from_cli(matrix: Matrix, args) -> Request:
    """The Request `build.py build`'s parsed flags make: the line (the matrix's first torch line of the CUDA
    line, said so, unless --torch picks one), its platforms ("all": each of the line's), the key source
    (--sign-key, else PROVEN_TORCH_SIGN_KEY for a push; check_request refuses a key without --push)."""
    variant = resolve(matrix, args.cuda, args.torch, BASE if args.flavor is None else args.flavor)
    others = [v for v in matrix.variants if v.cuda == variant.cuda and v.name != variant.base_name]
    if others and args.torch is None:
        print(
            f"==> CUDA {variant.cuda} has torch lines {', '.join(v.torch_minor for v in [variant, *others])}: building "
            f"{variant.name} (the matrix's first); --torch {others[0].torch_minor} builds {others[0].name}",
            flush=True,
        )
    if args.sign_key_passphrase_file is not None and args.sign_key is None and not args.push:
        raise UsageError("--sign-key-passphrase-file unlocks the key that signs a push; add --push and --sign-key")
    return Request(
        matrix=matrix,
        variant=variant,
        repo=args.repo or matrix.name,
        platforms=variant.platforms if args.platform == "all" else (args.platform,),
        push=args.push,
        registry=args.registry,
        compression=args.compression,
        hold_moving_tags=args.hold_moving_tags,
        allow_cpu_validation=args.allow_cpu_validation,
        sign_key=key_source(args.sign_key, args.sign_key_passphrase_file) if args.push or args.sign_key is not None else None,
        ca_cert=args.ca_cert,
        advisories=args.advisories,
        report_dir=args.report_dir,
        verbose=args.verbose,
        command=tuple(sys.argv),
    )


def for_matrix(matrix: Matrix, args) -> Request:
    """The Request `build.py matrix` runs each line with (its variant replaced per line)."""
    return Request(
        matrix=matrix,
        variant=resolve(matrix, None),
        repo=matrix.name,
        allow_cpu_validation=True,
        ca_cert=args.ca_cert,
        advisories=args.advisories,
        report_dir=args.report_dir,
        verbose=args.verbose,
        command=tuple(sys.argv),
    )

"""The stages in order: resolve → build → validate → report → stamp + tag → push."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import platform as host
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import (
    attest,
    build_image,
    docker_env,
    hostprocs,
    index_push,
    labels,
    push,
    registry,
    signing,
    tags,
    validate,
    zstd_push,
)
from pipeline.errors import Interrupted, PipelineError, UsageError, ValidationFailed
from pipeline.report import write_report
from pipeline.validate import Validation
from pipeline.validation import audit
from pipeline.variants import AMD64, BASE, PLATFORMS, REPO_ROOT, Matrix, Variant, arch, resolve


@dataclass(frozen=True)
class BuildConfig:
    """Everything one run needs, parsed once from the command line."""

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
    sign_key: Path | None = None  # --sign-key or PROVEN_TORCH_SIGN_KEY: sign what is pushed (pipeline/attest.py)
    command: tuple[str, ...] = ()  # the command line, for provenance (default: this process's argv)


@dataclass(frozen=True)
class Target:
    """Where one validated image goes: its report folder, its name, its build identity."""

    variant: Variant
    run_dir: Path
    ref: str  # repository reference the tags go on, e.g. localhost:5000/proven-torch
    date: str  # YYYYMMDD
    created: str  # RFC 3339
    revision: str
    build_seconds: float = 0.0
    ca_cert: Path | None = None
    advisories: Path | None = None
    platform: str = AMD64

    def own_tag(self, tag: str) -> str:
        """A multi-arch line's images are tagged per architecture (TAG-arm64); its plain tags name the index."""
        return index_push.arch_tag(tag, self.platform) if self.variant.multi_arch else tag

    @property
    def report_path(self) -> Path:
        return self.run_dir / "report.json"

    def write_report(self, validated_id: str, validation: Validation, **fields) -> Path:
        """(Re)write this build's report; `fields` are write_report's per-stage ones."""
        return write_report(
            self.report_path,
            variant=self.variant,
            image_id=validated_id,
            build_seconds=self.build_seconds,
            created=self.created,
            revision=self.revision,
            validation=validation,
            **fields,
        )


@dataclass(frozen=True)
class Tagged:
    validated_id: str  # the image the checks ran in
    stamped_id: str  # the same layers with what validation found stamped on: what is tagged and pushed
    tags: list[str]  # the image's own tags (a multi-arch line's end in its architecture)
    validation: Validation
    line_tags: list[str] = field(default_factory=list)  # the tags without the suffix: a multi-arch line's index


@dataclass(frozen=True)
class Pushed:
    """What the push did; kept apart from the validation record, which is stamped and never changes."""

    refs: dict[str, str]  # ref -> manifest digest
    sbom: dict  # where the SBOM went, or why it did not (registry.push_sbom); signed, it is one of the statements
    compressed_bytes: dict[str, int]  # per compression pushed ("gzip", "zstd"), as the registry's manifest says
    held_tags: tuple[str, ...] = ()  # moving tags not pushed (--hold-moving-tags): a later step moves them
    signed: tuple[dict, ...] = ()  # attest.sign_and_attach's record per pushed digest; empty: unsigned

    def as_dict(self) -> dict:
        return {
            "refs": self.refs,
            "signatures": list(self.signed) if self.signed else UNSIGNED,
            "sbom": self.sbom,
            "compressed_bytes": self.compressed_bytes,
            "held_tags": list(self.held_tags),
        }


@dataclass(frozen=True)
class RunResult:
    validated_id: str
    stamped_id: str
    tags: list[str]
    pushed: dict[str, str]
    report_path: Path
    gpu: bool
    index: dict[str, str] = field(default_factory=dict)  # multi-arch index ref -> digest


UNSIGNED = {"signed": False, "reason": "unsigned: no --sign-key (or PROVEN_TORCH_SIGN_KEY) was given"}


def git_revision(root: Path = REPO_ROOT) -> str:
    rev = hostprocs.run_host(["git", "-C", str(root), "rev-parse", "--short=7", "HEAD"], "git")
    dirty = hostprocs.run_host(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], "git")
    if rev.returncode != 0 or dirty.returncode != 0:
        return "nogit"
    return f"{rev.stdout.strip()}-dirty" if dirty.stdout.strip() else rev.stdout.strip()


def check_request(config: BuildConfig, gpus: int) -> None:
    """Refuse bad input before building, not after: a CPU-only validation pushed
    without being asked to, --registry without --push, a missing CA file, no GPU where one is required."""
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
    if config.compression != "gzip":
        if not config.push:
            raise UsageError(f"--compression {config.compression} is only used with --push; add --push or drop it")
        zstd_push.skopeo()  # before the build, not after it
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


def check_platforms(config: BuildConfig) -> None:
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


def stamp_values(validation: Validation, immutable: str, record: bytes) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, environment) that only validation knows, for the config-only child image."""
    release = json.dumps(validation.release_figures(), sort_keys=True, separators=(",", ":"))
    accepted = ", ".join(
        f"{f['id']} {f['severity']}" for f in validation.audit.get("allowed", []) if f["severity"] in audit.FAILING
    )
    image_labels = {
        f"{labels.PREFIX}advisories": (accepted or "none known") + f" (advisory data as of {validation.audit.get('as_of')})",
        "org.opencontainers.image.version": immutable,
        f"{labels.PREFIX}validation": "passed",
        f"{labels.PREFIX}validation-sha256": hashlib.sha256(record).hexdigest(),
        f"{labels.PREFIX}gpu-validated": "true" if validation.gpu else "false",
        f"{labels.PREFIX}validated-on": validation.validated_on,
        f"{labels.PREFIX}release-ppo": release,
    }
    # `proof` in a container of the image compares its PPO figures with these.
    return image_labels, {"PROVEN_TORCH_RELEASE": release}


def validate_and_tag(client, image_id: str, gpus: int, target: Target) -> Tagged:
    """Validate the untagged image; stamp and tag it only when every check passed."""
    variant = target.variant
    request = validate.Request(
        client,
        image_id,
        variant,
        gpus,
        target.run_dir,
        target.ca_cert,
        target.advisories,
        platform=target.platform,
        emulated=target.platform != host_platform(),
    )
    validation = validate.validate_image(request)
    try:
        validate.require_valid(validation, target.report_path)
        immutable, moving = tags.compute_tags(variant, validation.smoke, target.date, target.revision)
    except ValidationFailed as err:
        target.write_report(image_id, validation, status="failed", error=str(err))
        raise
    record = (json.dumps(validation.as_dict(), indent=2, sort_keys=True) + "\n").encode()
    (target.run_dir / "validation.json").write_bytes(record)
    line_tags = [immutable, *moving]
    all_tags = [target.own_tag(tag) for tag in line_tags]
    image_labels, env = stamp_values(validation, immutable, record)
    stamped_id = labels.stamp(client, image_id, image_labels, env)
    target.write_report(image_id, validation, status="validated", tags=all_tags, stamped_id=stamped_id)
    refs = push.tag_image(client, stamped_id, target.ref, all_tags)
    print(f"==> validated and tagged: {', '.join(refs)}", flush=True)
    return Tagged(validated_id=image_id, stamped_id=stamped_id, tags=all_tags, validation=validation, line_tags=line_tags)


def push_all(
    client,
    tagged: Tagged,
    target: Target,
    hold_moving_tags: bool = False,
    compression: str = "gzip",
    signer: attest.Signer | None = None,
) -> Pushed:
    """Push every tag in the chosen compression (push.push_plan: immutable tags first), or with
    `hold_moving_tags` the immutable ones only. With a signer, each pushed digest gets its signed
    statements once its immutable tag is pushed, before any moving tag moves."""
    common = dict(tags=tagged.tags, stamped_id=tagged.stamped_id)
    refs: dict[str, str] = {}
    plan = push.push_plan(compression, tagged.tags)
    to_push = [step for step in plan if step[0] == tagged.tags[0] or not hold_moving_tags]
    held = tuple(remote for _, remote, _ in plan[len(to_push) :])
    signed: list[dict] = []
    zstd_digest = None
    try:
        for local, remote, form in to_push:
            if signer and local != tagged.tags[0] and not signed:  # the first moving tag: sign the immutable digests first
                signed = sign_pushed(client, signer, tagged, target, refs)
            if form == "zstd":
                zstd_digest = zstd_push.push_tag_zstd(client, tagged.stamped_id, target.ref, local, remote, zstd_digest)
                refs[f"{target.ref}:{remote}"] = zstd_digest
            else:
                refs[f"{target.ref}:{remote}"] = push.push_tag(client, tagged.stamped_id, target.ref, local)
        if signer and not signed:
            signed = sign_pushed(client, signer, tagged, target, refs)
    except PipelineError as err:
        failed = Pushed(
            refs=refs, sbom={"pushed": False, "reason": "the image push failed"}, compressed_bytes={}, signed=tuple(signed)
        )
        target.write_report(tagged.validated_id, tagged.validation, status="validated", push=failed, error=str(err), **common)
        raise
    first_tag = to_push[0][1]
    sbom_file = target.run_dir / tagged.validation.sbom["file"]  # validation wrote it; a missing file is reported, not fatal
    if signed:
        sbom_where = {"pushed": True, "signed": True, "statements": [s["statements"]["sbom"] for s in signed]}
    else:
        sbom_where = registry.push_sbom(target.ref, first_tag, refs[f"{target.ref}:{first_tag}"], sbom_file)
    compressed = {}
    for _, remote, form in to_push:
        if form not in compressed and (size := registry.compressed_bytes(target.ref, remote)) is not None:
            compressed[form] = size
            print(f"==> compressed size in the registry ({form}): {size / 1e9:.2f} GB", flush=True)
    pushed = Pushed(refs=refs, sbom=sbom_where, compressed_bytes=compressed, held_tags=held, signed=tuple(signed))
    if held:
        print(f"==> held back (not pushed): {', '.join(held)}; move them once the pushed digest is proven", flush=True)
    target.write_report(tagged.validated_id, tagged.validation, status="pushed", push=pushed, **common)
    return pushed


def sign_pushed(client, signer: attest.Signer, tagged: Tagged, target: Target, refs: dict[str, str]) -> list[dict]:
    """Attach the signed statements to each digest pushed so far (the immutable tag's gzip and zstd forms)."""
    validation = json.loads((target.run_dir / "validation.json").read_text())  # the stamped record, as pushed
    sbom_file = target.run_dir / tagged.validation.sbom["file"]
    base_image = signer.base_images.get(target.platform, "")
    return [
        attest.attest_image(
            signer,
            client,
            target.ref,
            digest,
            validation,
            tagged.stamped_id,
            target.variant,
            target.platform,
            base_image,
            sbom_file,
        )
        for digest in dict.fromkeys(refs.values())
    ]


def base_build_ref(client, repo: str, base: str, image_id: str) -> str:
    """A local name for a just-built base image, for the flavor's `FROM` (BuildKit resolves names, not IDs).
    It names a build, not a validated image: it is never pushed."""
    ref, tag = f"{repo}-base-build", base
    client.images.get(image_id).tag(ref, tag)
    return f"{ref}:{tag}"


def build_and_validate(
    client,
    cli,
    config: BuildConfig,
    platform: str,
    run_dir: Path,
    args: dict[str, str],
    gpus: int,
    when: tuple[dt.datetime, str, str],
) -> tuple[Target, Tagged]:
    """Build the line for one platform, validate it (under emulation where it is not the host's), stamp and tag it."""
    variant = config.variant
    now, created, revision = when
    args = {**args, "OS_IMAGE": config.matrix.base_image_for(platform)}
    if variant.flavored:  # a flavor builds FROM its base image: the same layers, one more on top
        base = config.matrix.by_name(variant.base_name)
        print(f"==> building the base image {base.name} first (the {variant.flavor} flavor starts FROM it)", flush=True)
        base_built = build_image.build_image(
            cli, config.matrix, base, run_dir / "base", args, config.ca_cert, config.verbose, platform=platform
        )
        args["BASE_IMAGE"] = base_build_ref(client, config.repo, base.name, base_built.image_id)
    built = build_image.build_image(cli, config.matrix, variant, run_dir, args, config.ca_cert, config.verbose, platform=platform)
    if platform != host_platform():
        print(
            f"==> validating {platform} under emulation (qemu) on this {host_platform()} host, on the CPU; deadlines scaled",
            flush=True,
        )
    target = Target(
        variant=variant,
        run_dir=run_dir,
        ref=tags.image_ref(config.repo, config.registry if config.push else None),
        date=f"{now:%Y%m%d}",
        created=created,
        revision=revision,
        build_seconds=built.seconds,
        ca_cert=config.ca_cert,
        advisories=config.advisories,
        platform=platform,
    )
    # An emulated image cannot reach the host's GPU: its proof runs on the CPU, said so in its labels.
    return target, validate_and_tag(client, built.image_id, gpus if platform == host_platform() else 0, target)


def push_line_index(
    results: dict[str, tuple[Target, Tagged, Pushed]], platforms: tuple[str, ...], hold: bool, signer: attest.Signer | None = None
) -> dict[str, str]:
    """The plain tags as one multi-arch index over the per-architecture images just pushed (immutable tag first)."""
    first_target, first, _ = results[platforms[0]]
    ref = first_target.ref
    if any(tagged.line_tags != first.line_tags for _, tagged, _ in results.values()):
        raise PipelineError("the architectures' images report different torch, CUDA or Python; no multi-arch tag moved")
    children = {
        platform: index_push.Child(platform, ref, tagged.tags[0], pushed.refs[f"{ref}:{tagged.tags[0]}"], tagged.stamped_id)
        for platform, (_, tagged, pushed) in results.items()
    }
    ordered = index_push.plan_index(platforms, children)
    line_tags = first.line_tags[:1] if hold else first.line_tags
    index = {f"{ref}:{line_tags[0]}": index_push.push_index(ref, line_tags[0], ordered)}
    signed: dict = {}
    if signer:  # before any moving tag names the index
        about = [
            {"platform": c.platform, "digest": c.digest, "validation": results[c.platform][1].validation.as_dict()}
            for c in ordered
        ]
        signed = attest.attest_index(signer, ref, index[f"{ref}:{line_tags[0]}"], first_target.variant, about)
    index |= {f"{ref}:{tag}": index_push.push_index(ref, tag, ordered) for tag in line_tags[1:]}
    record = {
        "index": index,
        "signatures": signed or UNSIGNED,
        "held_tags": first.line_tags[1:] if hold else [],
        "children": [
            {
                "platform": c.platform,
                "tag": c.tag,
                "digest": c.digest,
                "stamped_image_id": c.image_id,
                "validated_on": results[c.platform][1].validation.validated_on,
            }
            for c in ordered
        ],
    }
    (first_target.run_dir.parent / "index.json").write_text(json.dumps(record, indent=2) + "\n")
    return index


def tag_host_image(client, done: dict[str, tuple[Target, Tagged]], variant: Variant, pushed: bool) -> list[str]:
    """A multi-arch line built without --push: the host's own validated image also gets the line's plain
    tags (what `docker pull` of the index gives on this host), so `docker run IMAGE:LINE` finds it. Pushed,
    the plain tags are the index alone, written only when every platform was validated."""
    if not variant.multi_arch or pushed or host_platform() not in done:
        return []
    target, tagged = done[host_platform()]
    refs = push.tag_image(client, tagged.stamped_id, target.ref, tagged.line_tags)
    print(f"==> {variant.name} is multi-arch: this host's {arch(host_platform())} image is also {', '.join(refs)}", flush=True)
    return refs


def interrupted(err: BaseException, done: dict, results: dict, push: bool) -> Interrupted:
    """Ctrl-C: the step that was stopped, then what this run had tagged or pushed (exit 130 either way).
    Only the run knows the latter, so the steps' own messages name themselves and nothing more."""
    said = str(err) or "interrupted"
    tagged = [f"{t.ref}:{tg.tags[0]}" for t, tg in done.values()]
    if not tagged:
        return Interrupted(f"{said}; nothing was tagged or pushed")
    pushed = [ref for _, _, p in results.values() for ref in p.refs]
    return Interrupted(
        f"{said}; before it, this run validated and tagged {', '.join(tagged)}"
        + (f" and pushed {', '.join(pushed)}" if pushed else "")
        + ("; check the registry for a push that was under way" if push else "")
    )


def run(config: BuildConfig) -> RunResult:
    variant = config.variant
    gpus = docker_env.host_gpu_count()
    check_request(config, gpus)
    if variant.note:
        print(f"==> note: {variant.note}", flush=True)
    on = f" for {', '.join(config.platforms)}" if variant.multi_arch else ""
    print(
        f"==> {variant.name}{on}: torch {variant.torch}, torchvision {variant.torchvision}, torchaudio {variant.torchaudio}, "
        f"CUDA {variant.cuda}, Python {variant.python}; validation on {f'{gpus} GPU(s)' if gpus else 'the CPU (no GPU on this host)'}",
        flush=True,
    )
    key_path = signing.sign_key_path(config.sign_key)
    key = (
        signing.load_signing_key(key_path) if config.push and key_path is not None else None
    )  # a bad key: refused before building
    client = docker_env.docker_client()
    cli = docker_env.find_build_cli()
    build_image.check_index_reach(config.matrix, variant, config.ca_cert)

    now = dt.datetime.now(dt.UTC)
    created = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    revision = git_revision()
    run_dir = config.report_dir / variant.name / f"{now:%Y%m%dT%H%M%SZ}"
    signer = None
    if key is not None:
        facts = attest.run_facts(client, cli.description, list(config.command or sys.argv), revision, created, run_dir.name)
        signer = attest.Signer(key, facts, {p: config.matrix.base_image_for(p) for p in config.platforms})
        print(f"==> pushes are signed with key {key.keyid[:16]}… ({key.path.name})", flush=True)
    elif config.push:
        print("==> pushes are unsigned: pass --sign-key (or set PROVEN_TORCH_SIGN_KEY) to sign them", flush=True)
    args = build_image.build_args(revision, created)
    results: dict[str, tuple[Target, Tagged, Pushed]] = {}
    done: dict[str, tuple[Target, Tagged]] = {}
    failed: dict[str, PipelineError] = {}
    try:
        for platform in config.platforms:
            platform_dir = run_dir / arch(platform) if variant.multi_arch else run_dir
            try:
                target, tagged = build_and_validate(
                    client, cli, config, platform, platform_dir, args, gpus, (now, created, revision)
                )
            except Interrupted:
                raise
            except PipelineError as err:
                if len(config.platforms) == 1:
                    raise
                print(f"==> {platform} failed: {err}", flush=True)
                failed[platform] = err
                continue
            done[platform] = (target, tagged)
            if config.push:
                results[platform] = (
                    target,
                    tagged,
                    push_all(client, tagged, target, config.hold_moving_tags, config.compression, signer),
                )
        if failed:
            first = next(iter(failed.values()))
            kept = [f"{t.ref}:{tagged.tags[0]}" for t, tagged in done.values()]
            raise type(first)(
                "; ".join(f"{platform}: {err}" for platform, err in failed.items())
                + "; no multi-arch tag moved"
                + (f" ({', '.join(kept)} validated and {'pushed' if config.push else 'tagged'} per architecture)" if kept else "")
            )
        index: dict[str, str] = {}
        if variant.multi_arch and config.push:
            if set(results) == set(variant.platforms):
                index = push_line_index(results, variant.platforms, config.hold_moving_tags, signer)
            else:
                print(
                    f"==> {variant.name} is multi-arch: pushed per-architecture tags only ({', '.join(results)}); "
                    "--platform all publishes its plain tags as one index",
                    flush=True,
                )
        host_tags = tag_host_image(client, done, variant, config.push)
    except (Interrupted, KeyboardInterrupt) as err:
        raise interrupted(err, done, results, config.push) from None
    target, tagged = done[config.platforms[0]]
    print(f"==> report: {target.report_path}", flush=True)
    return RunResult(
        validated_id=tagged.validated_id,
        stamped_id=tagged.stamped_id,
        tags=[f"{t.ref}:{tag}" for t, tg in done.values() for tag in tg.tags] + host_tags,
        pushed={ref: digest for _, _, p in results.values() for ref, digest in p.refs.items()},
        report_path=target.report_path,
        gpu=tagged.validation.gpu,
        index=index,
    )


def build_line(
    matrix: Matrix,
    cuda: str | None,
    torch: str | None,
    flavor: str | None,
    platform: str,
    *,
    repo: str | None = None,
    push: bool = False,
    registry: str | None = None,
    compression: str = "gzip",
    hold_moving_tags: bool = False,
    allow_cpu_validation: bool = False,
    sign_key: Path | None = None,
    ca_cert: Path | None = None,
    advisories: Path | None = None,
    report_dir: Path = REPO_ROOT / "reports",
    verbose: bool = False,
) -> list[str]:
    """`build.py build`: run the line the flags name (the matrix's first torch line of the CUDA line, said
    so, unless `torch` picks one; platform "all": each platform of the line); the '==> done' lines to print.
    repo None: the matrix's name."""
    variant = resolve(matrix, cuda, torch, BASE if flavor is None else flavor)
    others = [v for v in matrix.variants if v.cuda == variant.cuda and v.name != variant.base_name]
    if others and torch is None:
        print(
            f"==> CUDA {variant.cuda} has torch lines {', '.join(v.torch_minor for v in [variant, *others])}: building "
            f"{variant.name} (the matrix's first); --torch {others[0].torch_minor} builds {others[0].name}",
            flush=True,
        )
    platforms = variant.platforms if platform == "all" else (platform,)
    config = BuildConfig(
        matrix=matrix,
        variant=variant,
        repo=repo or matrix.name,
        platforms=platforms,
        push=push,
        registry=registry,
        compression=compression,
        hold_moving_tags=hold_moving_tags,
        allow_cpu_validation=allow_cpu_validation,
        sign_key=sign_key,
        ca_cert=ca_cert,
        advisories=advisories,
        report_dir=report_dir,
        verbose=verbose,
    )
    result = run(config)
    lines = ["==> done: " + ", ".join(result.tags) + (" (pushed)" if result.pushed else "")]
    if result.index:
        lines.append("==> multi-arch: " + ", ".join(f"{ref} ({digest[:19]})" for ref, digest in result.index.items()))
    return lines

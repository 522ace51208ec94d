"""`build.py build`: one line, through every stage in order for each of its platforms:
request checked → build → validate, stamp, tag (stamp.py) → publish (publish.py: push, sign, index).
Nothing is tagged before validation passed; nothing is pushed that was not validated."""

from __future__ import annotations

import datetime as dt
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import attest, build_image, docker_env, hostprocs, publish, push, records, run_facts, stamp
from pipeline.errors import Interrupted, PipelineError
from pipeline.publish import Pushed
from pipeline.request import Request, check_push_target, check_request, host_platform
from pipeline.target import Tagged, Target, image_ref
from pipeline.variants import REPO_ROOT, Variant, arch


@dataclass(frozen=True)
class RunResult:
    validated_id: str
    stamped_id: str
    tags: list[str]
    pushed: dict[str, str]
    report_path: Path
    gpu: bool
    index: dict[str, str] = field(default_factory=dict)  # multi-arch index ref -> digest


def git_commit() -> str:
    """The checkout's full commit, "-dirty" when it has uncommitted changes, or "nogit"."""
    head = hostprocs.run_host(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], "git")
    dirty = hostprocs.run_host(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"], "git")
    if head.returncode != 0 or dirty.returncode != 0:
        return "nogit"
    return f"{head.stdout.strip()}-dirty" if dirty.stdout.strip() else head.stdout.strip()


@dataclass(frozen=True)
class Run:
    """What one `build.py build` run fixed when it started, the same for each of its platforms."""

    started: dt.datetime
    revision: str
    gpus: int


def build_and_validate(client, cli, config: Request, run: Run, platform: str, run_dir: Path) -> tuple[Target, Tagged]:
    """Build the line for one platform, validate it (under emulation where it is not the host's), stamp and tag it."""
    variant = config.variant

    def args_of(of: Variant) -> dict[str, str]:  # each its own epochs: a flavor's base is the base, byte for byte
        started = f"{run.started:%Y-%m-%dT%H:%M:%SZ}"
        return {**build_image.build_args(of, run.revision, started), "OS_IMAGE": config.matrix.base_image_for(platform)}

    args = args_of(variant)
    if variant.flavored:  # a flavor builds FROM its base image: the same layers, one more on top
        base = config.matrix.by_name(variant.base_name)
        print(f"==> building the base image {base.name} first (the {variant.flavor} flavor starts FROM it)", flush=True)
        of_base = build_image.Build(base, run_dir / "base", args_of(base), platform, config.ca_cert, config.verbose)
        args["BASE_IMAGE"] = build_image.base_build_ref(
            client, config.repo, base.name, build_image.build_image(client, cli, config.matrix, of_base).image_id
        )
    build = build_image.Build(variant, run_dir, args, platform, config.ca_cert, config.verbose)
    built = build_image.build_image(client, cli, config.matrix, build)
    if platform != host_platform():
        print(
            f"==> validating {platform} under emulation (qemu) on this {host_platform()} host, on the CPU; deadlines scaled",
            flush=True,
        )
    target = Target(
        variant=variant,
        run_dir=run_dir,
        ref=image_ref(config.repo, config.registry if config.push else None),
        date=f"{run.started:%Y%m%d}",
        created=args["CREATED"],
        revision=run.revision,
        build_seconds=built.seconds,
        ca_cert=config.ca_cert,
        advisories=config.advisories,
        platform=platform,
        emulated=platform != host_platform(),
    )
    # An emulated image cannot reach the host's GPU: its proof runs on the CPU, said so in its labels.
    return target, stamp.validate_and_tag(client, built.image_id, 0 if target.emulated else run.gpus, target)


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


def run(config: Request) -> RunResult:
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
    key = config.sign_key
    if key is not None:  # a bad key, a wrong passphrase: refused before building
        print(f"==> pushes are signed with key {attest.check_key(key)[:16]}… ({key.path.name})", flush=True)
    elif config.push:
        print("==> pushes are unsigned: pass --sign-key (or set PROVEN_TORCH_SIGN_KEY) to sign them", flush=True)
    client = docker_env.docker_client()
    check_push_target(config, client)
    cli = docker_env.find_build_cli()
    build_image.check_index_reach(config.matrix, variant, config.ca_cert)

    now = dt.datetime.now(dt.UTC)
    created = now.strftime("%Y-%m-%dT%H:%M:%SZ")  # when the run started; an image's created label is its inputs' time
    commit = git_commit()
    revision = records.revision(commit)
    run_dir = config.report_dir / variant.name / f"{now:%Y%m%dT%H%M%SZ}"
    facts = (  # what the push's provenance says of the run, gathered once
        run_facts.gather(client, cli.description, list(config.command or sys.argv), commit, created) if config.push else None
    )
    started = Run(now, revision, gpus)
    results: dict[str, tuple[Target, Tagged, Pushed]] = {}
    done: dict[str, tuple[Target, Tagged]] = {}
    failed: dict[str, PipelineError] = {}
    try:
        for platform in config.platforms:
            platform_dir = run_dir / arch(platform) if variant.multi_arch else run_dir
            try:
                target, tagged = build_and_validate(client, cli, config, started, platform, platform_dir)
            except Interrupted:
                raise
            except PipelineError as err:
                if len(config.platforms) == 1:
                    raise
                print(f"==> {platform} failed: {err}", flush=True)
                failed[platform] = err
                continue
            done[platform] = (target, tagged)
            if facts is not None:  # --push
                results[platform] = (target, tagged, publish.publish(client, tagged, target, config, facts))
        if failed:
            first = next(iter(failed.values()))
            kept = [f"{t.ref}:{tagged.tags[0]}" for t, tagged in done.values()]
            raise type(first)(
                "; ".join(f"{platform}: {err}" for platform, err in failed.items())
                + "; no multi-arch tag moved"
                + (f" ({', '.join(kept)} validated and {'pushed' if config.push else 'tagged'} per architecture)" if kept else "")
            )
        index: dict[str, str] = {}
        if variant.multi_arch and facts is not None:
            if set(results) == set(variant.platforms):
                index = publish.publish_index(results, config)
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


def build_line(request: Request) -> list[str]:
    """`build.py build`: run the line the request names; the '==> done' lines to print."""
    result = run(request)
    lines = ["==> done: " + ", ".join(result.tags) + (" (pushed)" if result.pushed else "")]
    if result.index:
        lines.append("==> multi-arch: " + ", ".join(f"{ref} ({digest[:19]})" for ref, digest in result.index.items()))
    return lines

"""What provenance says about a build run: gathered once when the run starts (RunFacts), completed at
push with the resolved dependencies and the tags, and written as facts.json (records.Facts) beside
the report, where every later statement about the image reads it."""

from __future__ import annotations

import hashlib
import platform
import secrets
from dataclasses import dataclass
from pathlib import Path

from common.host import this_machine
from pipeline import lock, statements
from pipeline.build_image import SOURCE
from pipeline.records import FACTS, Facts, write
from pipeline.render import dockerfile_path
from pipeline.target import Target
from pipeline.variants import REPO_ROOT, Variant


@dataclass(frozen=True)
class RunFacts:
    """What provenance says about the run, gathered once: the command, the source, the tools."""

    command: list[str]
    commit: str  # the full git commit, "-dirty" when the checkout had changes, or "nogit"
    started: str  # RFC 3339
    invocation: str  # the build run's id: when it started and a random part (two runs in one second stay two)
    tools: dict


def gather(client, build_cli: str, command: list[str], commit: str, started: str) -> RunFacts:
    version = client.version()
    tools = {
        "docker_engine": version.get("Version"),
        "docker_api": version.get("ApiVersion"),
        "builder": build_cli,
        "components": {c.get("Name"): c.get("Version") for c in version.get("Components", [])},
        "python": platform.python_version(),
        "host": this_machine(),  # the build host (the benchmark's `host`)
    }
    invocation = f"{started.replace('-', '').replace(':', '')}-{secrets.token_hex(4)}"
    return RunFacts(command=command, commit=commit, started=started, invocation=invocation, tools=tools)


def _file_digest(path: Path) -> dict:
    return {"uri": f"file:{path.relative_to(REPO_ROOT)}", "digest": {"sha256": hashlib.sha256(path.read_bytes()).hexdigest()}}


def dependencies(client, variant: Variant, platform: str, base_image: str, commit: str) -> list[dict]:
    """SLSA resolvedDependencies: the source at its commit, the Dockerfile, the line's locks, the base image."""
    deps = [{"uri": f"git+{SOURCE}@{commit}", "digest": {"gitCommit": commit.removesuffix("-dirty")}}]
    deps.append(_file_digest(dockerfile_path(variant)))
    folder = lock.lock_dir(variant, platform=platform)
    deps += [_file_digest(p) for p in sorted(folder.glob("*.txt"))] if folder.is_dir() else []
    base = client.images.list(name=base_image) if base_image else []  # the base image a build used; absent: said, not invented
    if base:
        deps.append(
            {
                "uri": f"docker-image://{base_image}",
                "digest": {"sha256": base[0].id.removeprefix("sha256:")},
                "annotations": {"repoDigests": base[0].attrs.get("RepoDigests", [])},
            }
        )
    else:
        deps.append({"uri": f"docker-image://{base_image}", "annotations": {"note": "not on the host at signing time"}})
    return deps


def write_facts(target: Target, stamped_id: str, facts: RunFacts, deps: list[dict], tags: list[str]) -> Facts:
    """facts.json in the target's report folder: the run's facts, the dependencies, the target's line, platform
    and repository, the tags the image is pushed under (held ones included) and its stamped image."""
    record = Facts(
        **vars(facts) | {"command": tuple(facts.command)},  # the run's facts, as gathered
        finished=statements.now(),  # built, validated and stamped: what a later signing says too
        dependencies=tuple(deps),
        line=target.variant.name,
        flavor=target.variant.flavor,
        platform=target.platform,
        ref=target.ref,
        tags=tuple(tags),
        stamped_image_id=stamped_id,
    )
    write(target.run_dir / FACTS, record.as_dict())
    return record

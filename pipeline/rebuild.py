"""`build.py rebuild REF --key PUB`: build the revision a pushed, signed image names, cold, and say
whether it gives the same image (docs/supply-chain.md, "Rebuild it yourself").

What a rebuild needs comes from the image itself: its signed provenance (verified with `--key`: the
line, the platform, the full revision) and its config (the revision and epoch labels, the layers). The
revision is checked out in a temporary worktree of this clone (or `--source DIR`, a checkout of one's
own) and built without BuildKit's cache, its config written again as every build's is
(rebuild_config). REPRODUCED when the layers are the pushed ones and the settings are the pushed
ones less the stamp (the labels and variable only validation knows, pipeline/stamp.py); otherwise the
layers that differ, with the step that made each, and which packages moved against the signed SBOM
(the Debian mirror moves: a rebuild on another day can differ there and only there).
Exit 0 reproduced, 1 differs (or the image does not verify), 2 bad input, 4 the build failed,
6 a registry unreachable.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from common.deadlines import DEADLINES
from pipeline import build_image, docker_env, hostprocs, labels, rebuild_config, rebuild_files, registry, verify
from pipeline.errors import RegistryDataRefused, RegistryUnreachable, UsageError, ValidationFailed
from pipeline.validation import sbom
from pipeline.variants import AMD64, REPO_ROOT, Variant, arch, load_matrix

REBUILD_REPO = "proven-torch-rebuild"  # a flavor's rebuilt base is tagged proven-torch-rebuild-base-build:LINE for its FROM
REVISION = "org.opencontainers.image.revision"
CREATED = "org.opencontainers.image.created"
COMMIT = re.compile(r"[0-9a-f]{40}")  # what a signed revision must be before git sees it (no option, no "-dirty")
EPOCH_LABELS = {
    rebuild_config.SYSTEM_EPOCH: "io.proven-torch.source-date-epoch",
    rebuild_config.FILES_EPOCH: "io.proven-torch.files-epoch",
}
# The settings compared (a config's other keys say how it was made: BuildKit's or the stamp's builder).
SETTINGS = (
    "User",
    "Env",
    "Entrypoint",
    "Cmd",
    "WorkingDir",
    "Labels",
    "ExposedPorts",
    "Volumes",
    "Healthcheck",
    "StopSignal",
    "Shell",
)


@dataclass(frozen=True)
class RebuildRequest:
    ref: str
    keys: tuple[Path, ...]
    ca_cert: Path | None = None
    source: Path | None = None  # a checkout to build instead of a worktree of the signed revision
    timeout: float = DEADLINES["verify"]
    verbose: bool = False
    out: Path = Path("rebuild-report")  # where a rebuild that differs writes the files that differ


@dataclass(frozen=True)
class Pushed:
    """What the signed image says a rebuild needs, and what it is compared with."""

    ref: registry.ImageRef  # by digest: the verified image
    line: str
    platform: str
    revision: str  # the full commit, from the signed provenance
    config: dict  # the pushed image's config (the stamped image)
    packages: frozenset[str]  # the signed SBOM's package URLs
    layers: tuple[dict, ...] = ()  # the pushed manifest's layer descriptors, in the config's order

    def build_args(self) -> dict[str, str]:
        got = self.config.get("config", {}).get("Labels") or {}
        missing = [label for label in EPOCH_LABELS.values() if not str(got.get(label, "")).isdigit()]
        if missing:
            raise UsageError(
                f"{self.ref} has no {missing[0]} label: it was built before builds were reproducible, so it cannot be rebuilt"
            )
        label = str(got.get(REVISION) or "")
        if not COMMIT.fullmatch(self.revision) or not label or not self.revision.startswith(label):
            raise UsageError(
                f"{self.ref} was built from {got.get(REVISION)!r}, not a commit: a checkout with changes cannot be rebuilt"
            )
        epochs = {arg: got[label] for arg, label in EPOCH_LABELS.items()}
        return {"SOURCE": build_image.SOURCE, "REVISION": got[REVISION], "CREATED": got.get(CREATED, ""), **epochs}


def read_pushed(request: RebuildRequest) -> Pushed:
    """The image verified with the keys (verify's every check), then its config read by digest (an index:
    its amd64 image's)."""
    record = verify.verify(request.ref, list(request.keys), verify.Policy(), request.timeout)
    image = next((i for i in record["images"] if i.get("platform", AMD64) == AMD64), record["images"][0])
    client, ref, _ = registry.open_image(request.ref, request.timeout)
    found = client.manifest(image["digest"])
    if found is None:
        raise UsageError(f"{ref}: the registry no longer has {image['digest'][:19]}…")
    config = registry.as_dict(client.blob(registry.config_digest(found[0], str(ref))), f"{ref}'s config")
    layers = registry.descriptors(registry.as_dict(found[0], f"{ref}'s manifest").get("layers"), f"{ref}'s manifest")
    provenance = image["provenance"]
    return Pushed(
        registry.ImageRef(ref.host, ref.repo, image["digest"]),
        provenance["line"],
        provenance["platform"],
        provenance["revision"],
        config,
        frozenset(image.get("packages", [])),
        tuple(layers),  # each with a sha256 digest, in the config's order: none dropped, so the pairing holds
    )


def checkout(pushed: Pushed, work: Path) -> Path:
    """A worktree of this clone at the signed revision, in `work`."""
    tree = work / "source"
    done = hostprocs.run_host(["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", str(tree), pushed.revision], "git")
    if done.returncode != 0:
        raise UsageError(f"revision {pushed.revision[:12]} is not in this clone: `git fetch` it (or pass --source DIR) and retry")
    return tree


def settings(config: dict) -> dict:
    """The image's settings less the stamp: the labels the build set, its variables, how it starts."""
    own = {key: (config.get("config") or {}).get(key) or None for key in SETTINGS}
    own["Labels"] = {k: v for k, v in (own["Labels"] or {}).items() if k not in labels.STAMPED}
    own["Env"] = [e for e in own["Env"] or [] if not e.startswith(f"{labels.STAMPED_ENV}=")]
    return own


def moved(signed: frozenset[str], rebuilt: frozenset[str]) -> list[str]:
    """The packages whose versions differ between two sets of package URLs: 'pypi/tqdm 4.67.1 -> 4.67.0',
    or one side's alone ('+' rebuilt only, '-' signed only)."""

    def versions(purls: frozenset[str]) -> dict[str, str]:
        return {p.removeprefix("pkg:").split("@")[0]: p.split("@", 1)[-1].split("?")[0] for p in purls}

    a, b = versions(signed), versions(rebuilt)
    out = [f"{n} {a[n]} -> {b[n]}" for n in sorted(a.keys() & b.keys()) if a[n] != b[n]]
    return out + [f"-{n} {a[n]}" for n in sorted(a.keys() - b.keys())] + [f"+{n} {b[n]}" for n in sorted(b.keys() - a.keys())]


def step(created_by: str) -> str:
    """A layer's step in a few words: the lock file a Python layer installs, else the command's start."""
    lock = re.search(r"/opt/proven-torch/lock/([\w.-]+\.txt)", created_by)
    if lock:
        return f"the Python layer of {lock.group(1)}"
    command = re.sub(r"^RUN (\|\d+ (\S+=\S* )*)?(/bin/bash -o pipefail -c )?(started=\$\(date \+%s\) && )?", "", created_by)
    return command[:80]


def compare(pushed: Pushed, rebuilt: dict, steps: list[str]) -> list[str]:
    """What differs between the pushed image and the rebuilt one's config (`steps`: the step that made each
    layer): one line each; none when they are one image."""
    ours, theirs = rebuilt["rootfs"]["diff_ids"], pushed.config.get("rootfs", {}).get("diff_ids", [])
    lines = [f"layers: {len(theirs)} pushed, {len(ours)} rebuilt"] if len(ours) != len(theirs) else []
    for n, (a, b) in enumerate(zip(theirs, ours, strict=False), 1):
        if a != b:
            lines.append(f"layer {n} differs ({a[:19]}… pushed, {b[:19]}… rebuilt): {step(steps[n - 1])}")
    if settings(pushed.config) != settings(rebuilt):
        lines.append("settings differ (labels, variables, how it starts): compare `docker inspect` of the two")
    return lines


def inputs_moved(signed: frozenset[str], rebuilt: frozenset[str]) -> list[str]:
    """The line naming the packages that moved (at most eight, then a count), or none."""
    changed = moved(signed, rebuilt)
    more = f" (+{len(changed) - 8} more)" if len(changed) > 8 else ""
    return ["inputs moved: " + ", ".join(changed[:8]) + more] if changed else []


def rebuild(request: RebuildRequest) -> tuple[list[str], int]:
    """The lines to print and the exit status (0 reproduced, 1 differs)."""
    if request.out.exists() and (not request.out.is_dir() or any(request.out.iterdir())):
        raise UsageError(f"--out {request.out}: give an empty or new folder (a rebuild that differs writes its files there)")
    pushed = read_pushed(request)
    args = pushed.build_args()
    print(
        f"==> {pushed.ref}: {pushed.line} ({pushed.platform}) at {pushed.revision[:12]}, verified; rebuilding it cold", flush=True
    )
    client, cli = docker_env.docker_client(), docker_env.find_build_cli()
    with tempfile.TemporaryDirectory(prefix="proven-torch-rebuild-") as tmp:
        work = Path(tmp)
        root = request.source or checkout(pushed, work)
        try:
            matrix = load_matrix(root / "images" / "variants.toml")
            variant = matrix.line(pushed.line)  # a flavor ("2.9-cu128-rlhf") too
            args["OS_IMAGE"] = matrix.base_image_for(pushed.platform)

            def built(of: Variant, build_args: dict[str, str], out: str) -> str:
                asked = build_image.Build(
                    of, work / out, build_args, pushed.platform, request.ca_cert, request.verbose, root, True
                )
                return build_image.build_image(client, cli, matrix, asked).image_id

            if variant.flavored:  # as the build did: the base line, with its own epochs at the revision, then the flavor on it
                base = matrix.by_name(variant.base_name)
                print(f"==> rebuilding the base image {base.name} first (the {variant.flavor} flavor starts FROM it)", flush=True)
                of_base = {**build_image.build_args(base, args["REVISION"], args["CREATED"], root), "OS_IMAGE": args["OS_IMAGE"]}
                args["BASE_IMAGE"] = build_image.base_build_ref(client, REBUILD_REPO, base.name, built(base, of_base, "base"))
            image_id = built(variant, args, "out")
        finally:
            if request.source is None:
                hostprocs.run_host(["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(root)], "git")
    attrs = client.images.get(image_id).attrs
    config = json.loads(rebuild_config.config_bytes(attrs, client.api.history(image_id), args["CREATED"]))
    steps = [entry["created_by"] for entry in config["history"] if not entry.get("empty_layer")]
    found = compare(pushed, config, steps)
    if not found:
        return [f"REPRODUCED: {pushed.ref} is {image_id} rebuilt from {pushed.revision[:12]} ({arch(pushed.platform)})"], 0
    theirs = pushed.config.get("rootfs", {}).get("diff_ids", [])
    pairs = rebuild_files.differing(pushed.layers, theirs, config["rootfs"]["diff_ids"])
    try:  # a diagnosis: when it cannot be made, the verdict above still stands
        found += rebuild_files.name_files(pushed.ref, client, image_id, pairs, request.out)
    except (RegistryDataRefused, RegistryUnreachable) as err:
        found.append(f"files not named: {err}")
    # which packages moved: the rebuilt image's inventory against the signed SBOM
    try:  # a diagnosis too: the verdict stands without it
        bom = json.loads(sbom.build_sbom(sbom.read_inventory(client, image_id), "rebuild", image_id, matrix.base_suite))
    except ValidationFailed as err:  # the inventory's tool failed in the rebuilt image
        found.append(f"packages not compared: {err}")
    else:
        found += inputs_moved(pushed.packages, frozenset(c["purl"] for c in bom.get("components", []) if c.get("purl")))
    return [
        f"DIFFERS: {pushed.ref} and its rebuild {image_id[:19]} ({arch(pushed.platform)})",
        *(f"  {line}" for line in found),
    ], 1

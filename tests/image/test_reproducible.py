"""Two builds of one revision give one image (issue 47), on a small image made the way the template
makes every layer: /etc from images/os/etc-hosts.tar, each RUN's files set to its epoch (render.START,
render.CLAMP), the mounts' targets made first, the project's files copied from the mounted context,
and the config written again (rebuild_config.normalise). Each build runs without BuildKit's cache, at
another second, after the context's files were touched. The whole default image is rebuilt weekly
(docs/supply-chain.md)."""

from __future__ import annotations

import calendar
import json
import os
import shutil
import subprocess
import time

import pytest

from pipeline import rebuild_config, rebuild_files, registry
from pipeline.docker_env import find_build_cli
from pipeline.render import APT_CLEAN, CLAMP, START
from pipeline.variants import REPO_ROOT, load_matrix
from tests.image.conftest import REGISTRY, TEST_LABELS

pytestmark = pytest.mark.image

SYSTEM, FILES = 1_700_000_000, 1_700_086_400
WHEN = "2023-11-15T22:13:20Z"  # FILES, the newer epoch


def dockerfile(base: str) -> str:
    labels = " ".join(f'{k}="{v}"' for k, v in TEST_LABELS.items())
    return f"""FROM {base}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ADD images/os/etc-hosts.tar /
ARG SOURCE_DATE_EPOCH
RUN {START}useradd --uid 1000 --gid 100 --create-home user \\
 && install -d -o 1000 -g 100 /opt/app /home/user/.cache/pip \\
 && install -d /run/secrets && touch /run/secrets/pip_ca /mnt/lock-amd64.txt{CLAMP}
USER 1000:100
RUN --mount=type=secret,id=pip_ca,uid=1000 \\
    --mount=type=cache,id=proven-torch-test-reproducible,target=/home/user/.cache/pip,uid=1000,gid=100 \\
    --mount=type=tmpfs,target=/tmp \\
    --mount=type=bind,source=app/lock.txt,target=/mnt/lock-amd64.txt \\
    {START}cp /mnt/lock-amd64.txt /opt/app/ && test -s /run/secrets/pip_ca \\
 && mkdir -p /opt/app/made && echo made > /opt/app/made/file && touch /tmp/scratch{CLAMP}
USER 0
ARG FILES_EPOCH
RUN --mount=type=bind,target=/mnt {START}export SOURCE_DATE_EPOCH=$FILES_EPOCH \\
 && cp -R /mnt/app /opt/app/files && ln -s /opt/app/files/a.txt /usr/local/bin/a{CLAMP}
LABEL {labels}
"""


@pytest.fixture
def context(tmp_path):
    folder = tmp_path / "context"
    (folder / "images" / "os").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "images" / "os" / "etc-hosts.tar", folder / "images" / "os")
    (folder / "app").mkdir()
    (folder / "app" / "lock.txt").write_text("six==1.0 --hash=sha256:00\n")
    (folder / "app" / "a.txt").write_text("the project's file\n")
    (folder / "Dockerfile").write_text(dockerfile(load_matrix().base_image_for("linux/amd64")))
    (tmp_path / "ca.pem").write_text("a CA that must not reach a layer\n")
    return folder


def build(docker, folder, epochs=(SYSTEM, FILES)) -> tuple[str, str]:
    """(BuildKit's image ID, the reproducible one), built without the cache, the context's files touched first."""
    for path in folder.rglob("*"):
        os.utime(path, None)
    cli = find_build_cli()
    iid = folder.parent / "iid"
    args = {rebuild_config.SYSTEM_EPOCH: str(epochs[0]), rebuild_config.FILES_EPOCH: str(epochs[1])}
    subprocess.run(
        [*cli.argv, "-q", "--no-cache", "--iidfile", str(iid), "--secret", f"id=pip_ca,src={folder.parent / 'ca.pem'}"]
        + [f"--build-arg={k}={v}" for k, v in args.items()]
        + [str(folder)],
        env=cli.environ(),
        check=True,
        capture_output=True,
        timeout=300,
    )
    built = iid.read_text().strip()
    return built, rebuild_config.normalise(docker, built, rebuild_config.created(args))


def test_two_cold_builds_seconds_apart_give_one_image(docker, context):
    first_built, first = build(docker, context)
    time.sleep(1.1)  # another second on the clock every file and history entry would carry
    second_built, second = build(docker, context)
    assert first_built != second_built  # BuildKit's own config carries its clock...
    assert first == second  # ...the reproducible one does not, and the layers are the same bytes
    image = docker.images.get(first)
    assert image.attrs["Created"].startswith(WHEN.removesuffix("Z"))
    assert {item["Created"] for item in docker.api.history(first)} == {calendar.timegm(time.strptime(WHEN, "%Y-%m-%dT%H:%M:%SZ"))}
    out = docker.containers.run(
        first, ["stat", "-c", "%Y %n", "/opt/app/made/file", "/opt/app/files/a.txt"], remove=True, user="0"
    )
    assert out.decode().split() == [str(SYSTEM), "/opt/app/made/file", str(FILES), "/opt/app/files/a.txt"]
    assert docker.containers.run(first, ["cat", "/run/secrets/pip_ca"], remove=True) == b""  # the CA reached no layer


def test_a_changed_file_or_epoch_is_another_image(docker, context):
    _, same = build(docker, context)
    (context / "app" / "a.txt").write_text("the project's file, edited\n")
    _, edited = build(docker, context)
    assert edited != same
    layers = docker.images.get(same).attrs["RootFS"]["Layers"], docker.images.get(edited).attrs["RootFS"]["Layers"]
    assert layers[0][:-1] == layers[1][:-1] and layers[0][-1] != layers[1][-1]  # only the files' layer differs
    _, later = build(docker, context, epochs=(SYSTEM, FILES + 1))
    assert later not in (same, edited)


def test_a_layer_that_differs_names_its_files_from_the_registry_and_docker_save(docker, context, tmp_path):
    """What `build.py rebuild` does when a layer differs (pipeline/rebuild_files.py), on real sides: one
    image pushed to the registry on 127.0.0.1 and read back by its layer's digest, the other read from
    `docker save`; the file edited between the builds is named, copied out and compared by diffoscope."""
    _, pushed_id = build(docker, context)
    repo = f"{REGISTRY}/proven-torch-test-rebuild-files"
    docker.images.get(pushed_id).tag(repo, "pushed")
    docker.images.push(repo, "pushed")
    (context / "app" / "a.txt").write_text("the project's file, edited\n")
    _, rebuilt_id = build(docker, context)
    client = registry.Registry(registry.parse_ref(f"{repo}:pushed"), registry.Deadline(60))
    manifest = json.loads(client.manifest("pushed")[0])
    theirs, ours = (docker.images.get(i).attrs["RootFS"]["Layers"] for i in (pushed_id, rebuilt_id))
    n = len(theirs)  # the files' layer, the last, and the only one that differs
    pairs = rebuild_files.differing(manifest["layers"], theirs, ours)
    assert [pair.n for pair in pairs] == [n]
    lines = rebuild_files.name_files(registry.parse_ref(f"{repo}:pushed"), docker, rebuilt_id, pairs, tmp_path)
    assert [line.strip() for line in lines[:2]] == [f"in layer {n}:", "/opt/app/files/a.txt: content, 19 vs 27 bytes"], lines
    assert (tmp_path / f"layer-{n}" / "rebuilt" / "opt/app/files/a.txt").read_text() == "the project's file, edited\n"
    assert (tmp_path / f"layer-{n}" / "pushed" / "opt/app/files/a.txt").read_text() == "the project's file\n"
    assert "edited" in (tmp_path / f"layer-{n}.diffoscope.txt").read_text()


def whiteouts(docker, dockerfile: str, folder) -> list[str]:
    """The whiteouts (a layer's record of a lower layer's file deleted) in the image `dockerfile` builds."""
    folder.mkdir()
    (folder / "Dockerfile").write_text(dockerfile)
    cli, iid = find_build_cli(), folder / "iid"
    argv = [*cli.argv, "-q", "--no-cache", "--iidfile", str(iid), f"--build-arg=SOURCE_DATE_EPOCH={SYSTEM}", str(folder)]
    subprocess.run(argv, env=cli.environ(), check=True, capture_output=True, timeout=300)
    layers = rebuild_files.saved_layers(docker, iid.read_text().strip())
    return sorted(path for _, body in layers for path in rebuild_files.walk(body) if "/.wh." in path)


def test_the_templates_apt_step_deletes_no_file_of_the_base(docker, tmp_path):
    """Docker times a whiteout by its clock, out of the step's reach, so a step that deletes a lower
    layer's file makes every build another image (what `make reproduce` found in the apt step over a base
    that holds apt's lists lock): the template's apt clean-up (render.APT_CLEAN) over the real base leaves
    none; a step that does delete one is caught."""
    head = f'FROM {load_matrix().base_image_for("linux/amd64")}\nSHELL ["/bin/bash", "-o", "pipefail", "-c"]\nARG SOURCE_DATE_EPOCH\n'
    assert whiteouts(docker, f"{head}RUN {START}apt-get update{APT_CLEAN}{CLAMP}\n", tmp_path / "apt") == []
    deleting = whiteouts(docker, f"{head}RUN {START}rm /etc/debian_version{CLAMP}\n", tmp_path / "deleting")
    assert deleting == ["/etc/.wh.debian_version"]

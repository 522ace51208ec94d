"""The rlhf flavor of the default line through the real pipeline: built FROM the base
image (cached layers), validated with everything the base proves plus the RLHF gate,
tagged with its flavor and pushed to the registry on 127.0.0.1, where only the
flavor's layers are new. A gate that cannot pass (learning rate 0) tags nothing.
"""

from __future__ import annotations

import dataclasses
import io
import json
import tarfile

import pytest
import requests

from pipeline.errors import ValidationFailed
from pipeline.line import run
from pipeline.publish import UNSIGNED
from pipeline.render import render_spec
from pipeline.stamp import validate_and_tag
from pipeline.target import Target
from pipeline.validation import audit
from pipeline.variants import REPO_ROOT, resolve
from tests.image.conftest import REGISTRY, ca_cert, pushed_request, registry_manifest
from tests.image.tracked_container import TrackedContainer

pytestmark = pytest.mark.image

REPO = "proven-torch-test"


@pytest.fixture(scope="module")
def rlhf(matrix):
    return resolve(matrix, matrix.default_cuda, flavor="rlhf")


@pytest.fixture(scope="module")
def rlhf_run(docker, matrix, rlhf, pipeline_run, tmp_path_factory):
    """The flavor built, validated and pushed after the base (pipeline_run) reached the same repository."""
    if pipeline_run is None:
        pytest.skip("PROVEN_TORCH_TEST_IMAGE given: the pipeline runs were skipped")
    return run(pushed_request(matrix, rlhf, REPO, tmp_path_factory.mktemp("rlhf-reports")))


@pytest.fixture(scope="module")
def report(rlhf_run):
    return json.loads(rlhf_run.report_path.read_text())


def test_the_flavor_is_validated_with_the_rlhf_gate_and_tagged_with_its_name(rlhf_run, report, rlhf):
    assert report["status"] == "pushed" and report["validation"]["ok"] is True
    proof = json.loads(rlhf_run.report_path.with_name("proof.json").read_text())
    gate = proof["rlhf"]
    assert gate["passed"] is True and gate["gain"] >= rlhf.spec()["rlhf_gate"]["min_gain"]
    assert proof["ppo"]["solved"] is True  # everything the base proves, first
    tags = [ref.rsplit(":", 1)[1] for ref in rlhf_run.tags]  # the run gives full references
    assert tags[0].endswith("-rlhf") and tags[1:] == [rlhf.name]


def test_an_unsigned_push_attaches_the_sbom_unsigned_and_says_so(rlhf_run, report):
    """No --sign-key (this run): the push works as before signing existed. The SBOM goes as an OCI
    artifact whose subject is the pushed image, and the report says the push is unsigned."""
    assert report["push"]["signatures"] == UNSIGNED
    sbom = report["push"]["sbom"]
    assert sbom["pushed"] is True, sbom
    repo_ref, tag = sbom["ref"].rsplit(":", 1)
    image_digest = next(iter(rlhf_run.pushed.values()))
    assert tag == image_digest.replace(":", "-") + ".sbom"
    manifest = registry_manifest(f"{repo_ref}:{tag}").json()
    assert manifest["artifactType"] == "application/vnd.cyclonedx+json"
    assert manifest["subject"]["digest"] == image_digest
    repo = repo_ref.split("/", 1)[1]
    blob = requests.get(f"http://{REGISTRY}/v2/{repo}/blobs/{manifest['layers'][0]['digest']}", timeout=60).content
    assert blob == rlhf_run.report_path.with_name("sbom.cdx.json").read_bytes()


def test_only_the_flavors_layers_are_new_in_the_registry(rlhf_run, pipeline_run):
    base = registry_manifest(pipeline_run.tags[0]).json()["layers"]
    flavor = registry_manifest(rlhf_run.tags[0]).json()["layers"]
    assert [layer["digest"] for layer in flavor[: len(base)]] == [layer["digest"] for layer in base]  # byte-identical
    new = flavor[len(base) :]
    assert 1 <= len(new) <= 4, [layer["size"] for layer in new]  # the lock file, the packages, the spec, its notebooks
    print(f"rlhf flavor: {len(new)} new layer(s), {sum(layer['size'] for layer in new) / 1e6:.0f} MB compressed")


def test_importing_torch_after_the_rlhf_stack_gives_the_pinned_build(docker, rlhf_run, rlhf):
    code = "import trl, transformers, peft, accelerate, datasets, torch; print(torch.__version__)"
    with TrackedContainer(docker, rlhf_run.stamped_id, command=["python", "-c", code]) as container:
        container.start()
        assert container.wait_exit(timeout=120) == 0, container.logs()[-2000:]
        assert container.logs().strip().splitlines()[-1].startswith(rlhf.torch)


@pytest.mark.lines  # `make lines` (weekly): a minute of CI for a stop every failing check proves there
def test_a_gate_that_cannot_pass_tags_nothing(docker, rlhf_run, rlhf, tmp_path):
    """Learning rate 0: the reward cannot rise; validation fails at the RLHF gate and tags nothing. CI proves the
    same stop with the default image's failing checks (no torch, pins that disagree, a planted secret, a high
    advisory) and the gate's own failure with rlhf_bench's unit test (learning rate 0, exit 3)."""
    gate = dict(rlhf.flavor_gate) | {"learning_rate": 0.0}
    frozen = dataclasses.replace(rlhf, flavor_gate=tuple(gate.items()))
    spec = render_spec(frozen, audit.disclosures([frozen])[frozen.name]).encode()
    dockerfile = f"FROM {rlhf_run.validated_id}\nCOPY expect.json /opt/proven-torch/expect.json\n".encode()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile), ("expect.json", spec)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    image, _ = docker.images.build(fileobj=context, custom_context=True, rm=True, labels={"io.proven-torch.role": "test"})
    target = Target(
        variant=frozen,
        run_dir=tmp_path,
        ref="proven-torch-test-bad",
        date="20000101",
        created="test",
        revision="test",
        ca_cert=ca_cert(),
    )
    try:
        with pytest.raises(ValidationFailed, match="RLHF gate"):
            validate_and_tag(docker, image.id, 0, target)
        assert docker.images.get(image.id).tags == []
        assert json.loads((tmp_path / "report.json").read_text())["status"] == "failed"
    finally:
        docker.images.remove(image.id, force=True)


def test_the_flavors_notebook_runs_headless_in_the_image(docker, rlhf_run):
    """The flavor's own example (only -rlhf images ship it, beside the base's, which
    tests/image/test_desktop.py runs) top to bottom with Jupyter's own notebook client
    (nbclient, `jupyter execute`) in the image, within its time budget."""
    flavor_notebooks = sorted(p.name for p in (REPO_ROOT / "notebooks" / "rlhf").glob("*.ipynb"))
    base_notebooks = sorted(p.name for p in (REPO_ROOT / "notebooks" / "base").glob("*.ipynb"))
    cmd = [
        "bash",
        "-c",
        "ls /opt/proven-torch/notebooks && cp /opt/proven-torch/notebooks/rlhf-grpo.ipynb /tmp/ && cd /tmp && "
        'jupyter execute --timeout=240 --output=/tmp/out.ipynb rlhf-grpo.ipynb && python -c "import json; '
        "nb = json.load(open('/tmp/out.ipynb')); print(sum(1 for c in nb['cells'] if c.get('outputs')))\"",
    ]
    with TrackedContainer(docker, rlhf_run.stamped_id, command=cmd) as container:
        container.start()
        assert container.wait_exit(timeout=300) == 0, container.logs()[-3000:]
        lines = container.logs().strip().splitlines()
        assert flavor_notebooks == ["rlhf-grpo.ipynb"]
        assert sorted(line for line in lines if line.endswith(".ipynb") and " " not in line) == sorted(
            base_notebooks + flavor_notebooks
        )
        assert int(lines[-1]) >= 1  # cells ran and produced output

"""A CycloneDX 1.6 SBOM of the image (docs/supply-chain.md, "SBOM"): the inventory read in a container of it by
its own tool, the document written on the host with cyclonedx-python-lib."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pipeline.containers import json_answer, run_in_image
from pipeline.variants import Variant

# The image's own tool (container/sbom_inventory.py): pip inspect + dpkg-query, as JSON.
INVENTORY = "/opt/proven-torch/container/sbom_inventory.py"


def read_inventory(client, image_id: str, timeout_s: float = 300) -> dict:
    done = run_in_image(
        client, image_id, [INVENTORY], entrypoint=["python3"], network=False, timeout_s=timeout_s, what="the SBOM inventory"
    )
    return json_answer(done, "the SBOM inventory")


def build_sbom(inventory: dict, image_name: str, image_id: str, base_suite: str) -> str:
    """CycloneDX 1.6 JSON text for the inventory."""
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    bom = Bom()
    bom.metadata.component = Component(
        name=image_name, version=image_id, type=ComponentType.CONTAINER, bom_ref=f"image:{image_id}"
    )
    for pkg in sorted(inventory["python"], key=lambda p: p["name"].lower()):
        bom.components.add(
            Component(
                name=pkg["name"],
                version=pkg["version"],
                type=ComponentType.LIBRARY,
                purl=PackageURL("pypi", name=pkg["name"].lower(), version=pkg["version"]),
                bom_ref=f"pypi:{pkg['name'].lower()}@{pkg['version']}",
            )
        )
    for deb in sorted(inventory["debian"], key=lambda d: d["name"]):
        bom.components.add(
            Component(
                name=deb["name"],
                version=deb["version"],
                type=ComponentType.LIBRARY,
                purl=PackageURL(
                    "deb",
                    namespace="debian",
                    name=deb["name"],
                    version=deb["version"],
                    qualifiers={"arch": deb["arch"], "distro": f"debian-{base_suite}"},
                ),
                bom_ref=f"deb:{deb['name']}@{deb['version']}",
            )
        )
    bom.register_dependency(bom.metadata.component, list(bom.components))
    return JsonV1Dot6(bom).output_as_string(indent=2)


def write_sbom(client, image_id: str, variant: Variant, out_dir: Path, time_scale: float) -> tuple[dict, dict]:
    """Write sbom.cdx.json next to the report; return the inventory it was made from and a summary."""
    inventory = read_inventory(client, image_id, 300 * time_scale)
    path = out_dir / "sbom.cdx.json"
    data = build_sbom(inventory, f"proven-torch {variant.name}", image_id, variant.base_suite).encode()
    path.write_bytes(data)
    summary = {
        "format": "CycloneDX 1.6 JSON",
        "file": path.name,
        "sha256": hashlib.sha256(data).hexdigest(),  # validation.json is stamped into the image: this binds the SBOM too
        "python_packages": len(inventory["python"]),
        "debian_packages": len(inventory["debian"]),
    }
    print(f"==> SBOM: {summary['python_packages']} Python and {summary['debian_packages']} Debian packages -> {path}", flush=True)
    return inventory, summary

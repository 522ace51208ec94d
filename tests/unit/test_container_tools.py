"""The image's own tools that validation runs inside it: the hygiene scanner and the SBOM inventory."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

CONTAINER = Path(__file__).resolve().parents[2] / "container"
FAKE_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + "A" * 70 + "\n-----END OPENSSH PRIVATE KEY-----\n"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, CONTAINER / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hygiene_scan = load("hygiene_scan")
sbom_inventory = load("sbom_inventory")


def plant(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_clean_tree_has_no_findings(tmp_path):
    plant(tmp_path, {"opt/venv/lib/site.py": "print('hi')", "usr/bin/tool": "-----BEGIN RSA PRIVATE KEY-----\n"})
    assert hygiene_scan.scan(str(tmp_path), []) == []


@pytest.mark.parametrize(
    ("rel", "text", "finding"),
    [
        ("home/user/.ssh/id_ed25519", "x", "SSH private key: /home/user/.ssh/id_ed25519"),
        ("etc/ssh/ssh_host_ed25519_key", "x", "SSH host key: /etc/ssh/ssh_host_ed25519_key"),
        ("home/user/.ssh/authorized_keys", "x", "authorized_keys: /home/user/.ssh/authorized_keys"),
        ("root/.netrc", "x", "credentials file: /root/.netrc"),
        ("tmp/jpserver-1.json", "{}", "Jupyter runtime secret: /tmp/jpserver-1.json"),
        ("usr/local/cuda/bin/nvcc", "", "CUDA compiler (runtime images carry none): /usr/local/cuda/bin/nvcc"),
        ("opt/app/key.pem", FAKE_KEY, "private key: /opt/app/key.pem"),
        ("opt/app/env", "GH=ghp_" + "a" * 36, "access token: /opt/app/env"),
        ("srv/repo/.git/HEAD", "ref", ".git folder: /srv/repo/.git"),
        ("home/user/.cache/pip/http/x", "x", "pip cache: /home/user/.cache/pip"),
    ],
)
def test_a_planted_secret_is_found(tmp_path, rel, text, finding):
    plant(tmp_path, {rel: text})
    assert finding in hygiene_scan.scan(str(tmp_path), [])


def test_the_build_ca_is_found_outside_the_system_bundle_only(tmp_path):
    cert = "-----BEGIN CERTIFICATE-----\nMIIB" + "Q" * 120 + "\n-----END CERTIFICATE-----\n"
    marker = ("MIIB" + "Q" * 120)[10:60]
    plant(tmp_path, {"etc/ssl/certs/ca.pem": cert, "opt/venv/certifi/cacert.pem": cert})
    assert hygiene_scan.scan(str(tmp_path), [marker]) == ["build CA certificate: /opt/venv/certifi/cacert.pem"]


def test_wheel_test_fixtures_are_not_findings(tmp_path):
    plant(tmp_path, {"opt/venv/lib/python3.11/site-packages/tornado/test/test.key": FAKE_KEY})
    assert hygiene_scan.scan(str(tmp_path), []) == []


def test_the_scanner_prints_one_json_list(tmp_path):
    plant(tmp_path, {"root/.pypirc": "x"})
    done = subprocess.run(
        [sys.executable, str(CONTAINER / "hygiene_scan.py"), "--root", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and json.loads(done.stdout) == ["credentials file: /root/.pypirc"]


def test_inventory_reads_pip_inspect_and_dpkg():
    pip = {"installed": [{"metadata": {"name": "torch", "version": "3.4.1", "license_expression": "BSD-3-Clause"}}]}
    assert sbom_inventory.python_packages(pip) == [{"name": "torch", "version": "3.4.1", "license": "BSD-3-Clause"}]
    assert sbom_inventory.debian_packages("tini\t0.19.0-1\tamd64\n") == [{"name": "tini", "version": "0.19.0-1", "arch": "amd64"}]

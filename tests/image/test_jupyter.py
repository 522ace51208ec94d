"""JupyterLab in the image, through real clients: its REST API and a kernel driven
over the websocket, as a notebook would. One container (default command, no key,
generated token) serves the module; the token tests that need other settings
start their own.
"""

from __future__ import annotations

import pytest
import requests

from pipeline.variants import REPO_ROOT
from tests.image.conftest import TEST_LABELS
from tests.image.service_helpers import FAST_HEALTHCHECK, Jupyter, run_command, wait_for_jupyter
from tests.image.tracked_container import TrackedContainer, wait_until

pytestmark = pytest.mark.image


@pytest.fixture(scope="module")
def lab(docker, image):
    """The image's default command: JupyterLab, token generated and printed by start.sh."""
    with TrackedContainer(docker, image, healthcheck=FAST_HEALTHCHECK) as container:
        container.start(ports=(8888,))
        token = wait_for_jupyter(container)
        yield container, Jupyter(container.ports[8888], token)


def test_logs_print_the_url_with_a_generated_token(lab):
    container, jupyter = lab
    assert len(jupyter.token) == 48, container.logs()[-2000:]
    assert f"http://127.0.0.1:8888/lab?token={jupyter.token}" in container.logs()


def test_lab_url_is_the_address_the_host_opens(lab):
    """`jupyter server list` names the container's hostname, which the host cannot open; `lab-url` gives
    127.0.0.1, the published port when the container knows it, and the token, and says what to map when not."""
    container, jupyter = lab
    published = container.ports[8888]
    code, out = container.exec(["lab-url"], environment={"JUPYTER_HOST_PORT": str(published)})
    url = out.strip()
    assert code == 0 and url == f"http://127.0.0.1:{published}/lab?token={jupyter.token}", out
    assert requests.get(url, timeout=30).status_code == 200  # the host opens it as it is
    # stdout and stderr read apart: Docker copies the two streams separately and may interleave them either way
    code, out = container.exec(["sh", "-c", "lab-url 2>/dev/null"])
    assert code == 0 and out.strip() == f"http://127.0.0.1:8888/lab?token={jupyter.token}", out
    _, note = container.exec(["sh", "-c", "lab-url 2>&1 >/dev/null"])
    assert "port 8888 inside the container" in note, note
    _, listed = container.exec(["jupyter", "server", "list"])
    assert "127.0.0.1" not in listed  # what the docs explain: the container's own name, not the host's address


def test_api_refuses_requests_without_the_token(lab):
    _, jupyter = lab
    assert jupyter.get("/api/kernels", token=None).status_code in (401, 403)


def test_api_refuses_a_wrong_token(lab):
    _, jupyter = lab
    assert jupyter.get("/api/kernels", token="0" * 48).status_code in (401, 403)


def test_api_accepts_the_token(lab):
    _, jupyter = lab
    response = jupyter.get("/api/kernels")
    assert response.status_code == 200 and response.json() == []


def test_api_accepts_the_token_in_the_url(lab):
    _, jupyter = lab
    assert jupyter.get(f"/api/status?token={jupyter.token}", token=None).status_code == 200


def test_kernel_imports_torch_over_the_websocket(lab, variant):
    _, jupyter = lab
    out = jupyter.run_in_new_kernel("import torch\nprint(torch.__version__)\ntorch.ones(2).sum().item()")
    assert out["status"] == "ok", out["error"]
    assert out["stdout"].strip().split("+")[0] == variant.torch, out
    assert out["result"] == "2.0"


def test_kernel_is_the_image_python(lab):
    _, jupyter = lab
    out = jupyter.run_in_new_kernel("import sys, os\nprint(sys.prefix, os.getcwd())")
    assert out["stdout"].split() == ["/opt/venv", "/workspace"], out


def test_healthcheck_turns_healthy(lab):
    container, _ = lab
    wait_until(lambda: container.health() == "healthy", 60, "a healthy container")


def test_without_a_key_sshd_does_not_run(lab):
    container, _ = lab
    code, out = container.exec(["ps", "-eo", "comm="])
    assert code == 0 and "sshd" not in out.split(), out
    assert "SSH: off (no key given" in container.logs()


def test_server_list_finds_the_server_through_docker_exec(lab):
    container, jupyter = lab
    code, out = container.exec(["jupyter", "server", "list"])
    assert code == 0 and jupyter.token in out, out


# --- token settings ---------------------------------------------------------------


def test_the_extension_manager_searches_no_catalogue(lab):
    container, jupyter = lab
    assert "Extension Manager is 'readonly'" in container.logs() and "Extension Manager is 'pypi'" not in container.logs()
    listed = jupyter.get("/lab/api/extensions")
    assert listed.status_code == 200, listed.text[:300]


def test_the_lab_without_a_network_logs_no_error(docker, image):
    """What the docs claim: the Lab reaches out to nothing, so with --network none its log has no error."""
    with TrackedContainer(docker, image, network_mode="none") as container:
        container.start()
        wait_until(lambda: "JupyterLab is ready" in container.logs(), 120, "the Lab without a network")
        errors = [line for line in container.logs().splitlines() if " E " in line[:40] or "Traceback" in line or "[E " in line]
        assert errors == [], errors


def test_an_empty_jupyter_token_does_not_disable_auth(docker, image):
    with TrackedContainer(docker, image, environment={"JUPYTER_TOKEN": ""}) as container:
        container.start(ports=(8888,))
        token = wait_for_jupyter(container)
        jupyter = Jupyter(container.ports[8888], token)
        assert len(token) == 48
        assert jupyter.get("/api/kernels", token=None).status_code in (401, 403)
        assert jupyter.get("/api/kernels").status_code == 200


def test_a_given_token_works_and_is_not_printed(docker, image):
    token = "a-token-the-user-chose-1234"
    with TrackedContainer(docker, image, environment={"JUPYTER_TOKEN": token}) as container:
        container.start(ports=(8888,))
        wait_for_jupyter(container)
        jupyter = Jupyter(container.ports[8888], token)
        assert jupyter.get("/api/kernels").status_code == 200
        assert token not in container.logs()
        assert "lab?token=<your JUPYTER_TOKEN>" in container.logs()


def test_a_hashed_password_logs_in(docker, image):
    password = "correct horse battery staple"
    # The command the docs give for making a hash, through the image's entrypoint.
    code, out = run_command(
        docker, image, ["python", "-c", f"from jupyter_server.auth import passwd; print(passwd({password!r}))"]
    )
    hashed = out.strip()
    assert code == 0 and hashed.startswith("argon2:"), out
    with TrackedContainer(docker, image, environment={"JUPYTER_PASSWORD_HASH": hashed}) as container:
        container.start(ports=(8888,))
        token = wait_for_jupyter(container)
        base = f"http://127.0.0.1:{container.ports[8888]}"
        browser = requests.Session()
        assert browser.get(f"{base}/api/kernels", timeout=20).status_code in (401, 403)
        browser.get(f"{base}/login", timeout=20)
        login = browser.post(
            f"{base}/login", data={"password": password, "_xsrf": browser.cookies["_xsrf"]}, allow_redirects=False, timeout=20
        )
        assert login.status_code == 302, login.text[:500]
        assert browser.get(f"{base}/api/kernels", timeout=20).status_code == 200
        # The token keeps working beside the password.
        assert Jupyter(container.ports[8888], token).get("/api/kernels").status_code == 200


def test_the_example_notebooks_are_in_a_new_workspace(lab):
    """A new (empty) workspace gets the example notebooks, where the Lab's file browser shows them."""
    _, jupyter = lab
    listing = jupyter.get("/api/contents/examples")
    assert listing.status_code == 200, listing.text[:300]
    shipped = sorted(p.name for p in (REPO_ROOT / "notebooks" / "base").glob("*.ipynb"))  # the flavors' are not in it
    assert sorted(item["name"] for item in listing.json()["content"]) == shipped


def test_a_workspace_that_holds_anything_gets_no_examples(docker, image):
    volume = docker.volumes.create(labels=TEST_LABELS)
    mount = {volume.name: {"bind": "/workspace", "mode": "rw"}}
    try:
        docker.containers.run(image, ["touch", "/workspace/mine"], volumes=mount, remove=True, labels=TEST_LABELS)
        with TrackedContainer(docker, image, volumes=mount) as container:
            container.start(ports=(8888,))
            wait_for_jupyter(container)
            code, out = container.exec(["ls", "-A", "/workspace"])
            assert code == 0 and out.split() == ["mine"]
            assert "cp -r /opt/proven-torch/notebooks /workspace/examples" in container.logs()
    finally:
        volume.remove(force=True)

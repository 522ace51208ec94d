"""JupyterLab's page renders in a real browser (headless Chromium on the host).

The DOM after the page's scripts ran must hold the Lab shell, not a login or
error page; the screenshot stays in the test's tmp folder as an artifact.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.image.conftest import CHROMIUM, HEADLESS_CHROMIUM, need_chromium
from tests.image.service_helpers import wait_for_jupyter
from tests.image.tracked_container import TrackedContainer, wait_until

pytestmark = pytest.mark.image


def chromium(profile, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    argv = [CHROMIUM, *HEADLESS_CHROMIUM, "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1280,800"]
    argv += ["--virtual-time-budget=15000", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


TOKEN = "browser-test-token-0123456789"


@pytest.fixture(scope="module")
def lab(docker, image):
    with TrackedContainer(docker, image, environment={"JUPYTER_TOKEN": TOKEN}) as container:
        container.start(ports=(8888,))
        wait_for_jupyter(container)
        yield container


@pytest.fixture(scope="module")
def lab_url(lab):
    return f"http://127.0.0.1:{lab.ports[8888]}/lab?token={TOKEN}"


@pytest.fixture(scope="module")
def dom(lab_url, tmp_path_factory):
    """The page's DOM after its scripts ran (Chromium's --dump-dom)."""
    need_chromium()
    result = chromium(tmp_path_factory.mktemp("chromium") / "profile", "--dump-dom", lab_url)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_the_lab_shell_renders(dom):
    assert "jp-LabShell" in dom, dom[:2000]


def test_the_launcher_offers_the_python_kernel(dom):
    assert "jp-LauncherCard" in dom and "Python 3" in dom, dom[:2000]


def test_not_a_login_page(dom):
    assert "Password or token" not in dom and 'action="/login' not in dom


def test_no_news_prompt(dom):
    # JupyterLab's settings in the image: no news feed, no update check (offline).
    assert "Would you like to get notified" not in dom


def test_a_screenshot_is_taken(lab_url, tmp_path):
    need_chromium()
    png = tmp_path / "jupyterlab.png"
    result = chromium(tmp_path / "profile", f"--screenshot={png}", lab_url)
    assert result.returncode == 0, result.stderr[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000, f"a near-empty screenshot: {png}"
    print(f"screenshot: {png}")


def test_the_launcher_offers_tensorboard(dom):
    assert 'jp-LauncherCard" title="TensorBoard' in dom, dom[:2000]


def test_tensorboard_opens_under_8888_and_shows_the_ppo_gates_scalars(lab, tmp_path):
    """TensorBoard as a browser sees it at /tensorboard/ (the token in the URL, as the Lab's
    launcher passes it), with the scalars a short PPO run wrote into /workspace."""
    need_chromium()
    command = ["python", "-m", "ppo_bench", "--device", "cpu", "--seed", "1", "--total-timesteps", "4096", "--num-envs", "8"]
    command += ["--num-steps", "64", "--threads", "1", "--no-progress", "--out-dir", "/workspace/runs/ppo-browser"]
    code, output = lab.exec(command, timeout=300)
    assert code in (0, 3), output[-2000:]  # 3: below target (a short run is); its scalars are written
    url = f"http://127.0.0.1:{lab.ports[8888]}/tensorboard/?token={TOKEN}#timeseries"
    result = chromium(tmp_path / "profile", "--virtual-time-budget=30000", "--dump-dom", url, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "TensorBoard" in result.stdout and "ppo-browser" in result.stdout, result.stdout[-3000:]
    assert "No dashboards are active" not in result.stdout


def test_a_notebook_draws_its_progress_bar_and_shows_a_mujoco_frame(lab, tmp_path):
    """The example notebook (copied into the new workspace by start.sh) run in the Lab by a browser:
    tqdm's bar is drawn as a widget and reaches 100%, and the MuJoCo frame shows as a matplotlib image.
    The screenshot stays in the test's tmp folder as an artifact."""
    need_chromium()
    import requests
    from playwright.sync_api import sync_playwright

    port = lab.ports[8888]
    url = f"http://127.0.0.1:{port}/lab/tree/examples/environments.ipynb?token={TOKEN}"

    def kernel_idle() -> bool:
        sessions = requests.get(f"http://127.0.0.1:{port}/api/sessions", params={"token": TOKEN}, timeout=10).json()
        return any(s["path"].endswith("environments.ipynb") and s["kernel"]["execution_state"] == "idle" for s in sessions)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1400})
            page.goto(url)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            wait_until(kernel_idle, 90, "the notebook's kernel")
            page.click(".jp-Notebook .jp-Cell >> nth=0")
            for _ in range(3):  # the markdown cell, then each code cell
                page.keyboard.press("Shift+Enter")
            bar = ".widget-hprogress .progress-bar"
            page.wait_for_selector(bar, timeout=120_000)
            page.wait_for_function(f"() => document.querySelector('{bar}').style.width === '100%'", timeout=180_000)
            page.wait_for_selector('.jp-RenderedImage[data-mime-type="image/png"] img', timeout=180_000)
            page.screenshot(path=str(tmp_path / "notebook.png"), full_page=True)
        finally:
            browser.close()
    assert (tmp_path / "notebook.png").stat().st_size > 20_000
    print(f"screenshot: {tmp_path / 'notebook.png'}")

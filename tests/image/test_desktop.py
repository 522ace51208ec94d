"""Watch your agent (docs/using-the-image.md): the desktop in the Lab, `ssh -X`, and
`render_mode="human"` that never aborts, in ONE container of the image, started under the
restricted profile (an arbitrary UID, a read-only root: as test_restricted_runtime.py) with
JupyterLab and sshd.

- No display: HalfCheetah-v5 (MuJoCo), CartPole-v1 (pygame), LunarLander-v3 (Box2D) and
  ALE/Pong-v5 raise NoDisplayError naming the fix, with DISPLAY unset and with a DISPLAY that no
  server answers; the process exits 0.
- The Desktop tile's page through the Lab's proxy URL with the token, in headless Chromium: the
  empty desktop, then each of the four opens a window on it (a new window of that process,
  found by its _NET_WM_PID with xdotool) and steps 50 times; with MuJoCo's viewer open the
  screenshot differs from the empty desktop's in the window's area. Without the token: a
  redirect to the login page or 403.
- `ssh -X` with a local Xvfb as the client's display: the window opens there.
- Every example notebook of the image runs clean with nbclient, each within its time budget,
  the MuJoCo one on the desktop.

The commands inside run with the environment of a kernel the Lab started (what a notebook sees).
"""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import requests
import websocket

from tests.image.conftest import EXEC_TMP, HEADLESS_CHROMIUM, RESTRICTED, need_chromium
from tests.image.service_helpers import Jupyter, make_keypair, ssh_argv, wait_for_jupyter, wait_for_sshd
from tests.image.tracked_container import TrackedContainer, wait_until

pytestmark = pytest.mark.image

REPO = Path(__file__).resolve().parents[2]
TOKEN = "desktop-test-token-0123456789"
FAMILIES = {"HalfCheetah-v5": "GLFW", "CartPole-v1": "pygame", "LunarLander-v3": "pygame", "ALE/Pong-v5": "ALE"}
# Seconds each example notebook may take here (2 cores, a CPU; measured 6 to 14 s alone).
NOTEBOOK_BUDGET_S = {"environments.ipynb": 90, "ppo-cartpole.ipynb": 150, "record-video.ipynb": 90, "watch-your-agent.ipynb": 120}

NO_DISPLAY = r"""
import json, os, sys
import ale_py, gymnasium as gym
from proven_torch_display import NoDisplayError

gym.register_envs(ale_py)
record = {}
for display in ("", ":7"):  # no DISPLAY; a DISPLAY no X server answers on
    os.environ.pop("DISPLAY", None)
    if display:
        os.environ["DISPLAY"] = display
    for env_id in sys.argv[1:]:
        try:
            env = gym.make(env_id, render_mode="human")
            env.reset(seed=0)
            env.step(env.action_space.sample())
            record[f"{display or 'unset'} {env_id}"] = "no exception"
        except NoDisplayError as err:
            record[f"{display or 'unset'} {env_id}"] = str(err)
print("RECORD " + json.dumps(record))
"""

# Opens env_id's human window, steps 50 times, writes MARKER, keeps the window drawn until
# MARKER.close appears (or HOLD seconds pass), closes it and writes MARKER.done.
WINDOW = r"""
import json, os, sys, time
from pathlib import Path
import ale_py, gymnasium as gym

gym.register_envs(ale_py)
env_id, marker, hold = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
kwargs = {"width": 480, "height": 360} if env_id.startswith("HalfCheetah") else {}
env = gym.make(env_id, render_mode="human", **kwargs)
env.reset(seed=0)
steps, start = 0, time.monotonic()
for _ in range(50):
    _, _, terminated, truncated, _ = env.step(env.action_space.sample())
    steps += 1
    if terminated or truncated:
        env.reset()
seconds = round(time.monotonic() - start, 2)
marker.write_text(json.dumps({"pid": os.getpid(), "steps": steps, "seconds": seconds, "display": os.environ.get("DISPLAY")}))
deadline = time.monotonic() + hold
while not marker.with_suffix(".close").exists() and time.monotonic() < deadline:
    env.render()  # keeps the window drawn (ALE draws in step; its render() is a no-op in human mode)
    time.sleep(0.1)
env.close()
marker.with_suffix(".done").write_text("closed")
"""

NOTEBOOKS = r"""
import json, shutil, sys, time
from pathlib import Path
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

folder = Path("/tmp/notebooks")
shutil.copytree("/opt/proven-torch/notebooks", folder)
record = {}
for path in sorted(folder.glob("*.ipynb")):
    nb = nbformat.read(path, as_version=4)
    start = time.monotonic()
    error = ""
    try:
        NotebookClient(nb, timeout=int(sys.argv[1]), kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()
    except CellExecutionError as err:
        error = str(err)[-2000:]
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    record[path.name] = {
        "seconds": round(time.monotonic() - start, 1),
        "error": error,
        "streams": "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream"),
        "html": "".join(o.get("data", {}).get("text/html", "") for o in outputs)[:200],
        "types": sorted({t for o in outputs for t in o.get("data", {})}),
    }
print("RECORD " + json.dumps(record))
"""


def record_of(output: str) -> dict:
    """The script's RECORD line. Its output is stdout and stderr as they came: a line of stderr that did not end
    (a warning's) may come before it on the same line."""
    line = next((line for line in output.splitlines() if "RECORD {" in line), None)
    assert line is not None, output[-3000:]
    return json.loads(line.partition("RECORD ")[2])


def error_lines(text: str) -> list[str]:
    """Lines that look like an error message of a default (libwayland's "error: XDG_RUNTIME_DIR...", ALSA's)."""
    return [line for line in text.splitlines() if line.lower().startswith("error:") or line.startswith("ALSA lib")]


# --- the container -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def desktop(docker, image, tmp_path_factory):
    directory = tmp_path_factory.mktemp("desktop-ssh")
    key, public = make_keypair(directory)
    environment = {"JUPYTER_TOKEN": TOKEN, "PUBLIC_KEY": public}
    with TrackedContainer(docker, image, environment=environment, tmpfs=EXEC_TMP, **RESTRICTED) as container:
        container.start(ports=(8888, 2222))
        wait_for_jupyter(container)
        wait_for_sshd(container)
        lab = Jupyter(container.ports[8888], TOKEN)
        kernel_env = json.loads(lab.run_in_new_kernel("import json, os; print(json.dumps(dict(os.environ)))")["stdout"])
        yield {"container": container, "lab": lab, "env": kernel_env, "key": key, "known_hosts": directory / "known_hosts"}


def run_python(desktop, script: str, *args: str, timeout: int = 120, **env: str) -> tuple[int, str]:
    """`python -c script args` inside, as a kernel of the Lab would run it (its environment, plus `env`)."""
    return desktop["container"].exec(["python", "-c", script, *args], timeout=timeout, environment={**desktop["env"], **env})


def test_the_lab_gives_its_kernels_the_desktops_display(desktop):
    assert desktop["env"]["DISPLAY"] == ":1"
    assert desktop["env"]["XAUTHORITY"] == "/tmp/proven-torch/desktop/Xauthority"


def test_the_lab_gives_its_terminals_the_desktops_display(desktop):
    lab = desktop["lab"]
    name = lab.request("POST", "/api/terminals").json()["name"]
    url = lab.base.replace("http://", "ws://") + f"/terminals/websocket/{name}"
    ws = websocket.create_connection(url, header=[f"Authorization: token {TOKEN}"], timeout=30)
    try:
        ws.send(json.dumps(["stdin", 'echo "display=[$DISPLAY]"\r']))
        seen = ""
        deadline = time.monotonic() + 30
        while "display=[:1]" not in seen and time.monotonic() < deadline:
            message = json.loads(ws.recv())
            if message[0] == "stdout":
                seen += message[1]
        assert "display=[:1]" in seen, seen[-500:]
    finally:
        ws.close()
        lab.request("DELETE", f"/api/terminals/{name}")


def test_it_runs_as_an_arbitrary_uid_on_a_read_only_root(desktop):
    code, out = desktop["container"].exec(["sh", "-c", "id -u; touch /opt/x 2>/dev/null && echo writable || echo read-only"])
    assert code == 0 and out.split() == ["4321", "read-only"]


# --- no display: an exception, never an abort ---------------------------------------------


@pytest.fixture(scope="module")
def no_display(desktop):
    code, out = run_python(desktop, NO_DISPLAY, *FAMILIES, timeout=180)
    return code, out, record_of(out)


def test_without_a_display_the_process_catches_it_and_exits_0(no_display):
    code, out, _ = no_display
    assert code == 0, out[-3000:]


@pytest.mark.parametrize("display", ["unset", ":7"])
@pytest.mark.parametrize("env_id", list(FAMILIES))
def test_without_a_display_human_mode_raises_the_documented_exception(no_display, env_id, display):
    _, _, record = no_display
    text = record[f"{display} {env_id}"]
    assert text.startswith(FAMILIES[env_id]) and 'needs a display to open a window (render_mode="human")' in text, text
    assert "Desktop tile" in text and "ssh -X" in text and 'render_mode="rgb_array"' in text
    assert ("DISPLAY is not set" if display == "unset" else "DISPLAY=:7, but no X server answers there") in text


def test_without_a_display_no_error_lines_are_printed(no_display):
    _, out, _ = no_display
    assert error_lines(out) == []


# --- the desktop, through the Lab's proxy URL ------------------------------------------------


@pytest.mark.parametrize("token", [None, "wrong"], ids=["no token", "a wrong token"])
def test_the_desktop_wants_the_token(desktop, token):
    base = desktop["lab"].base
    query = f"?token={token}" if token else ""
    page = requests.get(f"{base}/desktop/{query}", allow_redirects=False, timeout=20)
    assert page.status_code == 403 or (page.status_code == 302 and "/login" in page.headers["Location"]), page.status_code
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        websocket.create_connection(f"{base.replace('http', 'ws')}/desktop-websockify/{query}", timeout=20)
    assert refused.value.status_code in (302, 403)


def x(desktop, *argv: str) -> str:
    code, out = desktop["container"].exec(list(argv), timeout=30, environment=desktop["env"])
    assert code == 0, out
    return out


def window_ids(desktop) -> set[str]:
    """Every window on the desktop now (the window manager's frames and what they hold)."""
    return set(re.findall(r"^\s+(0x[0-9a-f]+)", x(desktop, "xwininfo", "-root", "-tree"), re.M))


def geometry(desktop, window: str) -> dict:
    info = x(desktop, "xwininfo", "-id", window)
    field = {
        k: int(re.search(rf"{k}:\s+(-?\d+)", info).group(1))
        for k in ("Absolute upper-left X", "Absolute upper-left Y", "Width", "Height")
    }
    return {"x": field["Absolute upper-left X"], "y": field["Absolute upper-left Y"], "w": field["Width"], "h": field["Height"],
            "viewable": "IsViewable" in info}  # fmt: skip


def changed_share(before: bytes, after: bytes, box: tuple[int, int, int, int]) -> float:
    """The share of pixels in `box` (left, top, right, bottom) that differ between two screenshots."""
    from PIL import Image, ImageChops  # pillow: matplotlib's, in the host venv (scripts/host-venv.sh)

    a, b = (Image.open(io.BytesIO(png)).convert("RGB").crop(box) for png in (before, after))
    diff = ImageChops.difference(a, b).convert("L").point(lambda v: 255 if v > 24 else 0)
    return diff.histogram()[255] / (a.width * a.height)


@pytest.fixture(scope="module")
def watched(desktop, tmp_path_factory):
    """The Desktop tile's page open in headless Chromium; each of the four opens its window there in turn."""
    chromium = need_chromium()
    from playwright.sync_api import sync_playwright

    out = tmp_path_factory.mktemp("desktop")
    record: dict = {"windows": {}}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium, args=[a for a in HEADLESS_CHROMIUM if a != "--headless"] + ["--disable-dev-shm-usage"]
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            start = time.monotonic()
            page.goto(f"{desktop['lab'].base}/desktop/?token={TOKEN}")
            page.wait_for_selector("#screen canvas", timeout=60_000)
            page.wait_for_function("document.getElementById('status').textContent.includes('Connected')", timeout=60_000)
            record["first_open_s"] = round(time.monotonic() - start, 1)
            record["empty"] = wait_until(lambda: settled(page), 30, "the empty desktop's first frame", interval=0.1)
            (out / "empty-desktop.png").write_bytes(record["empty"])
            record["canvas"] = page.evaluate(
                "(() => { const r = document.querySelector('#screen canvas').getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; })()"
            )
            record["screen"] = [int(v) for v in re.search(r"dimensions:\s+(\d+)x(\d+)", x(desktop, "xdpyinfo")).groups()]
            record["tcp"] = x(desktop, "ss", "-ltnH")
            record["unix"] = x(desktop, "ss", "-lxH")
            for env_id in FAMILIES:
                record["windows"][env_id] = open_window(desktop, env_id, page, record, out)
        finally:
            browser.close()
    print(f"screenshots: {out}")
    return record


def settled(page) -> bytes | None:
    """The page's screenshot once it holds still (alike 1 s after the one before): the first frame is drawn."""
    first = page.screenshot()
    time.sleep(1)
    second = page.screenshot()
    return second if second == first else None


def read_marker(container, marker: str, seconds: float, what: str) -> dict:
    """The JSON the WINDOW script writes to `marker` once its window has stepped 50 times."""
    return json.loads(
        wait_until(
            lambda: container.exec(["cat", marker])[1] if container.exec(["test", "-f", marker])[0] == 0 else "", seconds, what
        )
    )


def open_window(desktop, env_id: str, page, record: dict, out: Path) -> dict:
    marker = f"/tmp/window-{env_id.replace('/', '-')}.json"
    before = window_ids(desktop)
    log = marker.replace(".json", ".log")
    desktop["container"].exec_background(
        ["sh", "-c", f'exec python -c "$0" "$@" >{log} 2>&1', WINDOW, env_id, marker, "60"],
        timeout=150,
        environment=desktop["env"],
    )
    try:
        opened = read_marker(desktop["container"], marker, 120, f"{env_id}'s window")
        windows = x(desktop, "xdotool", "search", "--onlyvisible", "--pid", str(opened["pid"])).split()
        result = {
            **opened,
            "windows": [geometry(desktop, w) for w in windows],
            "new": bool(windows) and not (set(windows) & before),
        }
        if FAMILIES[env_id] == "GLFW":
            result["screenshot_share"] = screenshot_with(page, record, result["windows"][0], out)
    finally:
        desktop["container"].exec(["touch", marker.replace(".json", ".close")])
    wait_until(
        lambda: desktop["container"].exec(["test", "-f", marker.replace(".json", ".done")])[0] == 0, 60, f"{env_id} to close"
    )
    result["log"] = desktop["container"].exec(["cat", log])[1]
    return result


def screenshot_with(page, record: dict, window: dict, out: Path) -> dict:
    """The desktop's screenshot with the window open: the share of changed pixels in its area and far from it."""
    left, top, width, _ = record["canvas"]
    scale = width / record["screen"][0]
    box = tuple(round(v) for v in (left + window["x"] * scale, top + window["y"] * scale,
                                   left + (window["x"] + window["w"]) * scale, top + (window["y"] + window["h"]) * scale))  # fmt: skip
    far = (
        round(left + width) - 200,
        round(top + record["canvas"][3]) - 150,
        round(left + width),
        round(top + record["canvas"][3]),
    )

    def differs():
        shot = page.screenshot()
        share = changed_share(record["empty"], shot, box)
        return (shot, share) if share > 0.3 else None

    try:
        shot, inside = wait_until(differs, 30, "the window in the browser's screenshot", interval=1)
    except TimeoutError:
        shot = page.screenshot()
        inside = changed_share(record["empty"], shot, box)
    (out / "mujoco-viewer-on-the-desktop.png").write_bytes(shot)
    return {"inside": inside, "far": changed_share(record["empty"], shot, far), "box": box}


def test_the_desktop_opens_through_the_lab_within_its_timeout(watched):
    assert watched["first_open_s"] < 60
    assert watched["screen"][0] > 0 and watched["canvas"][2] > 0


def test_the_desktops_terminals_start_in_the_workspace(desktop, watched):
    """Its menu's xterm inherits the window manager's folder: /workspace, as every other way in."""
    cwd = x(desktop, "sh", "-c", "readlink /proc/$(pgrep -x blackbox | head -1)/cwd").strip()
    assert cwd == "/workspace", cwd


HUMAN_RENDERING = r"""
import sys
import gymnasium as gym
from gymnasium.wrappers import HumanRendering
from gymnasium.wrappers.vector import HumanRendering as VectorHumanRendering
env_id, vector = sys.argv[1], sys.argv[2] == "vector"
if vector:
    env = VectorHumanRendering(gym.make_vec(env_id, num_envs=2, render_mode="rgb_array"))
else:
    env = HumanRendering(gym.make(env_id, render_mode="rgb_array"))
env.reset(seed=0)
for _ in range(10):
    env.step(env.action_space.sample())
env.close()
print("DREW", env_id, sys.argv[2])
"""


@pytest.mark.parametrize("vector", ["single", "vector"])
@pytest.mark.parametrize("env_id", ["CartPole-v1", "LunarLander-v3", "HalfCheetah-v5", "Ant-v5", "Ant-v4"])
def test_human_rendering_over_rgb_array_frames_draws_on_the_desktop_under_the_restricted_profile(
    desktop, watched, env_id, vector
):
    """gymnasium's HumanRendering wrapper, single and vector, over EGL frames (MuJoCo) or pygame's: it used to end
    the process with X_GLXMakeCurrent BadAccess on a display; here the container runs under the restricted profile."""
    code, out = run_python(desktop, HUMAN_RENDERING, env_id, vector, timeout=180)
    assert code == 0 and f"DREW {env_id} {vector}" in out, out[-2000:]
    assert "BadAccess" not in out and "X Error" not in out, out[-2000:]


def test_nothing_listens_beyond_the_labs_port_and_sshd(watched):
    ports = {int(line.split()[3].rsplit(":", 1)[1]) for line in watched["tcp"].splitlines() if line.strip()}
    assert ports == {8888, 2222}, watched["tcp"]
    assert "@/tmp/.X11-unix" not in watched["unix"]  # no abstract socket (it would reach the host with --network host)


@pytest.mark.parametrize("env_id", list(FAMILIES))
def test_human_mode_opens_a_new_window_of_its_process_on_the_desktop(watched, env_id):
    found = watched["windows"][env_id]
    assert found["steps"] == 50 and found["display"] == ":1"
    assert found["new"] and found["windows"] and all(w["viewable"] and w["w"] > 50 and w["h"] > 50 for w in found["windows"]), (
        found
    )


@pytest.mark.parametrize("env_id", list(FAMILIES))
def test_human_mode_on_the_desktop_prints_no_error_lines(watched, env_id):
    assert error_lines(watched["windows"][env_id]["log"]) == [], watched["windows"][env_id]["log"][-2000:]


def test_the_screenshot_differs_from_the_empty_desktop_in_the_viewers_area(watched):
    shares = watched["windows"]["HalfCheetah-v5"]["screenshot_share"]
    assert shares["inside"] > 0.3 and shares["far"] < 0.02, shares


# --- rgb_array stays on EGL; a MUJOCO_GL of the user's own is honoured ---------------------------

FRAMES = r"""
import json, os, time
import gymnasium as gym
from proven_torch_display import NoDisplayError

env = gym.make("HalfCheetah-v5", render_mode="rgb_array")
env.reset(seed=0)
try:
    frame = env.render()
    start = time.perf_counter()
    for _ in range(10):
        frame = env.render()
    context = type(env.unwrapped.mujoco_renderer.viewer.opengl_context)
    outcome = {"context": f"{context.__module__}.{context.__name__}", "shape": list(frame.shape),
               "render_ms": round((time.perf_counter() - start) * 100, 1)}
except NoDisplayError as err:
    outcome = {"error": str(err)}
print("RECORD " + json.dumps({**outcome, "MUJOCO_GL": os.environ.get("MUJOCO_GL")}))
"""


@pytest.fixture(scope="module")
def frames(desktop, watched):
    """rgb_array frames with the desktop open: the image's MUJOCO_GL, then the user's own (glfw), then
    the user's own with no display."""
    runs = {
        "image's": {},
        "user's glfw": {"MUJOCO_GL": "glfw"},
        "user's glfw, no display": {"MUJOCO_GL": "glfw", "DISPLAY": ":7"},
    }
    found = {}
    for name, env in runs.items():
        code, out = run_python(desktop, FRAMES, timeout=120, **env)
        assert code == 0, out[-3000:]
        found[name] = {**record_of(out), "output": out}
    return found


def test_rgb_array_frames_stay_on_egl_with_a_display(frames):
    assert frames["image's"]["MUJOCO_GL"] == "egl"
    assert frames["image's"]["context"] == "mujoco.egl.GLContext" and frames["image's"]["shape"] == [480, 480, 3]


def test_a_mujoco_gl_of_the_users_own_is_honoured(frames):
    assert frames["user's glfw"]["context"] == "mujoco.glfw.GLContext"  # GLFW, on the desktop's GLX
    assert frames["user's glfw"]["shape"] == [480, 480, 3]


def test_a_mujoco_gl_of_the_users_own_without_a_display_says_so(frames):
    text = frames["user's glfw, no display"]["error"]
    assert "MUJOCO_GL=glfw is your own setting (the image's is egl)" in text
    assert "Exception ignored" not in frames["user's glfw, no display"]["output"]  # the half-built context's __del__


# --- ssh -X ----------------------------------------------------------------------------------


@pytest.fixture
def client_display(tmp_path):
    """Xvfb on this host: the display of the SSH client, behind a cookie of its own."""
    if shutil.which("Xvfb") is None:
        pytest.fail("Xvfb is not installed on this host (scripts/prepare-host.sh --test-tools installs xvfb)")
    number = next(
        n for n in range(90, 400) if not Path(f"/tmp/.X11-unix/X{n}").exists() and not Path(f"/tmp/.X{n}-lock").exists()
    )
    cookie = tmp_path / "Xauthority"
    subprocess.run(
        ["xauth", "-f", str(cookie), "add", f":{number}", ".", secrets.token_hex(16)], check=True, capture_output=True, timeout=30
    )
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "DISPLAY": f":{number}", "XAUTHORITY": str(cookie)}
    server = subprocess.Popen(["Xvfb", f":{number}", "-auth", str(cookie), "-screen", "0", "1024x768x24", "-nolisten", "tcp"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_until(lambda: subprocess.run(["xdpyinfo"], env=env, capture_output=True, timeout=10).returncode == 0, 30, "Xvfb")
        yield env
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_ssh_x_opens_the_window_on_the_clients_display(desktop, client_display):
    container, marker = desktop["container"], "/tmp/sshx.json"
    argv = ssh_argv(
        container.ports[2222],
        desktop["key"],
        desktop["known_hosts"],
        [f"python -c {shlex.quote(WINDOW)} CartPole-v1 {marker} 60"],
        options=("ForwardX11=yes",),
    )
    client = subprocess.Popen(
        argv, env=client_display, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    try:
        opened = read_marker(container, marker, 120, "the window over ssh -X")
        tree = subprocess.run(
            ["xwininfo", "-root", "-tree"], env=client_display, capture_output=True, text=True, timeout=30
        ).stdout
        pids = set()
        for window in re.findall(r"^\s+(0x[0-9a-f]+) \"", tree, re.M):
            prop = subprocess.run(
                ["xprop", "-id", window, "_NET_WM_PID"], env=client_display, capture_output=True, text=True, timeout=30
            ).stdout
            pids.update(int(p) for p in re.findall(r"= (\d+)", prop))
    finally:
        container.exec(["touch", marker.replace(".json", ".close")])
        stdout, stderr = client.communicate(timeout=90)
    assert client.returncode == 0, stderr[-2000:]
    assert re.fullmatch(r"localhost:1\d\.0", opened["display"]), opened  # sshd's forwarded display
    assert opened["pid"] in pids, tree  # the window on the client's Xvfb belongs to the process in the container
    assert error_lines(stderr) == [] and "Xauthority" not in stderr, stderr[-2000:]


# --- the example notebooks -------------------------------------------------------------------


def shipped() -> list[str]:
    return sorted(p.name for p in (REPO / "notebooks" / "base").glob("*.ipynb"))


@pytest.fixture(scope="module")
def notebooks(desktop, watched):
    """Every notebook of the image run with nbclient inside, as the Lab's kernels run (the desktop open)."""
    code, out = run_python(desktop, NOTEBOOKS, str(max(NOTEBOOK_BUDGET_S.values())), timeout=sum(NOTEBOOK_BUDGET_S.values()) + 60)
    assert code == 0, out[-3000:]
    return record_of(out)


def test_the_image_ships_the_base_notebooks_only(notebooks):
    assert sorted(notebooks) == shipped() and "rlhf-grpo.ipynb" not in notebooks


@pytest.mark.parametrize("name", shipped())
def test_every_notebook_runs_clean_within_its_budget(notebooks, name):
    run = notebooks[name]
    assert run["error"] == "", run["error"]
    assert run["seconds"] < NOTEBOOK_BUDGET_S[name], run["seconds"]
    assert error_lines(run["streams"]) == [], run["streams"][-2000:]


def test_the_video_notebook_shows_the_mp4_inline(notebooks):
    assert "text/html" in notebooks["record-video.ipynb"]["types"]
    assert "data:video/mp4;base64," in notebooks["record-video.ipynb"]["html"]


def test_the_watch_notebook_opens_mujocos_viewer_on_the_desktop(notebooks):
    assert "100 steps shown in MuJoCo's viewer on DISPLAY :1" in notebooks["watch-your-agent.ipynb"]["streams"]

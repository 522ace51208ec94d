"""container/proven_torch_display.py with the real libraries on this host (no Docker): gymnasium's
HumanRendering wrapper, single and vector, over rgb_array envs that MuJoCo renders through EGL, with a
real X server (Xvfb) and without one. Each case runs in a child Python after the .pth's line, as the
image runs it. The host venv has gymnasium, MuJoCo, pygame-ce and OpenCV at the image's versions
(scripts/host-venv.sh); Xvfb is scripts/prepare-host.sh's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.unit, pytest.mark.process]

CONTAINER = Path(__file__).resolve().parents[2] / "container"

# What the image sets (images/Dockerfile.template): frames through EGL, the mark of the image's value.
IMAGE_ENV = {"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl", "PROVEN_TORCH_MUJOCO_GL": "egl", "SDL_AUDIODRIVER": "dummy"}
# Variables of this host that would change what SDL or the hook decides.
DROPPED = ("DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER", "SDL_FRAMEBUFFER_ACCELERATION", "PROVEN_TORCH_DISPLAY_CHECK")

WATCH = """
    import sys, warnings
    warnings.simplefilter("ignore")
    import gymnasium as gym
    from gymnasium.wrappers import HumanRendering
    from gymnasium.wrappers.vector import HumanRendering as VectorHumanRendering

    env_id, form = sys.argv[1], sys.argv[2]
    if form == "vector":
        env = VectorHumanRendering(gym.make_vec(env_id, num_envs=2, vectorization_mode="sync", render_mode="rgb_array"))
    else:
        env = HumanRendering(gym.make(env_id, render_mode="rgb_array"))
    try:
        env.reset(seed=0)
        for _ in range(3):
            env.step(env.action_space.sample())
    except Exception as err:
        print("raised", type(err).__name__)
    else:
        print("shown")
    env.close()
"""


def child(cwd: Path, code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """`code` in a new Python after the .pth's line, in folder `cwd` (MuJoCo may write its log there), in the
    image's environment plus `env`."""
    pth = (CONTAINER / "proven_torch_display.pth").read_text().strip()
    script = f"import sys\nsys.path.insert(0, {str(CONTAINER)!r})\n{pth}\n{textwrap.dedent(code)}"
    base = {k: v for k, v in os.environ.items() if k not in DROPPED}
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**base, **IMAGE_ENV, **env},
    )


@pytest.fixture(scope="module")
def display() -> Iterator[str]:
    """A real X server (Xvfb, with GLX as Mesa gives it), its DISPLAY; stopped after the module."""
    for module in ("gymnasium", "mujoco", "pygame", "cv2"):
        if subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode:
            pytest.fail(f"{sys.executable} has no {module}: run scripts/host-venv.sh")
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        pytest.fail("no Xvfb on this host: run scripts/prepare-host.sh --test-tools")
    read, write = os.pipe()
    server = subprocess.Popen(
        [xvfb, "-displayfd", str(write), "-nolisten", "tcp", "-screen", "0", "1280x1024x24"],
        pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    os.close(write)
    try:
        with os.fdopen(read) as numbers:  # Xvfb writes its display number once it accepts connections
            number = numbers.readline().strip()
        if not number.isdigit():
            pytest.fail(f"Xvfb exited with {server.wait(5)} before it named a display")
        yield f":{number}"
    finally:
        server.terminate()
        server.wait(10)


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Ant-v4", "Ant-v5", "CartPole-v1"])
@pytest.mark.parametrize("form", ["single", "vector"])
def test_human_rendering_shows_a_window_beside_egl(display, env_id, form, tmp_path):
    done = child(tmp_path, WATCH, env_id, form, DISPLAY=display)
    assert (done.returncode, done.stdout.split()) == (0, ["shown"]), done.stderr[-2000:]


@pytest.mark.parametrize("form", ["single", "vector"])
def test_without_a_display_human_rendering_raises(form, tmp_path):
    done = child(tmp_path, WATCH, "HalfCheetah-v5", form)
    assert (done.returncode, done.stdout.split()) == (0, ["raised", "NoDisplayError"]), done.stderr[-2000:]


def test_a_window_opened_before_mujocos_first_frame_works_too(display, tmp_path):
    done = child(tmp_path, """
        import warnings
        warnings.simplefilter("ignore")
        import gymnasium as gym, pygame
        window = pygame.display.set_mode((480, 480))
        env = gym.make("HalfCheetah-v5", render_mode="rgb_array")
        env.reset(seed=0)
        window.blit(pygame.surfarray.make_surface(env.render().swapaxes(0, 1)), (0, 0))
        pygame.display.flip()
        print(type(env.unwrapped.mujoco_renderer._get_viewer("rgb_array").opengl_context).__module__)
    """, DISPLAY=display)  # fmt: skip
    assert (done.returncode, done.stdout.split()[-1:]) == (0, ["mujoco.egl"]), done.stderr[-2000:]


def test_upstream_aborts_there_which_is_why_the_hook_sets_the_hint(display, tmp_path):
    """The control: with the hook off, SDL's hidden OpenGL window takes GLX beside EGL and X ends the process."""
    done = child(tmp_path, WATCH, "HalfCheetah-v5", "single", DISPLAY=display, PROVEN_TORCH_DISPLAY_CHECK="off")
    assert done.returncode != 0 and "X_GLXMakeCurrent" in done.stderr, (done.returncode, done.stderr[-2000:])


REFUSED = """
    import gc, sys
    import gymnasium as gym
    from proven_torch_display import NoDisplayError

    env = gym.make("HalfCheetah-v5", render_mode=sys.argv[1])
    try:
        env.reset(seed=0)
        env.render()
    except NoDisplayError:
        print("raised")
    gc.collect()  # the viewer whose window never opened goes now, not at the process's end
    print("collected")
"""


@pytest.mark.parametrize(
    ("render_mode", "mujoco_gl"), [("human", "egl"), ("human", "glfw"), ("rgb_array", "glfw")]
)  # fmt: skip
def test_without_a_display_the_message_is_all_a_user_sees(render_mode, mujoco_gl, tmp_path):
    """Upstream's half-built viewer and GLFW context printed "Exception ignored ... AttributeError" twice when
    they were collected, under the NoDisplayError's message (in the Lab: in the cell's output)."""
    done = child(tmp_path, REFUSED, render_mode, MUJOCO_GL=mujoco_gl)
    assert (done.returncode, done.stdout.split(), done.stderr) == (0, ["raised", "collected"], "")

"""container/proven_torch_display.py on this host (no Docker): what counts as a display, the
message, and the import hook on stand-ins for glfw, pygame and ale_py (the real libraries are
tested in the image: tests/image/test_desktop.py). The hook runs in a child Python each time,
as the image's .pth runs it at the start of every process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from common.procs import free_port

pytestmark = pytest.mark.unit

CONTAINER = Path(__file__).resolve().parents[2] / "container"
sys.path.insert(0, str(CONTAINER))
import proven_torch_display as guard  # noqa: E402

sys.path.remove(str(CONTAINER))


@pytest.mark.parametrize(
    ("value", "parsed"),
    [(":1", ("", 1)), (":0.0", ("", 0)), ("localhost:10.0", ("localhost", 10)), ("unix:2", ("unix", 2)),
     ("host/unix:3", ("unix", 3)), ("", None), ("nocolon", None), (":x", None)],
)  # fmt: skip
def test_parse_display(value, parsed):
    assert guard.parse_display(value) == parsed


def test_no_display_variable_is_none():
    assert guard.display_problem({}) == "DISPLAY is not set"


def test_a_display_with_no_server_behind_it_is_none(tmp_path):
    problem = guard.display_problem({"DISPLAY": ":7"}, socket_dir=str(tmp_path))
    assert problem is not None and problem.startswith("DISPLAY=:7, but no X server answers there")


def test_a_listening_x_socket_is_a_display(tmp_path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(tmp_path / "X5"))
        server.listen(1)
        assert guard.display_problem({"DISPLAY": ":5"}, socket_dir=str(tmp_path)) is None


def test_a_tcp_display_answers_on_6000_plus_its_number():
    port = free_port()
    if port <= 6000:
        pytest.skip(f"free port {port} is below 6000")
    display = f"127.0.0.1:{port - 6000}.0"
    assert "no X server answers" in guard.x11_problem(display)
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
        server.listen(1)
        assert guard.x11_problem(display) is None


def test_a_wayland_socket_counts(tmp_path):
    (tmp_path / "wayland-0").touch()
    assert guard.display_problem({"WAYLAND_DISPLAY": "wayland-0", "XDG_RUNTIME_DIR": str(tmp_path)}) is None


def test_the_message_names_the_three_ways_and_the_switch():
    text = guard.message("pygame", "DISPLAY is not set", {})
    assert "Desktop tile" in text and "ssh -X" in text and 'render_mode="rgb_array"' in text
    assert "PROVEN_TORCH_DISPLAY_CHECK=off" in text and "docs/using-the-image.md#watch-your-agent" in text


@pytest.mark.parametrize(
    ("environ", "hint"),
    [({"MUJOCO_GL": "egl", "PROVEN_TORCH_MUJOCO_GL": "egl"}, False),  # the image's own
     ({"MUJOCO_GL": "glfw", "PROVEN_TORCH_MUJOCO_GL": "egl"}, True),  # the user's: GLFW for frames too
     ({"MUJOCO_GL": "osmesa", "PROVEN_TORCH_MUJOCO_GL": "egl"}, False)],  # needs no display
)  # fmt: skip
def test_a_mujoco_gl_of_the_users_own_is_told_from_the_images(environ, hint):
    assert ("is your own setting" in guard.message("GLFW (MuJoCo's viewer)", "DISPLAY is not set", environ)) is hint
    assert "is your own setting" not in guard.message("pygame", "DISPLAY is not set", environ)


@pytest.mark.parametrize("value", ["off", "0", "no", "false", "OFF"])
def test_the_switch_turns_it_off(value):
    assert guard.enabled({"PROVEN_TORCH_DISPLAY_CHECK": value}) is False


@pytest.mark.parametrize(
    ("environ", "flags", "hints"),
    [({"MUJOCO_GL": "egl", "DISPLAY": ":1"}, 0, {"SDL_FRAMEBUFFER_ACCELERATION": "0"}),
     ({"PYOPENGL_PLATFORM": "egl", "DISPLAY": "unix:0.0"}, 0, {"SDL_FRAMEBUFFER_ACCELERATION": "0"}),
     ({"MUJOCO_GL": "egl", "DISPLAY": "localhost:10.0"}, 0, {}),  # ssh -X: MIT-SHM cannot attach there
     ({"MUJOCO_GL": "egl", "DISPLAY": ":1"}, guard.PYGAME_OPENGL, {}),  # an OpenGL window is the user's own
     ({"MUJOCO_GL": "egl", "DISPLAY": ":1", "SDL_FRAMEBUFFER_ACCELERATION": "1"}, 0, {}),  # the user's value stays
     ({"MUJOCO_GL": "glfw", "DISPLAY": ":1"}, 0, {}),  # no EGL here: SDL as upstream
     ({}, 0, {})],
)  # fmt: skip
def test_a_plain_window_beside_egl_is_drawn_without_opengl(environ, flags, hints):
    assert guard.sdl_hints(environ, flags) == hints


# --- the hook, on stand-ins, in a child Python --------------------------------------------

STANDINS = {
    "glfw/__init__.py": """
        calls = []
        def init():
            calls.append("init")
            return True
        def create_window(*args):
            calls.append("create_window")
            return None  # what GLFW gives when the display refuses a window
        def get_error():
            return (65543, "GLX: No GLXFBConfigs returned")
    """,
    "pygame/__init__.py": "import pygame.display\nfrom pygame.base import error\n",
    "pygame/base.py": "class error(RuntimeError):\n    pass\n",
    "pygame/display.py": "def set_mode(size=(0, 0)):\n    return 'a surface'\n",
    "ale_py/__init__.py": "from ale_py._ale_py import ALEInterface\n",
    "ale_py/_ale_py.py": "class ALEInterface:\n    def setBool(self, key, value):\n        return (key, value)\n",
}


@pytest.fixture
def standins(tmp_path):
    for rel, text in STANDINS.items():
        path = tmp_path / "site" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path / "site"


def child(standins: Path, code: str, **env: str) -> subprocess.CompletedProcess:
    """`code` in a new Python after the .pth's line, with the stand-ins importable."""
    pth = (CONTAINER / "proven_torch_display.pth").read_text().strip()
    script = f"import sys\nsys.path[:0] = [{str(CONTAINER)!r}, {str(standins)!r}]\n{pth}\n{textwrap.dedent(code)}"
    base = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER")}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env={**base, **env})


def test_the_pth_line_imports_and_installs():
    assert (CONTAINER / "proven_torch_display.pth").read_text() == (
        "import proven_torch_display; proven_torch_display.install()\n"
    )


def test_glfw_init_without_a_display_raises_before_glfw_runs(standins):
    done = child(standins, """
        import glfw
        try:
            glfw.init()
        except Exception as err:
            print(type(err).__name__, glfw.calls, "Desktop tile" in str(err))
    """)  # fmt: skip
    assert done.stdout.split() == ["NoDisplayError", "[]", "True"], done.stderr


def test_a_window_glfw_could_not_open_raises_with_glfws_reason(standins, tmp_path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:  # an X server's socket, so init passes
        server.bind("\0" + f"/tmp/.X11-unix/X{os.getpid() % 50000 + 10000}")
        server.listen(1)
        done = child(standins, """
            import glfw
            glfw.init()
            try:
                glfw.create_window(640, 480, "mujoco", None, None)
            except Exception as err:
                print(type(err).__name__, "No GLXFBConfigs" in str(err), "ssh -X" in str(err))
        """, DISPLAY=f":{os.getpid() % 50000 + 10000}")  # fmt: skip
    assert done.stdout.split() == ["NoDisplayError", "True", "True"], done.stderr


def test_pygame_set_mode_raises_a_pygame_error_too(standins):
    done = child(standins, """
        import pygame
        try:
            pygame.display.set_mode((600, 400))
        except pygame.error as err:
            print(type(err).__name__, isinstance(err, RuntimeError))
    """)  # fmt: skip
    assert done.stdout.split() == ["NoDisplayError", "True"], done.stderr


def test_an_explicit_sdl_video_driver_is_the_users_choice(standins):
    done = child(standins, "import pygame\nprint(pygame.display.set_mode())\n", SDL_VIDEODRIVER="dummy")
    assert done.stdout.strip() == "a surface", done.stderr


def test_ale_display_screen_raises_other_settings_pass(standins):
    done = child(standins, """
        from ale_py import ALEInterface
        ale = ALEInterface()
        print(ale.setBool("sound_obs", True))
        try:
            ale.setBool("display_screen", True)
        except RuntimeError as err:
            print(type(err).__name__)
    """)  # fmt: skip
    assert done.stdout.split() == ["('sound_obs',", "True)", "NoDisplayError"], done.stderr


def test_the_switch_leaves_every_library_as_upstream(standins):
    done = child(
        standins, "import glfw, pygame\nprint(glfw.init(), pygame.display.set_mode())\n", PROVEN_TORCH_DISPLAY_CHECK="off"
    )
    assert done.stdout.split() == ["True", "a", "surface"], done.stderr


def test_other_imports_are_untouched_and_install_is_idempotent(standins):
    done = child(standins, """
        import json, proven_torch_display as g
        g.install(); g.install()
        print(sum(type(f).__name__ == "_Finder" for f in sys.meta_path), json.__loader__.__class__.__name__)
    """)  # fmt: skip
    assert done.stdout.split() == ["1", "SourceFileLoader"], done.stderr


def test_in_the_lab_the_message_reads_first_with_the_line_that_asked_for_the_window():
    """IPython shows an exception's _render_traceback_ instead of its frames: the hint first, then the user's line."""

    def users_cell():
        raise guard.NoDisplayError(guard.message("pygame", "DISPLAY is not set", {}))

    try:
        users_cell()
    except guard.NoDisplayError as err:
        lines = err._render_traceback_()
    assert lines[0].startswith('NoDisplayError: pygame needs a display to open a window (render_mode="human")')
    assert "a Linux desktop of your own" in lines[0] and "ssh -X" in lines[0]
    assert len(lines) == 2 and "users_cell" not in lines[1] and "raise guard.NoDisplayError" in lines[1]


MUJOCO_PROBE = """
import sys, warnings
sys.path.insert(0, sys.argv[1])
import proven_torch_display
proven_torch_display.install()
import gymnasium as gym
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    gym.make("HalfCheetah-v5").reset(seed=0)
print("WARNINGS", len(caught))
"""


@pytest.mark.process
def test_mujocos_known_asset_warning_leaves_no_line_and_no_mujoco_log_in_the_folder(tmp_path):
    """HalfCheetah printed a red settotalmass warning and wrote MUJOCO_LOG.TXT into the notebook's folder."""
    if subprocess.run([sys.executable, "-c", "import mujoco"], capture_output=True, timeout=60).returncode != 0:
        pytest.fail("the host venv has no mujoco: run scripts/host-venv.sh (it installs the image's version)")
    container = str(Path(guard.__file__).parent)
    done = subprocess.run(
        [sys.executable, "-c", MUJOCO_PROBE, container], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "settotalmass" not in done.stderr + done.stdout and done.stdout.strip().endswith("WARNINGS 0")
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()
    control = tmp_path / "without-the-hook"  # the same make without install(): MuJoCo's default handler
    control.mkdir()
    probe = MUJOCO_PROBE.replace("proven_torch_display.install()", "")
    subprocess.run([sys.executable, "-c", probe, container], cwd=control, capture_output=True, text=True, timeout=120, check=True)
    assert (control / "MUJOCO_LOG.TXT").exists()


def test_any_other_mujoco_warning_is_a_python_warning():
    with pytest.warns(RuntimeWarning, match="MuJoCo: Nan, Inf or huge value in QACC"):
        guard.mujoco_warning("Nan, Inf or huge value in QACC at DOF 0. The simulation is unstable.")


def test_gymnasiums_mujoco_viewer_opens_with_its_menu_hidden():
    class WindowViewer:
        def __init__(self, model, data):
            self._hide_menu = False

    module = type("rendering", (), {"WindowViewer": WindowViewer, "OffScreenViewer": type("OffScreenViewer", (), {})})
    guard.PATCHES["gymnasium.envs.mujoco.mujoco_rendering"](module)
    assert module.WindowViewer("m", "d")._hide_menu is True


def test_an_object_refused_a_window_is_left_with_nothing_to_free_other_errors_are_left_alone():
    class GLContext:
        def __init__(self, error):
            raise error

    module = type("glfw", (), {"GLContext": GLContext})
    guard.PATCHES["mujoco.glfw"](module)
    refused = GLContext.__new__(GLContext)
    with pytest.raises(guard.NoDisplayError):
        refused.__init__(guard.NoDisplayError("no display"))
    assert refused._context is None
    other = GLContext.__new__(GLContext)
    with pytest.raises(ValueError):
        other.__init__(ValueError("not ours"))
    assert not hasattr(other, "_context")

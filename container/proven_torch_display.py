"""Never an abort: `render_mode="human"` with no display raises an exception that names the fix.

Without a display the libraries that open windows do not fail cleanly: GLFW (MuJoCo's human
viewer) asserts and aborts the whole process, which in JupyterLab is a dead kernel with no
message; pygame-ce and ALE fall back to SDL's off-screen driver and draw nowhere, silently.
This module makes each of them raise `NoDisplayError` instead, before it opens a window.

How it is loaded, the one place to look: the file
/opt/venv/lib/python3.X/site-packages/proven_torch_display.pth holds one line,
`import proven_torch_display; proven_torch_display.install()`, which Python's `site` runs at
the start of every process of the image's venv. install() only registers an import hook;
nothing is imported. When one of these modules is imported, one of its functions is wrapped
in memory (no file of any package changes on disk):

| module imported | wrapped | used by |
|---|---|---|
| glfw | init, create_window | MuJoCo's human viewer (gymnasium), `MUJOCO_GL=glfw` |
| pygame.display | set_mode | classic control, toy text, Box2D, gymnasium.utils.play |
| ale_py._ale_py | ALEInterface.setBool("display_screen", True) | Atari (ALE) in human mode |
| mujoco | its warning handler (set_mju_user_warning): Python warnings, no MUJOCO_LOG.TXT | every MuJoCo env |
| mujoco.glfw | GLContext: one refused a window frees nothing | `MUJOCO_GL=glfw` |
| gymnasium.envs.mujoco.mujoco_rendering | WindowViewer opens with its help menu hidden (H shows it) | MuJoCo's viewer |
| (same) | WindowViewer, OffScreenViewer: one refused a window frees nothing | MuJoCo's viewers |

One more thing pygame's set_mode gets, with a display: where rendering goes through EGL (the image's
MUJOCO_GL=egl, or PYOPENGL_PLATFORM=egl), a plain window (no pygame.OPENGL flag) is drawn without
OpenGL. SDL2 on Linux otherwise opens a hidden OpenGL window (GLX) to decide how to draw a plain one,
and GLX beside MuJoCo's EGL context in one process ends it: `X Error ... BadAccess ...
X_GLXMakeCurrent` when the EGL context came first (gymnasium's HumanRendering over a MuJoCo env, its
vector form), EGL_BAD_ACCESS when the window came first. SDL_FRAMEBUFFER_ACCELERATION=0 skips that
window: SDL draws through plain X11 (MIT-SHM), as it does anyway where OpenGL is Mesa's (the
probe turns acceleration on for NVIDIA's and ATI's only). A value of the user's own
is left as it is; rgb_array frames stay on EGL.

Refused a window, upstream's viewer and GLFW context are left half-built, and when they are collected their
`__del__` prints "Exception ignored ... AttributeError" (or gymnasium's "not properly closed" warning) under
the message, in the Lab in the cell's output: their `__init__` is wrapped to leave what `free()` reads empty.

A display counts only when a server answers on it: DISPLAY set but nothing listening (the
desktop not opened yet, an SSH session without -X) counts as none. The checks and their
messages are plain functions below (unit-tested). `PROVEN_TORCH_DISPLAY_CHECK=off` leaves
every library as it is upstream. An explicit `SDL_VIDEODRIVER` (dummy, offscreen, ...) is
the user's choice and is left to pygame.

Docs: docs/using-the-image.md, "Watch your agent". Code of the image only: this module must
stay cheap to import (it runs in every Python process) and import nothing heavy.
"""

from __future__ import annotations

import os
import sys

OFF_SWITCH = "PROVEN_TORCH_DISPLAY_CHECK"
# The MUJOCO_GL value the image sets, so a user's own value can be told from it.
IMAGE_GL_MARK = "PROVEN_TORCH_MUJOCO_GL"
X11_SOCKET_DIR = "/tmp/.X11-unix"
DOCS = "docs/using-the-image.md#watch-your-agent"


class NoDisplayError(RuntimeError):
    """A window was asked for (render_mode="human") and no display answers. The message says what to do."""

    def _render_traceback_(self) -> list[str]:
        """How IPython (the Lab's kernels) shows it: the message first and whole, then the line of the user's
        code that asked for the window, instead of a dozen frames of gymnasium's with the message last."""
        import traceback

        frames = [f for f in traceback.extract_tb(self.__traceback__) if "site-packages" not in f.filename]
        where = [f"(the window was asked for at {f.filename}, line {f.lineno}: {f.line})" for f in frames[-1:]]
        return [f"{type(self).__name__}: {self}", *where]


# --- the checks (pure, apart from one socket connect) -----------------------------------------


def parse_display(value: str) -> tuple[str, int] | None:
    """':1' -> ('', 1); 'localhost:10.0' -> ('localhost', 10); 'unix:0' -> ('unix', 0); None if malformed."""
    host, sep, rest = value.rpartition(":")
    if not sep:
        return None
    number = rest.split(".", 1)[0]
    if not number.isdigit():
        return None
    if host.endswith("/unix"):  # 'hostname/unix:0', as xauth writes it
        host = "unix"
    return host, int(number)


def _connects(family: str, address: object, timeout: float) -> str | None:
    """None when something accepts a connection at `address` (family 'unix' or 'inet'), else why not."""
    import socket  # here, not at the top: this module is imported by every Python process

    kind = socket.AF_UNIX if family == "unix" else socket.AF_INET
    with socket.socket(kind, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(address)
        except OSError as err:
            return err.strerror or str(err)
    return None


def x11_problem(display: str, socket_dir: str = X11_SOCKET_DIR, timeout: float = 2.0) -> str | None:
    """None when an X server accepts connections at DISPLAY=`display`, else what is wrong."""
    parsed = parse_display(display)
    if parsed is None:
        return f"DISPLAY={display} is not a display name (expected :N or HOST:N)"
    host, number = parsed
    if host in ("", "unix"):
        path = f"{socket_dir}/X{number}"
        # Linux X servers listen on an abstract socket and on the file; either will do.
        if _connects("unix", "\0" + path, timeout) is None:
            return None
        reason = _connects("unix", path, timeout)
        where = path
    else:
        reason = _connects("inet", (host, 6000 + number), timeout)
        where = f"{host}:{6000 + number}"
    if reason is None:
        return None
    return f"DISPLAY={display}, but no X server answers there ({where}: {reason})"


def wayland_present(environ: dict[str, str]) -> bool:
    """A Wayland compositor's socket exists (WAYLAND_DISPLAY, under XDG_RUNTIME_DIR when relative)."""
    name = environ.get("WAYLAND_DISPLAY", "")
    if not name:
        return False
    path = name if name.startswith("/") else os.path.join(environ.get("XDG_RUNTIME_DIR", ""), name)
    return os.path.exists(path)


def display_problem(environ: dict[str, str], socket_dir: str = X11_SOCKET_DIR) -> str | None:
    """None when a display answers, else one clause saying why there is none."""
    if wayland_present(environ):
        return None
    display = environ.get("DISPLAY", "")
    if not display:
        return "DISPLAY is not set"
    return x11_problem(display, socket_dir)


def fixes(environ: dict[str, str], library: str = "") -> str:
    """What to do about it: the same four ways everywhere; for GLFW, a word on a MUJOCO_GL of the user's own."""
    lines = [
        "  - in JupyterLab: open the Desktop tile in the launcher; kernels and terminals of the Lab draw on it",
        "  - over SSH: connect with `ssh -X` (or -Y); windows then show on your own screen",
        "  - on a Linux desktop of your own: `docker run -e DISPLAY -v /tmp/.X11-unix:/tmp/.X11-unix:ro ...` shows"
        " them on your X server (after `xhost +SI:localuser:$(id -nu 1000)`: the image's user is UID 1000)",
        '  - no window at all: render_mode="rgb_array" gives frames (gymnasium.wrappers.RecordVideo writes an mp4)',
    ]
    mujoco_gl = environ.get("MUJOCO_GL", "")
    image_gl = environ.get(IMAGE_GL_MARK)
    if library.startswith("GLFW") and mujoco_gl and mujoco_gl != image_gl and mujoco_gl.lower() not in ("egl", "osmesa"):
        lines.append(
            f"  - MUJOCO_GL={mujoco_gl} is your own setting (the image's is {image_gl or 'unset'}): GLFW renders"
            " rgb_array frames too, and needs a display for them; unset it to render them through EGL without one"
        )
    return "\n".join(lines)


def message(library: str, problem: str, environ: dict[str, str]) -> str:
    return (
        f'{library} needs a display to open a window (render_mode="human"), and this process has none: {problem}.\n'
        f"{fixes(environ, library)}\n"
        f"(proven-torch: {DOCS}; {OFF_SWITCH}=off lets {library} try anyway)"
    )


def require_display(library: str) -> None:
    """Raise NoDisplayError when no display answers, before `library` opens a window."""
    problem = display_problem(dict(os.environ))
    if problem is not None:
        raise NoDisplayError(message(library, problem, dict(os.environ)))


SDL_FRAMEBUFFER_HINT = "SDL_FRAMEBUFFER_ACCELERATION"
PYGAME_OPENGL = 0x2  # pygame.OPENGL


def sdl_hints(environ: dict[str, str], flags: int) -> dict[str, str]:
    """The SDL hints a pygame window opened with `flags` needs here: none, or no OpenGL beside EGL. Only on
    a local X server (DISPLAY ":1", "unix:1"): without OpenGL SDL draws through MIT-SHM, which a display
    forwarded by ssh -X ("localhost:10.0") advertises but cannot attach (X_ShmAttach BadRequest ends the
    process), so there SDL is left as upstream has it (its OpenGL probe works over ssh -X)."""
    egl = "egl" in (environ.get("MUJOCO_GL", "").lower(), environ.get("PYOPENGL_PLATFORM", "").lower())
    local = environ.get("DISPLAY", "").startswith((":", "unix:"))  # no `re`: this module loads in every process
    if not egl or not local or flags & PYGAME_OPENGL or SDL_FRAMEBUFFER_HINT in environ:
        return {}
    return {SDL_FRAMEBUFFER_HINT: "0"}


def enabled(environ: dict[str, str]) -> bool:
    return environ.get(OFF_SWITCH, "").strip().lower() not in ("off", "0", "no", "false")


# --- the wrappers -------------------------------------------------------------------------------


def _patch_glfw(module) -> None:
    original_init, original_create_window = module.init, module.create_window

    def init():
        require_display("GLFW (MuJoCo's viewer)")
        return original_init()

    def create_window(*args, **kwargs):
        window = original_create_window(*args, **kwargs)
        if not window:  # GLFW would assert on the NULL window at the caller's next call
            code, text = module.get_error()
            raise NoDisplayError(
                message(
                    "GLFW (MuJoCo's viewer)",
                    f"DISPLAY={os.environ.get('DISPLAY', '')} refused a window with OpenGL (GLFW error {code}: {text}); "
                    "an X server reached through `ssh -X` often has no OpenGL (GLX) for remote programs",
                    dict(os.environ),
                )
            )
        return window

    for new, old in ((init, original_init), (create_window, original_create_window)):
        new.__wrapped__ = old  # type: ignore[attr-defined]
        new.__doc__ = old.__doc__
    module.init, module.create_window = init, create_window


def _pygame_error(text: str) -> NoDisplayError:
    """A NoDisplayError that is a pygame.error too, so `except pygame.error` catches it."""
    base = getattr(sys.modules.get("pygame.base"), "error", None)
    if not isinstance(base, type) or issubclass(NoDisplayError, base):
        return NoDisplayError(text)
    return type("NoDisplayError", (NoDisplayError, base), {"__module__": __name__})(text)


def _patch_pygame_display(module) -> None:
    original = module.set_mode

    def set_mode(*args, **kwargs):
        if not os.environ.get("SDL_VIDEODRIVER"):  # an explicit driver (dummy, offscreen) is the user's choice
            problem = display_problem(dict(os.environ))
            if problem is not None:
                raise _pygame_error(message("pygame", problem, dict(os.environ)))
        flags = kwargs.get("flags", args[1] if len(args) > 1 else 0)
        os.environ.update(sdl_hints(dict(os.environ), flags if isinstance(flags, int) else 0))
        return original(*args, **kwargs)

    set_mode.__wrapped__ = original  # type: ignore[attr-defined]
    set_mode.__doc__ = original.__doc__
    module.set_mode = set_mode


def _patch_ale(module) -> None:
    cls = module.ALEInterface
    original = cls.setBool

    def setBool(self, key, value):  # noqa: N802 (ALE's own name)
        if key == "display_screen" and value and not os.environ.get("SDL_VIDEODRIVER"):
            require_display("ALE (Atari)")
        return original(self, key, value)

    setBool.__wrapped__ = original  # type: ignore[attr-defined]
    cls.setBool = setBool


# What MuJoCo warns about on every compile of a model gymnasium ships (its half_cheetah.xml sets settotalmass):
# nothing a user can act on.
KNOWN_MUJOCO_WARNINGS = ("compiler attribute 'settotalmass' is deprecated",)


def mujoco_warning(message: str) -> None:
    """MuJoCo's warning handler here: a Python warning (shown once per place, filterable), never MuJoCo's
    default, which prints it and appends it to MUJOCO_LOG.TXT in the current folder (a notebook's); the known
    asset warnings are dropped."""
    if not message.startswith(KNOWN_MUJOCO_WARNINGS):
        import warnings

        warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=2)


def _patch_mujoco(module) -> None:
    module.set_mju_user_warning(mujoco_warning)


class _NoContext:
    """What a viewer refused a window frees: nothing."""

    def free(self) -> None:
        pass


def _emptied_when_refused(cls, attribute: str, empty, after=None) -> None:
    """Wrap cls.__init__: refused a window (NoDisplayError), it sets `attribute`, what the half-built object's
    `free()` reads when it is collected, to `empty` before the error goes on; `after(self)` runs after a
    successful one."""
    original = cls.__init__

    def __init__(self, *args, **kwargs):  # noqa: N807
        try:
            original(self, *args, **kwargs)
        except NoDisplayError:
            setattr(self, attribute, empty)
            raise
        if after is not None:
            after(self)

    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    cls.__init__ = __init__


def _patch_mujoco_glfw(module) -> None:
    _emptied_when_refused(module.GLContext, "_context", None)


def _hide_menu(viewer) -> None:
    viewer._hide_menu = True


def _patch_mujoco_viewer(module) -> None:
    """gymnasium's MuJoCo viewer opens with its help menu hidden (it covered half the window); H shows it."""
    window_viewer, offscreen_viewer = module.WindowViewer, module.OffScreenViewer  # both there, or neither wrapped
    _emptied_when_refused(window_viewer, "window", None, after=_hide_menu)
    _emptied_when_refused(offscreen_viewer, "opengl_context", _NoContext())


PATCHES = {
    "glfw": _patch_glfw,
    "pygame.display": _patch_pygame_display,
    "ale_py._ale_py": _patch_ale,
    "mujoco": _patch_mujoco,
    "mujoco.glfw": _patch_mujoco_glfw,
    "gymnasium.envs.mujoco.mujoco_rendering": _patch_mujoco_viewer,
}


class _Loader:
    """The module's own loader, then the patch."""

    def __init__(self, loader, patch):
        self.loader, self.patch = loader, patch

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        try:
            self.patch(module)
        except Exception as err:  # a changed upstream API: warn, never break the import
            print(f"proven_torch_display: could not wrap {module.__name__} ({err!r}); it behaves as upstream", file=sys.stderr)

    def __getattr__(self, name):  # get_resource_reader, is_package, ...: the real loader's
        return getattr(self.loader, name)


class _Finder:
    """A meta path finder that only watches for PATCHES' modules and hands everything else on."""

    def find_spec(self, fullname, path=None, target=None):
        patch = PATCHES.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader, patch)
                return spec
        return None


def install(environ: dict[str, str] | None = None) -> bool:
    """Register the hook (once); patch what is imported already. False when switched off."""
    if not enabled(dict(os.environ) if environ is None else environ):
        return False
    if any(isinstance(finder, _Finder) for finder in sys.meta_path):
        return True
    for name, patch in PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])
    sys.meta_path.insert(0, _Finder())
    return True

"""The image's JupyterLab defaults (installed as /etc/jupyter/jupyter_server_config.py).

System-wide config has the lowest priority: ~/.jupyter/jupyter_server_config.py
and command-line flags (`docker run IMAGE jupyter-lab --port=9999`) override it.
Token auth stays on whatever they say: start.sh always exports a non-empty
JUPYTER_TOKEN and refuses to start when the resolved config sets an empty one
(container/jupyter_token.py).
"""

import os

c = get_config()  # noqa: F821 (provided by Jupyter when it loads this file)

# Listen on every interface of the container; publish the port on the host's
# loopback only (docker run -p 127.0.0.1:8888:8888).
c.ServerApp.ip = "0.0.0.0"
c.ServerApp.port = 8888
# Fail loudly when 8888 is taken inside the container instead of moving to a
# port nobody published.
c.ServerApp.port_retries = 0
c.ServerApp.open_browser = False
c.ServerApp.root_dir = "/workspace"

# An alternative to the token: a hashed password (docs/using-the-image.md shows
# how to make one). The token keeps working beside it.
if os.environ.get("JUPYTER_PASSWORD_HASH"):
    c.PasswordIdentityProvider.hashed_password = os.environ["JUPYTER_PASSWORD_HASH"]

# No calls to the internet from the server: no update check against PyPI, no
# news feed (the image must work offline and behind proxies).
c.LabApp.check_for_updates_class = "jupyterlab.NeverCheckForUpdate"
c.LabApp.news_url = None
# and no extension catalogue: the "pypi" manager asks PyPI for every search of the Extension Manager
# (its log said so); "readonly" lists the installed extensions and installs none (they come with the image)
c.LabApp.extension_manager = "readonly"

# Terminals run bash as a login shell (Jupyter's default is $SHELL, unset in the
# image, so plain `sh`): /etc/profile.d/proven-torch.sh then gives them the
# image's PATH like every other way in (docs/using-the-image.md).
c.ServerApp.terminado_settings = {"shell_command": ["/bin/bash", "-l"]}

# The desktop's X display and its cookie (the Desktop tile, below). Windows opened by the Lab's
# kernels and terminals (render_mode="human", an xterm) go there: both names are in the Lab's
# environment, which they inherit. A DISPLAY the container was given (`-e DISPLAY=...` with an X
# socket mounted) is kept as it is.
DESKTOP_DISPLAY = ":1"
DESKTOP_XAUTHORITY = "/tmp/proven-torch/desktop/Xauthority"
if not os.environ.get("DISPLAY"):
    os.environ["DISPLAY"] = DESKTOP_DISPLAY
    os.environ["XAUTHORITY"] = DESKTOP_XAUTHORITY

# TensorBoard behind the one published port, at /tensorboard/ under Jupyter's base URL and
# behind Jupyter's own token or password (jupyter-server-proxy starts it on the first visit
# and lists it in the Lab launcher). It reads $TENSORBOARD_LOGDIR, by default /workspace.
c.ServerProxy.servers = {
    "tensorboard": {
        "command": [
            "tensorboard",
            "--logdir",
            os.environ.get("TENSORBOARD_LOGDIR", "/workspace"),
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "--path_prefix",
            "{base_url}tensorboard",
        ],
        "absolute_url": True,  # TensorBoard serves under its --path_prefix, so the proxy keeps the path
        "timeout": 60,
        "new_browser_tab": True,
        "launcher_entry": {"title": "TensorBoard"},
    },
    # The desktop (docs/using-the-image.md, "Watch your agent"). jupyter-remote-desktop-proxy
    # brings the Desktop tile and its noVNC page at /desktop/, which talks to this server,
    # "desktop-websockify", behind the same token. Its own entry of that name would start
    # Debian's vncserver wrapper (a free display number, files in ~/.vnc, the cookie in
    # ~/.Xauthority); this one, registered first and so the one that answers, starts
    # container/desktop/start-desktop.sh: TigerVNC on DESKTOP_DISPLAY, reachable only through
    # the socket jupyter-server-proxy makes in a private folder, then blackbox. It starts on the
    # first visit of the tile (nothing runs until then) and stops with the Lab.
    "desktop-websockify": {
        "command": ["/opt/proven-torch/container/desktop/start-desktop.sh", DESKTOP_DISPLAY, "{unix_socket}", DESKTOP_XAUTHORITY],
        "unix_socket": True,
        "raw_socket_proxy": True,
        "timeout": 30,
        "launcher_entry": {"enabled": False},  # the package's own entry draws the tile
    },
}

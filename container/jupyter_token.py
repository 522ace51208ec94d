#!/usr/bin/env python3
"""jupyter_token: refuse a JupyterLab configuration that switches token auth off.

The one place the image's "no empty token" rule lives. start.sh runs
`jupyter-lab --show-config-json ARGS` before it starts the server: Jupyter
itself resolves every config file (the image's, ~/.jupyter, --config) and every
command-line flag, and opens no socket. That JSON comes in on stdin; an empty
token in any of the places Jupyter reads one makes this print the setting on
stdout and exit 3. Exit 0 when token auth stays on. Standard library only.

start.sh always exports a non-empty JUPYTER_TOKEN, so only an explicit empty
setting (--IdentityProvider.token=, c.ServerApp.token = "" in a config file, the
--token= alias) can turn the token off; a hashed password beside it does not
make an empty token acceptable (docs/using-the-image.md).
"""

from __future__ import annotations

import json
import sys

# Where Jupyter Server 2 reads the token, the current name first (the other two
# are deprecated aliases it still honours).
TOKEN_SETTINGS = ("IdentityProvider", "ServerApp", "NotebookApp")


def empty_token_setting(config: dict) -> str | None:
    """The first setting in Jupyter's resolved config that sets an empty token, or None."""
    for section in TOKEN_SETTINGS:
        value = (config.get(section) or {}).get("token")
        if isinstance(value, str) and not value.strip(" '\""):
            return f"{section}.token is empty"
    return None


def main() -> int:
    try:
        config = json.load(sys.stdin)
    except json.JSONDecodeError as exc:
        print(f"cannot read Jupyter's resolved config ({exc})")
        return 3
    problem = empty_token_setting(config if isinstance(config, dict) else {})
    if problem:
        print(problem)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Install the SSH public keys a container is given into ~/.ssh/authorized_keys.

    python3 ssh_keys.py SSH_HOME      # start.sh runs it before starting sshd

The keys come from PUBLIC_KEY (key lines) and PUBLIC_KEY_FILE (a mounted file);
each line is checked with ssh-keygen, and the valid ones replace the file that
start.sh wrote at an earlier start. A file the user mounted is left alone. At
most one line goes to stderr, saying what was wrong or ignored, and what to do.
Exit 0 when ~/.ssh/authorized_keys holds a valid key (sshd can start), 1 when SSH
stays off. Standard library and ssh-keygen only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HEADER = (
    "# Written by start.sh from PUBLIC_KEY / PUBLIC_KEY_FILE at every start; edits are lost. Mount your own file here instead."
)
KEY_LINE = "expected one 'TYPE BASE64 [comment]' line per key"
KEY_FORMAT = f"{KEY_LINE}, as in ~/.ssh/id_ed25519.pub"


def is_valid(path: Path) -> bool:
    """ssh-keygen reads a public key (or a file of them) from `path`."""
    return subprocess.run(["ssh-keygen", "-l", "-f", str(path)], capture_output=True, timeout=30).returncode == 0


def vet(source: str, text: str) -> tuple[list[str], list[str]]:
    """(valid key lines, one description per invalid line) of `text`; blank lines and comments are skipped."""
    if "PRIVATE KEY" in text:
        return [], [f"{source} holds a PRIVATE key (give the .pub file)"]
    keys, bad = [], []
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp, "key.pub")
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.rstrip("\r")
            if not line.strip() or line.startswith("#"):
                continue
            probe.write_text(line + "\n")
            if is_valid(probe):
                keys.append(line)
            else:
                bad.append(f"{source} line {number} ('{line[:24]}...') is not a valid SSH public key")
    return keys, bad


def given_keys(env: dict[str, str], uid: int) -> tuple[list[str], list[str]]:
    keys, bad = [], []
    if env.get("PUBLIC_KEY"):
        k, b = vet("PUBLIC_KEY", env["PUBLIC_KEY"])
        keys, bad = keys + k, bad + b
    if env.get("PUBLIC_KEY_FILE"):
        path = Path(env["PUBLIC_KEY_FILE"])
        try:
            k, b = vet(f"PUBLIC_KEY_FILE ({path})", path.read_text())
            keys, bad = keys + k, bad + b
        except OSError:
            bad.append(f"PUBLIC_KEY_FILE={path} cannot be read (not mounted, or not readable by UID {uid})")
    return keys, bad


def install(ssh_home: Path, env: dict[str, str], uid: int) -> tuple[bool, list[str]]:
    """(sshd can start, the lines to log)."""
    keys, bad = given_keys(env, uid)
    ssh_dir, file = ssh_home / ".ssh", ssh_home / ".ssh" / "authorized_keys"
    try:
        ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        pass
    try:
        own = file.exists() and file.read_text().split("\n", 1)[0] != HEADER
    except OSError:
        own = True  # there, but not ours to read: the user's
    if own and keys:
        bad.append(
            "~/.ssh/authorized_keys is your own (mounted) file, so the keys from PUBLIC_KEY / PUBLIC_KEY_FILE were not added to it"
        )
    elif keys:
        try:
            tmp = file.with_name(file.name + ".tmp")
            tmp.write_text("\n".join([HEADER, *keys]) + "\n")
            tmp.chmod(0o600)
            tmp.replace(file)
        except OSError:
            return False, [f"SSH: off: cannot write {file} (is {ssh_dir} writable by UID {uid}?)."]
    elif not own:
        file.unlink(missing_ok=True)  # keys of an earlier start that are no longer given
    expected = KEY_FORMAT if any("not a valid" in b for b in bad) else "nothing else was changed"
    if not file.is_file() or not is_valid(file):
        if bad:
            return False, [f"SSH: off: {';'.join(bad)}; {expected}."]
        if own:
            return False, [f"SSH: off: ~/.ssh/authorized_keys holds no valid public key; {KEY_LINE}."]
        return False, ["SSH: off (no key given: set PUBLIC_KEY or PUBLIC_KEY_FILE, or mount ~/.ssh/authorized_keys)."]
    lines = [f"SSH: ignored: {';'.join(bad)}; {expected}."] if bad else []
    # sshd's StrictModes ignores a key file that others may write or that belongs to someone else.
    info = file.stat()
    if info.st_uid not in (uid, 0) or info.st_mode & 0o022:
        lines.append(
            f"SSH: sshd will refuse ~/.ssh/authorized_keys: it belongs to UID {info.st_uid} with mode {info.st_mode & 0o777:o}; "
            f"it must belong to UID {uid} (or root) and not be group/world-writable (chmod 600)."
        )
    return True, lines


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: ssh_keys.py SSH_HOME", file=sys.stderr)
        return 2
    ok, lines = install(Path(argv[0]), dict(os.environ), os.getuid())
    for line in lines:
        print(f"start.sh: {line}", file=sys.stderr, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""The signing key, from the file it is read from to the DSSE envelopes it signs, and the checking of
envelopes with a public key. No hand-written crypto: securesystemslib and cryptography; ed25519 in PEM.

The private key is read in one place only: the signer, this module run as a process of its own from
the hash-locked .venv-signer (`python -m pipeline.attest`), importing the standard library, those two
packages and in-repo modules that use the standard library only (pipeline.errors, pipeline.statements
and what they import). The build's process sends it statements and gets
envelopes back. Where the key may lie and where its passphrase comes from: docs/supply-chain.md ("Keys").
"""

from __future__ import annotations

import base64
import copy
import json
import os
import secrets
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from common.rules import PASSPHRASE_ENV
from pipeline.errors import NotVerified, PipelineError, RegistryDataRefused, UsageError
from pipeline.statements import PAYLOAD_TYPE, encode, now, stamp_run

REPO_ROOT = Path(__file__).resolve().parent.parent
SIGN_KEY_ENV = "PROVEN_TORCH_SIGN_KEY"
SIGNER_PYTHON_ENV = "PROVEN_TORCH_SIGNER_PYTHON"  # another signer interpreter (tests; hosts with their own venv)
SIGNER_VENV = REPO_ROOT / ".venv-signer"
PRIVATE_NAME, PUBLIC_NAME = "proven-torch.key", "proven-torch.pub"
RUN_NAME_MAX = 300  # characters of a run name (an Actions run URL is about 100)
SIGNER_TIMEOUT = 120  # seconds for one request to the signer (the SBOM statement is the largest, ~2 MB)


@dataclass(frozen=True)
class KeySource:
    """Where the private key and its passphrase are: what the build passes around instead of the key."""

    path: Path
    passphrase_file: Path | None = None


def key_source(flag: Path | None, passphrase_file: Path | None = None) -> KeySource | None:
    """--sign-key, else PROVEN_TORCH_SIGN_KEY, else None (pushes are then unsigned)."""
    value = flag if flag is not None else (os.environ.get(SIGN_KEY_ENV, "").strip() or None)
    return KeySource(Path(value), passphrase_file) if value is not None else None


# --------------------------------------------------------------------------- the build's side


def _signer_python() -> str:
    chosen = os.environ.get(SIGNER_PYTHON_ENV, "").strip()
    python = Path(chosen) if chosen else SIGNER_VENV / "bin" / "python"
    if not python.is_file():
        raise UsageError(
            f"the signer's venv is missing ({python}): run `bash scripts/host-venv.sh` (make image does), which installs "
            "it from the hash-locked requirements-signer.lock"
        )
    return str(python)


def _ask_signer(request: dict) -> dict:
    """One request to a fresh signer process; its answer, or its one-line refusal as a PipelineError."""
    cmd = [_signer_python(), "-s", "-E", "-m", "pipeline.attest"]  # -s -E: no user site, no PYTHON* variables
    try:
        done = subprocess.run(
            cmd, input=json.dumps(request), capture_output=True, text=True, cwd=REPO_ROOT, timeout=SIGNER_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        raise PipelineError(f"the signer did not answer within {SIGNER_TIMEOUT} s") from None
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise PipelineError(f"the signer failed (exit {done.returncode}): {tail}") from None
    if "error" in answer:
        raise (UsageError if answer.get("usage") else PipelineError)(str(answer["error"]))
    return answer


def check_key(source: KeySource) -> str:
    """The key's id, after the signer read it: a bad key, a wrong passphrase or a key others can read is
    refused here, before any build."""
    return str(_ask_signer({"op": "keyid", **_where(source)})["keyid"])


@dataclass(frozen=True)
class Signatures:
    """What the signer answered: its key, the envelopes (in the statements' order), and the run it stamped
    into every statement: a fresh random id and its own clock's time."""

    keyid: str
    envelopes: list[bytes]
    run: str
    signed_at: str

    @classmethod
    def read(cls, answer: dict) -> Signatures:
        """The signer's answer to "sign", as it gave it here or in a job of its own (`build.py attach`)."""
        envelopes = [base64.b64decode(e, validate=True) for e in answer["envelopes"]]  # no stray bytes skipped
        return cls(str(answer["keyid"]), envelopes, str(answer["run"]), str(answer["signed_at"]))


def sign(source: KeySource, statements: list[dict], run_name: str | None = None) -> Signatures:
    """The statements signed by the signer as one run; `run_name` (the Actions run URL, say) is signed as a label."""
    return Signatures.read(_ask_signer({"op": "sign", **_where(source), "statements": statements, "run_name": run_name}))


def keygen(directory: Path, encrypt: bool = False, passphrase_file: Path | None = None) -> tuple[Path, Path, str]:
    """(private, public, key id) of a new pair the signer wrote in `directory`."""
    answer = _ask_signer(
        {"op": "keygen", "directory": str(directory), "encrypt": encrypt, "passphrase_file": _str(passphrase_file)}
    )
    return Path(answer["private"]), Path(answer["public"]), str(answer["keyid"])


def keygen_lines(directory: Path, encrypt: bool = False, passphrase_file: Path | None = None) -> list[str]:
    """`build.py keygen DIR`: what was written and how to use it."""
    private, public, keyid = keygen(directory, encrypt, passphrase_file)
    how = f" (encrypted: give its passphrase in ${PASSPHRASE_ENV} or --sign-key-passphrase-file)" if encrypt else ""
    return [
        f"==> private key: {private} (mode 600{how}; never commit it, never put it in the checkout)",
        f"==> public key:  {public} (key id {keyid[:16]}…; give it to whoever verifies)",
        f"sign pushes:     python build.py --push --registry HOST:PORT --sign-key {private}   (or export {SIGN_KEY_ENV}={private})",
        f"verify an image: python build.py verify HOST/REPO:TAG --key {public}",
    ]


def _str(path: Path | None) -> str | None:
    return str(path) if path is not None else None


def _where(source: KeySource) -> dict:
    return {"key": str(source.path), "passphrase_file": _str(source.passphrase_file)}


# --------------------------------------------------------------------------- checking (public keys only)


def load_public_key(path: Path):
    """The public key statements must be signed with (securesystemslib's Key)."""
    from cryptography.hazmat.primitives import serialization
    from securesystemslib.signer import SSlibKey

    try:
        public = serialization.load_pem_public_key(path.read_bytes())
    except OSError as err:
        raise UsageError(
            f"--key {path}: cannot read it ({err.strerror}); pass the public key (.pub) the images were signed with"
        ) from None
    except ValueError:
        raise UsageError(f"--key {path}: not a PEM public key; pass the .pub file `build.py keygen` wrote") from None
    try:
        return SSlibKey.from_crypto(public)
    except ValueError as err:
        raise UsageError(f"--key {path}: a key type this tool does not verify ({err})") from None


def signers_of(envelope: dict) -> set[str]:
    """The key ids an envelope says signed it (unverified: for choosing, never for trusting)."""
    signatures = envelope.get("signatures")
    return {str(s.get("keyid", "")) for s in signatures if isinstance(s, dict)} if isinstance(signatures, list) else set()


def envelope_payload(data: bytes, what: str) -> dict:
    """The statement a DSSE envelope carries, unverified (to compare with what was prepared, not to trust)."""
    try:
        envelope = json.loads(data)
        return json.loads(base64.b64decode(envelope["payload"], validate=True))
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"{what}: not a DSSE envelope of a JSON statement") from None


def open_envelope(envelope: dict, key, what: str) -> bytes:
    """The payload of a DSSE envelope (already parsed, bounded, by pipeline.registry) whose signature
    `key` verifies; NotVerified otherwise. The payload is returned as bytes, for signed_statements.read_statement."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import FormatError, VerificationError

    try:
        opened = Envelope.from_dict(copy.deepcopy(envelope))
    except (FormatError, KeyError, TypeError, ValueError, AttributeError):  # every shape a JSON object can take
        raise RegistryDataRefused(f"{what}: not a DSSE envelope") from None
    if opened.payload_type != PAYLOAD_TYPE:
        raise NotVerified(f"{what}: payload type {opened.payload_type!r}, not an in-toto statement")
    try:
        opened.verify([key], 1)
    except (VerificationError, FormatError, ValueError, TypeError):
        signed_by = ", ".join(s[:16] for s in opened.signatures) or "nobody"
        raise NotVerified(
            f"{what}: the signature does not verify with key {key.keyid[:16]}… (signed by {signed_by}…): "
            "altered after signing, or signed with another key"
        ) from None
    return opened.payload


# --------------------------------------------------------------------------- the signer's side


def _refuse_in_build_context(path: Path, flag: str) -> None:
    """The build context is the checkout: a key inside it could be copied into a layer."""
    if path.resolve().is_relative_to(REPO_ROOT):
        raise UsageError(
            f"{flag} {path} is inside the checkout, which is the image's build context; "
            "keep it outside (e.g. ~/.config/proven-torch/) and pass that path"
        )


def _passphrase(passphrase_file: str | None, needed: str) -> bytes:
    """The passphrase from the file, else the environment; `needed`: what wants one (a refusal names it)."""
    if passphrase_file:
        _private_to_owner(Path(passphrase_file), "--sign-key-passphrase-file")
        try:
            text = Path(passphrase_file).read_text().rstrip("\n")
        except OSError as err:
            raise UsageError(f"--sign-key-passphrase-file {passphrase_file}: cannot read it ({err.strerror})") from None
    else:
        text = os.environ.get(PASSPHRASE_ENV, "")
    if not text:
        raise UsageError(f"{needed}: give its passphrase in ${PASSPHRASE_ENV} or --sign-key-passphrase-file FILE")
    return text.encode()


def _load_private(path: Path, passphrase_file: str | None):
    """securesystemslib's CryptoSigner over the private key at `path`; one clear line for each way it can be wrong."""
    from cryptography.hazmat.primitives import serialization
    from securesystemslib.signer import CryptoSigner

    _refuse_in_build_context(path, "--sign-key")
    try:
        data = path.read_bytes()
        mode = path.stat().st_mode
    except OSError as err:
        raise UsageError(
            f"--sign-key {path}: cannot read it ({err.strerror}); make one with `python build.py keygen DIR`"
        ) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UsageError(f"--sign-key {path}: readable by others (mode {mode & 0o777:o}); run `chmod 600 {path}`")
    encrypted = b"ENCRYPTED PRIVATE KEY" in data
    password = _passphrase(passphrase_file, needed=f"--sign-key {path} is encrypted") if encrypted else None
    try:
        private = serialization.load_pem_private_key(data, password=password)
        signer = CryptoSigner(private)
    except (ValueError, TypeError) as err:
        why = "the passphrase is wrong" if encrypted else f"not a PEM private key ({type(err).__name__})"
        raise UsageError(f"--sign-key {path}: {why}; make one with `python build.py keygen DIR`") from None
    return signer


def _private_to_owner(path: Path, flag: str, writable_only: bool = False) -> None:
    """A file others can read (a folder others can write into, `writable_only`), or that another user owns,
    is refused: someone else could read the secret or swap the key."""
    try:
        st = path.stat()
    except OSError:
        return  # missing: the read that follows says so
    open_to = stat.S_IWGRP | stat.S_IWOTH if writable_only else stat.S_IRWXG | stat.S_IRWXO
    if st.st_uid != os.geteuid():
        raise UsageError(f"{flag} {path}: owned by uid {st.st_uid}, not by this user; use one of your own")
    if st.st_mode & open_to:
        what = "writable by others" if writable_only else "readable by others"
        raise UsageError(
            f"{flag} {path}: {what} (mode {st.st_mode & 0o777:o}); run `chmod {'go-w' if writable_only else '600'} {path}`"
        )


def _create(path: Path, data: bytes, mode: int) -> None:
    """Write a new file; never through a symlink, never over an existing file (or a dangling link)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    except FileExistsError:
        raise UsageError(f"{path} exists (or is a link): keygen never overwrites; pick an empty folder") from None
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _keygen(directory: Path, encrypt: bool, passphrase_file: str | None) -> dict:
    from cryptography.hazmat.primitives import serialization
    from securesystemslib.signer import CryptoSigner

    private, public = directory / PRIVATE_NAME, directory / PUBLIC_NAME
    _refuse_in_build_context(private, "keygen")
    if directory.is_symlink():
        raise UsageError(f"{directory} is a symlink: keygen writes keys into a real folder only")
    if directory.exists():
        _private_to_owner(directory, "keygen", writable_only=True)
    for path in (private, public):
        if path.exists() or path.is_symlink():
            raise UsageError(f"{path} exists (or is a link): keygen never overwrites a key; pick an empty folder or move it away")
    password = _passphrase(passphrase_file, needed="keygen --encrypt needs a passphrase") if encrypt else None
    directory.mkdir(parents=True, exist_ok=True)
    signer = CryptoSigner.generate_ed25519()
    key = serialization.load_pem_private_key(signer.private_bytes, password=None)
    encryption = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    _create(private, pem, 0o600)
    _create(
        public, key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo), 0o644
    )
    return {"private": str(private), "public": str(public), "keyid": signer.public_key.keyid}


def _envelope(signer, stmt: dict) -> bytes:
    from securesystemslib.dsse import Envelope

    envelope = Envelope(payload=encode(stmt), payload_type=PAYLOAD_TYPE, signatures={})
    envelope.sign(signer)
    return encode(envelope.to_dict())


def _run_name(name) -> str | None:
    """The caller's name for a run: a label of printable characters, bounded; anything else is refused."""
    if name is None or name == "":
        return None
    if not isinstance(name, str) or len(name) > RUN_NAME_MAX or not name.isprintable():
        raise UsageError(f"--run-name: give at most {RUN_NAME_MAX} printable characters (the CI run's URL, say)")
    return name


def serve(request: dict) -> dict:
    """What the signer does with one request (the signer process's whole job)."""
    op = request.get("op")
    if op == "keygen":
        return _keygen(Path(request["directory"]), bool(request.get("encrypt")), request.get("passphrase_file"))
    signer = _load_private(Path(request["key"]), request.get("passphrase_file"))
    keyid = signer.public_key.keyid
    if op == "keyid":
        return {"keyid": keyid}
    if op == "sign":  # one run: the signer's own id and clock, the same for every statement
        run, signed_at, name = secrets.token_hex(16), now(), _run_name(request.get("run_name"))
        stamped = [stamp_run(stmt, run, signed_at, name) for stmt in request["statements"]]
        envelopes = [base64.b64encode(_envelope(signer, stmt)).decode() for stmt in stamped]
        return {"keyid": keyid, "envelopes": envelopes, "run": run, "signed_at": signed_at}
    raise UsageError(f"the signer does not know the request {op!r}")


def main() -> int:
    try:
        answer = serve(json.loads(sys.stdin.read()))
    except PipelineError as err:
        answer = {"error": str(err), "usage": isinstance(err, UsageError)}
    sys.stdout.write(json.dumps(answer))
    return 0 if "error" not in answer else 2


if __name__ == "__main__":
    sys.exit(main())

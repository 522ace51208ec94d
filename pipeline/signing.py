"""Keys and DSSE envelopes, through securesystemslib (no hand-written crypto).

A key pair is ed25519 in PEM: the private key PKCS#8, the public key SubjectPublicKeyInfo
(the form `cosign` and `openssl` read too). The private key is only ever read here, from a
file outside the build context; it is never logged, written to a report or passed to a
container. `build.py keygen DIR` makes a pair; `--sign-key PATH` or PROVEN_TORCH_SIGN_KEY
signs pushes with it; `build.py verify --key PUBKEY` checks them.
"""

from __future__ import annotations

import copy
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import FormatError, VerificationError
from securesystemslib.signer import CryptoSigner, Key, SSlibKey

from pipeline.errors import NotVerified, UsageError
from pipeline.statements import PAYLOAD_TYPE, encode
from pipeline.variants import REPO_ROOT

SIGN_KEY_ENV = "PROVEN_TORCH_SIGN_KEY"
PRIVATE_NAME, PUBLIC_NAME = "proven-torch.key", "proven-torch.pub"
ENVELOPE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"


@dataclass(frozen=True)
class SigningKey:
    """A loaded private key: the signer and the id of its public half (what reports name)."""

    signer: CryptoSigner
    keyid: str
    path: Path  # where it was read from; reports name the keyid only

    def __repr__(self) -> str:  # never the key material, whatever prints this
        return f"SigningKey(keyid={self.keyid[:16]}…)"


def keygen(directory: Path) -> tuple[Path, Path]:
    """A new ed25519 pair in DIRECTORY (private 0600); refuses to overwrite one."""
    private, public = directory / PRIVATE_NAME, directory / PUBLIC_NAME
    refuse_in_build_context(private)
    for path in (private, public):
        if path.exists():
            raise UsageError(f"{path} exists: keygen never overwrites a key; pick an empty folder or move it away")
    directory.mkdir(parents=True, exist_ok=True)
    signer = CryptoSigner.generate_ed25519()
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(signer.private_bytes)
    public.write_bytes(_public_pem(signer))
    return private, public


def _public_pem(signer: CryptoSigner) -> bytes:
    private = serialization.load_pem_private_key(signer.private_bytes, password=None)
    return private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def refuse_in_build_context(path: Path) -> None:
    """The build context is the checkout: a key inside it could be copied into a layer."""
    resolved = path.resolve()
    if resolved.is_relative_to(REPO_ROOT):
        raise UsageError(
            f"the signing key {path} is inside the checkout, which is the image's build context; "
            "keep it outside (e.g. ~/.config/proven-torch/) and pass that path"
        )


def sign_key_path(flag: Path | None) -> Path | None:
    """--sign-key, else PROVEN_TORCH_SIGN_KEY, else None (pushes are then unsigned)."""
    if flag is not None:
        return flag
    value = os.environ.get(SIGN_KEY_ENV, "").strip()
    return Path(value) if value else None


def load_signing_key(path: Path) -> SigningKey:
    """Read a private key for signing; one clear line for each way it can be wrong."""
    refuse_in_build_context(path)
    try:
        data = path.read_bytes()
        mode = path.stat().st_mode
    except OSError as err:
        raise UsageError(
            f"--sign-key {path}: cannot read it ({err.strerror}); make one with `python build.py keygen DIR`"
        ) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UsageError(f"--sign-key {path}: readable by others (mode {mode & 0o777:o}); run `chmod 600 {path}`")
    try:
        private = serialization.load_pem_private_key(data, password=None)
        signer = CryptoSigner(private)
    except (ValueError, TypeError) as err:
        raise UsageError(
            f"--sign-key {path}: not an unencrypted PEM private key ({type(err).__name__}); make one with `python build.py keygen DIR`"
        ) from None
    return SigningKey(signer=signer, keyid=signer.public_key.keyid, path=path)


def load_public_key(path: Path) -> Key:
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


def sign(key: SigningKey, stmt: dict) -> bytes:
    """The statement in a signed DSSE envelope, as the bytes that go to the registry."""
    envelope = Envelope(payload=encode(stmt), payload_type=PAYLOAD_TYPE, signatures={})
    envelope.sign(key.signer)
    return json.dumps(envelope.to_dict(), sort_keys=True, separators=(",", ":")).encode()


def open_envelope(data: bytes, key: Key, what: str) -> dict:
    """The statement inside a DSSE envelope whose signature `key` verifies; NotVerified otherwise."""
    try:
        envelope = Envelope.from_dict(copy.deepcopy(json.loads(data)))
    except Exception as err:  # securesystemslib's FormatError, or any shape the JSON can take
        raise NotVerified(f"{what}: not a DSSE envelope ({type(err).__name__})") from None
    if envelope.payload_type != PAYLOAD_TYPE:
        raise NotVerified(f"{what}: payload type {envelope.payload_type!r}, not an in-toto statement")
    try:
        envelope.verify([key], 1)
    except (VerificationError, FormatError, ValueError, TypeError):
        signed_by = ", ".join(s[:16] for s in envelope.signatures) or "nobody"
        raise NotVerified(
            f"{what}: the signature does not verify with key {key.keyid[:16]}… (signed by {signed_by}…): "
            "altered after signing, or signed with another key"
        ) from None
    try:
        return json.loads(envelope.payload)
    except ValueError:
        raise NotVerified(f"{what}: the signed payload is not JSON") from None


def keygen_lines(directory: Path) -> list[str]:
    """`build.py keygen DIR`: what was written and how to use it."""
    private, public = keygen(directory)
    keyid = load_signing_key(private).keyid
    return [
        f"==> private key: {private} (mode 600; never commit it, never put it in the checkout)",
        f"==> public key:  {public} (key id {keyid[:16]}…; give it to whoever verifies)",
        f"sign pushes:     python build.py --push --sign-key {private}   (or export {SIGN_KEY_ENV}={private})",
        f"verify an image: python build.py verify HOST/REPO:TAG --key {public}",
    ]

"""build.py's texts: each command's one-line summary, each flag's help, and the epilog that lists
the commands and the exit codes under every `--help`. Data only: build.py builds the parser from them."""

from __future__ import annotations

from pipeline.errors import EXIT_CODES

COMMANDS = {
    "build": "build, validate, tag and optionally push one line (the default command)",
    "list": "show the variant matrix: pins, how each line builds, what it carries",
    "render": "write the Dockerfiles (one per CUDA line) and specs from images/ (--check: fail on drift)",
    "lock": "resolve a line's hash-locked requirements with uv into images/locks/ (--check: offline staleness)",
    "report": "rebuild the HTML pages and reports/index.html from every report.json under --report-dir",
    "advisories": "rewrite the audit's advisory snapshot in images/advisories/ from --from DIR|ZIP",
    "matrix": "build and prove every line this host can build, one after another, and write one summary table",
    "keygen": "make an ed25519 key pair in DIR to sign pushes with (DIR/proven-torch.key, 0600) and verify them (DIR/proven-torch.pub)",
    "verify": "check a pushed image's signed statements: signatures, subjects, one run's newest set, the proof's result, its image, "
    "its tag and age; one screen (exit 0 verified, 1 not, 6 registry unreachable)",
    "sign": "sign a pushed digest from its build's report, with a later proof (--proof) in place of the build's own: only a proof "
    "that passed is signed (what the release does after its GPU proof)",
    "attach": "attach to a pushed digest the envelopes a signer signed apart from `sign --prepare DIR`'s statements (the release)",
    "diff": "is B safe to roll out instead of A? trust, versions, packages, advisories, size, proof and PPO figures, from the "
    "signed statements and manifests, no layer read (exit 0 no worse, 1 regressions, one line each)",
    "rebuild": "build the revision a pushed, signed image names, cold, in a worktree: REPRODUCED when it gives the same image, "
    "else the layers that differ, the files in them (--out) and the packages that moved (exit 0 reproduced, 1 differs)",
    "withdraw": "delete a pushed digest whose proof failed, with every tag naming it and its statements (registries delete by digest)",
}
EPILOG = (
    "commands (python build.py COMMAND --help):\n"
    + "\n".join(f"  {name:<11} {text}" for name, text in COMMANDS.items())
    + "\n\nexit codes:\n"
    + "\n".join(f"  {code:<4} {text}" for code, text in EXIT_CODES.items())
)
HELP = {  # every flag's help, the same for each command that takes it
    "--debug": "show the traceback of an unexpected error",
    "--cuda": "CUDA line, e.g. 12.8 or cu128 (default: the matrix's default_cuda); where it has several torch lines, the first listed unless --torch picks "
    "another",
    "--torch": "torch version to require, e.g. 2.9; refused with a clear message when that torch has no build for the CUDA line (default: the torch the "
    "matrix pins for the line)",
    "--flavor": "base (default), or a flavor of [flavors] in images/variants.toml, e.g. rlhf (transformers, TRL, accelerate, PEFT on top of the base image; "
    "tags end in -rlhf)",
    "--push": "push the validated image (all its tags) to --registry (default: Docker Hub naming)",
    "--compression": "with --push: how layers are compressed in the registry. gzip (default): every runtime pulls it; zstd: smaller and faster to unpack, "
    "for Docker 23+, containerd 1.5+ (Kubernetes) and podman, not Docker 20.10 (needs skopeo); both: the tags stay gzip and each also gets a zstd form, "
    "TAG-zstd",
    "--hold-moving-tags": "with --push: push the immutable tag only and record the moving ones (e.g. latest) in report.json (push.held_tags), for a release "
    "that moves them after a GPU proof of the pushed digest",
    "--platform": "the platform to build and validate (default: %(default)s); linux/arm64 runs under qemu on an amd64 host (scripts/prepare-host.sh --arm64) "
    "for the lines that list it (build.py list); all: every platform of the line, and with --push one multi-arch index under the line's tags",
    "--registry": "registry to push to, e.g. localhost:5000 (with --push)",
    "--repo": "repository name of the image (default: the matrix's project name)",
    "--ca-cert": "PEM bundle pip inside the build trusts (a TLS-intercepting proxy's CA); passed as a BuildKit secret, never stored in a layer (default: "
    "$BUILD_CA_CERT)",
    "--advisories": "OSV advisory records for PyPI (a folder, osv.dev's PyPI/all.zip or a .jsonl.gz) to audit the image's Python packages offline; "
    "high/critical findings fail validation unless in images/audit-allowlist.toml (default: $ADVISORY_DB, else the committed snapshot in images/advisories/)",
    "--verbose": "stream every build line, not only the steps",
    "--allow-cpu-validation": "on a host without a GPU, allow --push of an image validated on the CPU only (the report and the label "
    "io.proven-torch.gpu-validated say false)",
    "--report-dir": "where reports go (default: reports/)",
    "--check": "fail (exit 2) when a committed file is stale",
    "--markdown": "print the table as Markdown (the README's)",
    "list --json": "print the matrix as JSON (what CI's workflows read)",
    "verify --json": "print what was checked and found as JSON",
    "diff --json": "print the comparison as JSON (schema 1: stable; `regressions` names each)",
    "diff --markdown": "print a Markdown table fit for a pull request comment",
    "--default": "print the default variant's name (what scripts build)",
    "--here": "also say whether this host can build each line, and if not why and what to do (probes the wheel indexes, qemu, "
    "Docker and the GPU, a few seconds; plain list probes nothing)",
    "--base-image": "print the base image for PLATFORM (linux/amd64 or linux/arm64: docker-library's per-architecture name), what scripts/prepare-host.sh "
    "pulls or makes",
    "--pin": "print the matrix's requirement line for PACKAGE (from [packages] or a flavor's), e.g. gymnasium==X.Y.Z, or every line of a flavor when PACKAGE "
    "names one (rlhf); repeat it for several (the host venv shares them)",
    "--from": "OSV records for PyPI in any form --advisories takes: a folder (.yaml/.json, e.g. a git checkout of pypa/advisory-database), osv.dev's "
    "PyPI/all.zip, or a .jsonl.gz",
    "--as-of": "the records' date (default: the checkout's last commit)",
    "--source": "where the records came from, written into the snapshot (default: %(default)s)",
    "--line": "only this line (repeat for several; default: every base line of the matrix)",
    "--keep": "keep each image after its proof (default: remove it, to free disk)",
    "--sign-key-passphrase-file": "a file holding the passphrase of an encrypted --sign-key (or of the key keygen --encrypt "
    "writes); default: $PROVEN_TORCH_SIGN_KEY_PASSPHRASE. Never on the command line",
    "--encrypt": "encrypt the private key with a passphrase, from --sign-key-passphrase-file or $PROVEN_TORCH_SIGN_KEY_PASSPHRASE",
    "--expect-line": "fail unless the signed provenance names this line (e.g. 2.9-cu128): for references by digest, which name no tag",
    "--max-age": "fail when the deciding statements were signed more than DAYS days ago (default: %(default)s, the age at which "
    "advisory data counts as stale)",
    "--timeout": "seconds for everything the command asks of the registry (default: %(default)s); past it: exit 6",
    "--report": "the build's report.json (reports/<line>/<run>/report.json, with validation.json, facts.json and the SBOM beside it)",
    "--proof": "proof.json of `proof --out DIR` run on that very digest: its test result and benchmark are signed instead of the build's; "
    "refused unless it passed",
    "--prepare": "write what signing needs into DIR: statements.json for a signer apart (`attach` takes its answer) and "
    "cosign's predicates of the same statements (predicates.tsv); without --sign-key, only those (checked the same way)",
    "--children": "a multi-arch index: the folders `sign --prepare` wrote for each of its images (with --prepare: the index's "
    "statements, checked against the index the registry holds)",
    "image_a": "the image rolled out now: HOST/REPO:TAG or @sha256:... (an index: its --platform image)",
    "image_b": "the image to roll out instead",
    "--max-slowdown": "diff: the largest PPO slowdown of B on the same hardware that is no regression, a fraction (default: "
    "%(default)s, from the spread of repeated runs on one machine, docs/benchmarks.md)",
    "--prepared": "the folder `sign --prepare` wrote (statements.json)",
    "--signed": "the signer's answer (python -m pipeline.attest's JSON: keyid, envelopes, run, signed_at)",
    "--run-name": "a name for this signing run, signed as a label (e.g. the release workflow's run URL); the run's id and time are the signer's own",
    "signed_ref": "the pushed image by digest, HOST/REPO@sha256:<hex>",
    "--sign-key": "the private key (build.py keygen's, outside the checkout) that signs each pushed digest's statements (provenance, SBOM, "
    "test result, benchmark, vulnerabilities, VEX), attached in the registry; read only by the signer process (.venv-signer). build: "
    "with --push (default: $PROVEN_TORCH_SIGN_KEY; none: unsigned); sign: required (default: $PROVEN_TORCH_SIGN_KEY)",
    "directory": "an empty folder for the new key pair, outside the checkout (e.g. ~/.config/proven-torch)",
    "image_ref": "the pushed image, HOST/REPO:TAG or HOST/REPO@sha256:<hex>; a multi-arch index: every child is checked",
    "rebuild image_ref": "the pushed, signed image to rebuild, HOST/REPO:TAG or HOST/REPO@sha256:<hex> (an index: its amd64 image)",
    "rebuild --out": "where a rebuild that differs writes what differs in each layer: the paths (layer-N.txt), the differing "
    "files of both sides (layer-N/pushed, layer-N/rebuilt) and diffoscope's report on them; an empty or new folder "
    "(default: ./rebuild-report)",
    "rebuild --source": "build this checkout instead of a worktree of the signed revision (what a change to it would make differ)",
    "--key": "the public key (PEM, build.py keygen's .pub) the statements must be signed with; give it twice to accept either of two (a key rotation)",
    "--require-gpu": "fail unless the proof ran on a GPU (a CPU-only proof's WARNED result is then not enough)",
}

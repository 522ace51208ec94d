#!/usr/bin/env bash
# Prepare a host to build and test the images. Idempotent: every step checks
# first and does nothing when its piece is already there.
#
#   1. Docker Engine (Debian's docker.io) running, with a BuildKit-capable CLI
#   2. the base image named in images/variants.toml (pulled, or made reproducibly with
#      mmdebstrap on hosts that cannot reach a registry)
#   3. the host virtual environment .venv (scripts/host-venv.sh)
#   4. with --test-tools: a registry on 127.0.0.1:5000, OpenSSH client, Chromium, skopeo
#   5. with --arm64: qemu user emulation registered with binfmt_misc (flag F, so
#      containers and BuildKit use it) and the arm64 base image, made the same way
#      as the amd64 one (docker-library's per-architecture name: arm64v8/...)
#
# Needs root for the package installs and for starting dockerd; on a host where
# Docker already runs and the packages are present it needs nothing.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
TEST_TOOLS=0
ARM64=0
for arg in "$@"; do
    case $arg in
        --test-tools) TEST_TOOLS=1 ;;
        --arm64) ARM64=1 ;;
        *) printf 'prepare-host: unknown option %s (it takes --test-tools and --arm64)\n' "$arg" >&2; exit 2 ;;
    esac
done

STATE_DIR=${PROVEN_TORCH_STATE:-/var/lib/proven-torch}
LOG_DIR=${STATE_DIR}/logs
REGISTRY_ADDR=${REGISTRY_ADDR:-127.0.0.1:5000}

say() { printf '==> %s\n' "$*"; }
die() { printf 'prepare-host: %s\n' "$*" >&2; exit 1; }

need_apt=()
have() { command -v "$1" >/dev/null 2>&1; }

have dockerd || need_apt+=(docker.io)
if (( TEST_TOOLS )); then
    have docker-registry || need_apt+=(docker-registry)
    have ssh || need_apt+=(openssh-client)
    have ssh-keygen || need_apt+=(openssh-client)
    have chromium || need_apt+=(chromium)
    have Xvfb || need_apt+=(xvfb)        # the client's display of the ssh -X test (tests/image/test_desktop.py)
    have xwininfo || need_apt+=(x11-utils)   # and what it reads that display with
    have skopeo || need_apt+=(skopeo)  # zstd pushes (build.py --compression) and their tests
    have zstd || need_apt+=(zstd)      # build.py rebuild reads a zstd layer that differs (tests/unit/test_rebuild_files.py)
    have faketime || need_apt+=(faketime)  # a signer whose clock is wrong (tests/image/test_signed_proof.py)
    have rsync || need_apt+=(rsync)    # the workstation tests copy with rsync over SSH
fi
have mmdebstrap || need_apt+=(mmdebstrap)
if (( ARM64 )); then
    have qemu-aarch64-static || need_apt+=(qemu-user-static)
    have update-binfmts || need_apt+=(binfmt-support)
fi

if ((${#need_apt[@]})); then
    [[ $(id -u) == 0 ]] || die "missing ${need_apt[*]}; install them (apt-get install ${need_apt[*]}) or rerun as root"
    say "installing ${need_apt[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

mkdir -p "$LOG_DIR"

# --- 1. Docker Engine ------------------------------------------------------
# A client is on PATH but a daemon may not run; start Debian's dockerd.
if ! docker info >/dev/null 2>&1 && ! /usr/bin/docker info >/dev/null 2>&1; then
    [[ $(id -u) == 0 ]] || die "Docker daemon is not running and this user cannot start it; start Docker and rerun"
    say "starting dockerd (log: $LOG_DIR/dockerd.log)"
    nohup dockerd >>"$LOG_DIR/dockerd.log" 2>&1 &  # appended: an earlier run's errors stay readable
    for _ in $(seq 1 60); do
        /usr/bin/docker info >/dev/null 2>&1 && break
        sleep 1
    done
    /usr/bin/docker info >/dev/null 2>&1 || die "dockerd did not come up within 60 s; see $LOG_DIR/dockerd.log"
fi
say "Docker Engine: $(/usr/bin/docker version --format '{{.Server.Version}}' 2>/dev/null || docker version --format '{{.Server.Version}}')"

DOCKER=docker
docker info >/dev/null 2>&1 || DOCKER=/usr/bin/docker

# --- disk: room for a cold build (and the tests) before anything starts --------
# A full disk fails a build or a test session halfway, as dozens of unrelated errors; say it first, once.
# The need is measured (docs/ci.md): a cold `.ci/run` grew the disk under Docker by 14.9 GB at its peak
# (2026-12-06: the default image and its rlhf flavor built, pushed, and the tests' small images).
docker_root=$($DOCKER info --format '{{.DockerRootDir}}')
free_gb=$(( $(df -Pk "$docker_root" | awk 'NR == 2 { print $4 }') / 1048576 ))
need_gb=${PROVEN_TORCH_NEED_GB:-$(( TEST_TOOLS ? 20 : 12 ))}
what="a cold build"
(( TEST_TOOLS )) && what="a cold build and the tests"
(( free_gb >= need_gb )) || die "only $free_gb GB free under $docker_root, and $what take about $need_gb GB: free some (\`docker image prune\`, \`docker builder prune\`; the test registry's blobs are under $STATE_DIR/registry; Docker 20.10 keeps a copy of each layer built again, which only removing $docker_root with dockerd stopped frees: docs/ci.md) and rerun (PROVEN_TORCH_NEED_GB sets the figure)"
say "disk: $free_gb GB free under $docker_root (needs about $need_gb)"

# --- 3. host virtual environment (before 2: reading the matrix needs Python only)
bash scripts/host-venv.sh

# --- 2. base image -----------------------------------------------------------
BASE_SUITE=$(.venv/bin/python -c 'from pipeline.variants import load_matrix; print(load_matrix().base_suite)')

# make_base IMAGE ARCH PLATFORM: pull IMAGE, or make it with mmdebstrap (minbase) for ARCH and load it
# as a PLATFORM image (a one-line BuildKit build FROM scratch, so the image says its architecture without
# the experimental `docker import --platform`). Made reproducibly (docs/supply-chain.md, "Rebuild it
# yourself"): SOURCE_DATE_EPOCH is the date of the suite's Release file on the mirror, to which mmdebstrap
# sets every time, so two hosts that make it from the same state of the mirror get the same archive; the
# image's config is then written again at that time (pipeline/rebuild_config.py): the same image ID.
make_base() {
    local image=$1 arch=$2 platform=$3
    $DOCKER image inspect "$image" >/dev/null 2>&1 && return 0
    if $DOCKER pull --platform "$platform" "$image" >/dev/null 2>&1; then
        say "pulled $image"
        return 0
    fi
    local mirror=http://deb.debian.org/debian released epoch work built id
    released=$(curl -fsS --max-time 60 "$mirror/dists/$BASE_SUITE/Release" | sed -n 's/^Date: //p' | head -1)
    epoch=$(date -u -d "$released" +%s 2>/dev/null) || die "cannot read the date of $mirror/dists/$BASE_SUITE/Release"
    say "no registry reachable: making $image with mmdebstrap ($BASE_SUITE, $arch, minbase, as of the mirror's $released)"
    work=$(mktemp -d)
    # Keep the image slim the way the official -slim images do: no package archives, no package lists.
    # shellcheck disable=SC2016 # "$1" is mmdebstrap's: the hook's root folder
    SOURCE_DATE_EPOCH=$epoch mmdebstrap --variant=minbase --mode=root --arch="$arch" \
        --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' \
        "$BASE_SUITE" "$work/rootfs.tar" "$mirror" >"$LOG_DIR/mmdebstrap-$arch.log" 2>&1 \
        || die "mmdebstrap ($arch) failed; see $LOG_DIR/mmdebstrap-$arch.log"
    printf 'FROM scratch\nADD rootfs.tar /\nCMD ["bash"]\n' >"$work/Dockerfile"
    # Debian's 20.10 CLI (/usr/bin/docker) builds with BuildKit without the buildx plugin; a newer
    # CLI earlier on PATH may not.
    local cli=$DOCKER
    [[ -x /usr/bin/docker ]] && cli=/usr/bin/docker
    built=$(DOCKER_BUILDKIT=1 $cli build -q --platform "$platform" "$work") || die "loading the $arch base as $image failed"
    id=$(.venv/bin/python -c 'import sys, docker; from pipeline.rebuild_config import normalise
print(normalise(docker.from_env(), sys.argv[1], sys.argv[2]))' "$built" "$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)") \
        || die "writing the $arch base's config again failed"
    $DOCKER tag "$id" "$image" || die "tagging the $arch base as $image failed"
    rm -rf "$work"
    say "made $image ($platform, ${id:7:12})"
}
make_base "$(.venv/bin/python build.py list --base-image linux/amd64)" amd64 linux/amd64

# --- 5. arm64: qemu user emulation and the arm64 base ---------------------------
if (( ARM64 )); then
    if [[ ! -e /proc/sys/fs/binfmt_misc/register ]]; then
        [[ $(id -u) == 0 ]] || die "binfmt_misc is not mounted; rerun as root"
        mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    fi
    if ! grep -qs '^flags: .*F' /proc/sys/fs/binfmt_misc/qemu-aarch64; then
        [[ $(id -u) == 0 ]] || die "qemu-aarch64 is not registered with binfmt_misc; rerun as root"
        update-binfmts --enable qemu-aarch64 || die "update-binfmts --enable qemu-aarch64 failed"
    fi
    grep -qs '^flags: .*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 \
        || die "qemu-aarch64 is registered without the F flag; containers cannot use it (reinstall qemu-user-static)"
    say "arm64 emulation: $(qemu-aarch64-static --version | head -1)"
    make_base "$(.venv/bin/python build.py list --base-image linux/arm64)" arm64 linux/arm64
fi

# --- 4. test tools: a real registry on 127.0.0.1 -----------------------------
if (( TEST_TOOLS )); then
    if ! curl -fsS "http://$REGISTRY_ADDR/v2/" >/dev/null 2>&1; then
        mkdir -p "$STATE_DIR/registry"
        cat >"$STATE_DIR/registry.yml" <<EOF
version: 0.1
storage:
  filesystem:
    rootdirectory: $STATE_DIR/registry
  delete:
    enabled: true
http:
  addr: $REGISTRY_ADDR
EOF
        say "starting docker-registry on $REGISTRY_ADDR (log: $LOG_DIR/registry.log)"
        nohup docker-registry serve "$STATE_DIR/registry.yml" >"$LOG_DIR/registry.log" 2>&1 &
        for _ in $(seq 1 30); do
            curl -fsS "http://$REGISTRY_ADDR/v2/" >/dev/null 2>&1 && break
            sleep 1
        done
        curl -fsS "http://$REGISTRY_ADDR/v2/" >/dev/null 2>&1 || die "registry did not answer on $REGISTRY_ADDR; see $LOG_DIR/registry.log"
    fi
    say "registry: http://$REGISTRY_ADDR"
fi
say "host ready ($ROOT)"

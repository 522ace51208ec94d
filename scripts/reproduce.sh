#!/usr/bin/env bash
# Two cold builds of one line give one image (docs/supply-chain.md, "Rebuild it yourself"): BuildKit's
# cache (its pip cache mount with it) and the line's images are emptied before each build, which then
# runs at another time of day; the base image is kept (the same base is a condition of the claim).
# Prints each build's validated image ID and time, REPRODUCED and exit 0 when they are one, else
# DIFFERS and exit 1. Weekly in lines.yml (make reproduce); by hand: make reproduce [CUDA=13.0].
#   CA_CERT=FILE  the proxy's CA for pip (as make image)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
REGISTRY_ADDR=${REGISTRY_ADDR:-127.0.0.1:5000}
args=()
[[ -n ${CUDA:-} ]] && args+=(--cuda "$CUDA")
[[ -n ${CA_CERT:-} ]] && args+=(--ca-cert "$CA_CERT")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
repo=$($PY -c 'from pipeline.variants import load_matrix; print(load_matrix().name)')
# Both builds must be of one revision, committed: a build of a checkout with changes is labelled -dirty, and
# a commit between the builds changes the revision label (the layers may still be the same).
checkout() { git rev-parse HEAD; git status --porcelain --untracked-files=no; }
at=$(checkout)
if [[ -n $(git status --porcelain --untracked-files=no) ]]; then
    echo "reproduce: the checkout has uncommitted changes (git status): commit or stash them, then run this again" >&2
    exit 2
fi
ids=()
for run in 1 2; do
    docker builder prune -af >/dev/null
    # the line's images by name (an untagged one, <none>, by its ID), then the dangling ones; the base stays
    docker images --format '{{.Repository}}:{{.Tag}} {{.ID}}' | { grep -E "^(localhost:[0-9]+/)?${repo}(-[a-z-]+)?:" | grep -v '^proven-torch-reproduce:' || true; } \
        | awk '{ print ($1 ~ /:<none>$/) ? $2 : $1 }' | sort -u | xargs -r docker rmi -f >/dev/null
    docker image prune -f >/dev/null
    started=$(date +%s)
    "$PY" build.py "${args[@]}" --report-dir "$out/$run" | sed "s/^/[build $run] /"
    id=$("$PY" -c 'import json, sys, glob; print(json.load(open(glob.glob(sys.argv[1] + "/*/*/report.json")[0]))["validated_image_id"])' "$out/$run")
    echo "==> build $run: $id in $(($(date +%s) - started)) s, cold"
    ids+=("$id")
    if [[ $(checkout) != "$at" ]]; then
        echo "reproduce: the checkout moved during build $run (a commit or an edit): the builds are of two revisions; run this again on a checkout left alone" >&2
        exit 2
    fi
    docker tag "$id" "proven-torch-reproduce:build-$run"  # kept to compare (BuildKit's cache is pruned, not this)
done
if [[ ${ids[0]} == "${ids[1]}" ]]; then
    echo "REPRODUCED: ${ids[0]}"
    docker rmi proven-torch-reproduce:build-1 proven-torch-reproduce:build-2 >/dev/null
else
    echo "DIFFERS: ${ids[0]} then ${ids[1]}; the layers that differ (both images kept as proven-torch-reproduce:build-1 and -2):"
    paste <(docker image inspect "${ids[0]}" --format '{{range .RootFS.Layers}}{{println .}}{{end}}') \
        <(docker image inspect "${ids[1]}" --format '{{range .RootFS.Layers}}{{println .}}{{end}}') \
        | awk '$1 != $2 { print "  layer " NR ": " substr($1, 8, 12) " then " substr($2, 8, 12) }'
    # the same layers and another image: the settings differ (labels, variables, history); say which
    diff <(docker image inspect "${ids[0]}" --format '{{json .Config}}' | "$PY" -m json.tool --sort-keys) \
        <(docker image inspect "${ids[1]}" --format '{{json .Config}}' | "$PY" -m json.tool --sort-keys) \
        | sed -n 's/^\([<>]\) */  settings, build \1: /p' | sed 's/build <:/build 1:/; s/build >:/build 2:/' || true
    # The files behind each such layer (the first three), as `build.py rebuild` names them (pipeline/rebuild_files.py): build 1
    # goes to the registry on 127.0.0.1 (scripts/prepare-host.sh --test-tools starts it), build 2 is read
    # from `docker save`; the paths, both sides' files and diffoscope's report go to ./reproduce-report.
    if curl -fsS --max-time 5 "http://$REGISTRY_ADDR/v2/" >/dev/null 2>&1; then
        rm -rf reproduce-report  # this script's own folder: an earlier run's files would mix in
        docker tag "${ids[0]}" "$REGISTRY_ADDR/proven-torch-reproduce:build-1"
        docker push -q "$REGISTRY_ADDR/proven-torch-reproduce:build-1" >/dev/null
        "$PY" - "$REGISTRY_ADDR/proven-torch-reproduce:build-1" "${ids[0]}" "${ids[1]}" <<'PY'
import sys
from pathlib import Path
import docker
from pipeline import rebuild_files, registry
ref, first, second = sys.argv[1:]
engine, pushed = docker.from_env(), registry.parse_ref(ref)
theirs, ours = (engine.images.get(i).attrs["RootFS"]["Layers"] for i in (first, second))
found = registry.Registry(pushed, registry.Deadline(60)).manifest("build-1")
if found is None:
    sys.exit(f"reproduce: {ref} is not in the registry after its push; the files are not named")
layers = registry.descriptors(registry.as_dict(found[0], f"{ref}'s manifest").get("layers"), f"{ref}'s manifest")
pairs = rebuild_files.differing(layers, theirs, ours)
print("\n".join(f"  {line}" for line in rebuild_files.name_files(pushed, engine, second, pairs, Path("reproduce-report"))))
PY
    else
        echo "  (no registry on $REGISTRY_ADDR to name the files: run scripts/prepare-host.sh --test-tools, then this again)"
    fi
    exit 1
fi

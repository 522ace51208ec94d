#!/usr/bin/env bash
# The release's record of one pushed build (.github/workflows/release.yml): from the report folder that
# `build.py --push --hold-moving-tags --report-dir RUN` left, write OUT (release/release.json) with the
# image, the pushed digest, its immutable tag, the held tags and the report's path, after checking that
# the build pushed exactly one digest and pushed it natively (nothing emulated).
#   release-record.sh RUN VARIANT IMAGE ARCH OUT
set -euo pipefail
run=$1 variant=$2 image=$3 arch=$4 out=$5
shopt -s nullglob
reports=("$run/$variant"/*/report.json "$run/$variant"/*/"$arch"/report.json)  # a multi-arch line: per architecture
if (( ${#reports[@]} != 1 )); then
    echo "::error::expected one $arch report.json under $run/$variant/, found ${#reports[@]}" >&2
    exit 1
fi
mkdir -p "$(dirname "$out")"
python3 - "${reports[0]}" "$image" "$out" <<'PY'
import json, re, sys
path, image, out = sys.argv[1:]
report = json.load(open(path))
push, validation = report.get("push") or {}, report.get("validation") or {}
refs, held = push.get("refs") or {}, push.get("held_tags")
if report.get("status") != "pushed" or len(refs) != 1 or held is None or validation.get("emulated") is not False:
    sys.exit(f"{path}: want one native push with held tags; got {report.get('status')!r}, {refs}, {held}, emulated={validation.get('emulated')}")
((ref, digest),) = refs.items()
pushed, _, tag = ref.rpartition(":")
bad = [t for t in [tag, *held] if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", t)]
if pushed != image or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest) or bad:
    sys.exit(f"{path}: pushed {pushed} (want {image}), digest {digest!r}, tags {bad}")
record = {"variant": report["variant"], "image": image, "tag": tag, "digest": digest, "held_tags": held, "report": path}
json.dump(record, open(out, "w"), indent=2)
print(json.dumps(record, indent=2))
PY

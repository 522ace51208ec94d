#!/usr/bin/env bash
# The README's test command (make test) after the host is prepared: the unit group (no Docker:
# pure logic and host processes), then the image tests that need no default image (marked
# `beside` by tests/conftest.py: small images and the registry), run beside the image group
# (the real Docker Engine and registry, on the default image the session builds), since on
# 2 cores the image group's first minutes are mostly downloads and disk and its later ones
# mostly waits. The unit group's output is shown when both are done; the last line adds both
# up, and the exit status fails if either group failed. Extra arguments go to both pytest runs.
#   RUN_TESTS_SERIAL=1  one group after the other (for timing one group alone)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
PY=.venv/bin/python
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

elsewhere="not gpu and not arm64 and not lines"  # their own runners and make targets
# a temp folder each: two pytests at once (tests/conftest.py runs the `beside` tests last)
unit=(-m "unit or (beside and $elsewhere)" --junitxml "$out/unit.xml" --basetemp "$out/unit-tmp" "$@")
image=(-m "image and not beside and $elsewhere" --junitxml "$out/image.xml" --basetemp "$out/image-tmp" "$@")

if [[ ${RUN_TESTS_SERIAL:-0} == 1 ]]; then
    "$PY" -m pytest "${unit[@]}"
    unit_rc=$?
    "$PY" -m pytest "${image[@]}"
    image_rc=$?
else
    "$PY" -m pytest "${unit[@]}" >"$out/unit.log" 2>&1 &
    unit_pid=$!
    "$PY" -m pytest "${image[@]}"
    image_rc=$?
    wait "$unit_pid"
    unit_rc=$?
    printf '\n==> the unit group and the image tests marked beside, run beside the image group:\n'
    cat "$out/unit.log"
fi

"$PY" - "$out/unit.xml" "$out/image.xml" "$unit_rc" "$image_rc" <<'PY'
import sys
import xml.etree.ElementTree as ET

passed = failed = skipped = 0
for path in sys.argv[1:3]:
    try:
        suite = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        failed += 1  # a group that wrote no report did not pass
        continue
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    total, fails, errors, skips = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    passed += total - fails - errors - skips
    failed += fails + errors
    skipped += skips
codes = [int(c) for c in sys.argv[3:5]]
if failed == 0 and any(codes):
    failed = 1  # pytest failed outside any test (collection, an internal error)
print(f"unit {codes[0]}, image {codes[1]} (exit statuses)")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
(( unit_rc == 0 && image_rc == 0 ))

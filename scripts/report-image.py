#!/usr/bin/env python3
"""Print the validated (stamped) image ID of the one build under a report folder.

    python scripts/report-image.py REPORT_DIR

What the GPU workflow hands to `pytest -m gpu` (PROVEN_TORCH_TEST_IMAGE), so the tests run on
the image build.py just validated instead of building another. Exit 1 with one line when the
folder holds no passed build, or more than one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.html_report import line_reports  # noqa: E402


def validated_image(report_dir: Path) -> str:
    reports = [r for line in sorted(p for p in report_dir.iterdir() if p.is_dir()) for r in line_reports(line)]
    passed = [json.loads(r.read_text()) for r in reports]
    passed = [r for r in passed if r.get("stamped_image_id") and r.get("status") in ("validated", "pushed")]
    if len(passed) != 1:
        raise SystemExit(f"report-image: want one validated build under {report_dir}, found {len(passed)}")
    return passed[0]["stamped_image_id"]


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        raise SystemExit("usage: report-image.py REPORT_DIR (a --report-dir of build.py)")
    print(validated_image(Path(sys.argv[1])))

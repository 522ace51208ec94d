"""The human report: a static HTML page per build, and an index of all of them.

Each page sits next to its report.json and shows versions, image IDs and
digests, tags, sizes, every smoke check, the PPO numbers with the learning
curve, the hygiene scan and the SBOM/audit summaries. No JavaScript, no network.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from pipeline.validation.size import GB

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:60rem;color:#222}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%}td,th{border:1px solid #ddd;padding:.3rem .5rem;text-align:left;vertical-align:top}
.pass{color:#137333;font-weight:600}.fail{color:#c5221f;font-weight:600}.skip{color:#b06000;font-weight:600}
code{font-size:.9em}img{max-width:100%;border:1px solid #ddd}
"""


def _e(value) -> str:
    if isinstance(value, float):
        value = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
    return html.escape("" if value is None else str(value))


def _join(*values) -> str:
    return " / ".join(_e(v) for v in values)


def _rows(pairs) -> str:
    return "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in pairs)


def _status(status: str) -> str:
    css = {"pass": "pass", "passed": "pass", "pushed": "pass", "validated": "pass", "fail": "fail", "failed": "fail"}.get(
        status, "skip"
    )
    return f'<span class="{css}">{_e(status)}</span>'


def _signed(push: dict) -> str:
    """Which key signed the pushed digests, or why they are unsigned (pipeline.publish.Pushed)."""
    signatures = push.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        return f"<span class='skip'>{_e((signatures or {}).get('reason', 'unsigned'))}</span>"
    kinds = ", ".join(signatures[0].get("statements", {}))
    return "<br>".join(
        f"<code>{_e(s['subject'])}</code>: key <code>{_e(s['keyid'][:16])}…</code> ({_e(kinds)})" for s in signatures
    )


def _heading_status(report: dict) -> str:
    """'pushed' or 'validated' in green only when a GPU ran the checks; CPU-only says so, in amber."""
    status = report.get("status", "?")
    if status in ("validated", "pushed") and not report.get("gpu"):
        return f'<span class="skip">{_e(status)} on CPU only (GPU checks not run)</span>'
    return _status(status)


def _irregular(entries: list[dict] | None, key: str) -> str:
    """'none', or one line per record: ID, package, what was read (or the raw text)."""
    if not entries:
        return "none"
    return "<br>".join(f"<code>{_e(e['id'])}</code> {_e(e['package'])}: {_e('; '.join(e[key]))}" for e in entries)


def _audit_section(audit: dict | None) -> str:
    if not audit:
        return "<p>not run</p>"
    age = audit.get("age_days")
    as_of = _e(audit.get("as_of") or "unknown date") + (f" ({age} days old)" if age is not None else "")
    if audit.get("stale"):
        as_of += " <span class='skip'>stale: audit again with fresh advisories</span>"
    summary = [
        ("result", _status("fail" if audit.get("status") == "fail" else ("stale" if audit.get("stale") else "pass"))),
        ("advisory database", f"<code>{_e(audit.get('database'))}</code>, {_e(audit.get('records'))} records"),
        ("as of", as_of),
        ("Python packages checked", _e(audit.get("packages"))),
        ("read by the irregular-version rule", _irregular(audit.get("read_by_rule"), "read")),
        ("unreadable (counted as affected)", _irregular(audit.get("unreadable"), "raw")),
    ]
    table = "<table id='audit'>" + _rows(summary) + "</table>"
    rows = [(f, "; ".join(f.get("unreadable", []))) for f in audit.get("findings", [])] + [
        (
            f,
            f"accepted until {f['expires']}: {f['reason']}" + (f"; affects: {f['affects']}" if f.get("affects") else ""),
        )
        for f in audit.get("allowed", [])
    ]
    if not rows:
        return table + "<p class='pass'>no known advisory matches a package in the image</p>"
    return (
        table
        + "<table id='findings'><tr><th>advisory</th><th>package</th><th>severity</th><th>fixed</th><th>summary</th></tr>"
        + "".join(
            f"<tr><td><code>{_e(f['id'])}</code><br>{_e(', '.join(f.get('aliases', [])[:3]))}</td><td>{_e(f['package'])} {_e(f['version'])}</td>"
            f"<td>{_e(f['severity'])}</td><td>{_e(f.get('fixed'))}</td><td>{_e(f.get('summary'))} {_e(note)}</td></tr>"
            for f, note in rows
        )
        + "</table>"
    )


def render_page(report: dict, run_dir: Path) -> str:
    validation = report.get("validation") or {}
    smoke = validation.get("smoke") or {}
    ppo = validation.get("ppo") or {}
    size = validation.get("size") or {}
    push = report.get("push") or {}
    facts = smoke.get("facts") or {}
    pins = report.get("pins") or {}
    title = f"{report.get('variant')} · torch {pins.get('torch')} · CUDA {pins.get('cuda')}"
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1 id='title'>{_e(title)}: {_heading_status(report)}</h1>",
    ]
    if report.get("error"):
        parts.append(f"<p class='fail' id='error'>{_e(report['error'])}</p>")
    image_rows = [
        ("tags", "<br>".join(f"<code>{_e(t)}</code>" for t in report.get("tags", [])) or "none (not validated)"),
        ("image ID (stamped, tagged, pushed)", f"<code>{_e(report.get('stamped_image_id'))}</code>"),
        ("validated image ID", f"<code>{_e(report.get('validated_image_id'))}</code>"),
        (
            "pushed",
            "<br>".join(f"<code>{_e(r)}@{_e(d)}</code>" for r, d in (report.get("pushed") or {}).items()) or "not pushed",
        ),
        ("signed", _signed(push) if push else "not pushed"),
        (
            "validated on",
            _e(validation.get("validated_on"))
            if validation.get("validated_on")
            else "GPU"
            if report.get("gpu")
            else "CPU only (no GPU on the build host)",
        ),
        ("created / revision", f"{_e(report.get('created'))} / <code>{_e(report.get('revision'))}</code>"),
        ("build time", f"{_e(report.get('build_seconds'))} s"),
    ]
    parts.append("<h2>Image</h2><table>" + _rows(image_rows) + "</table>")
    stages = validation.get("stages") or []
    if stages:
        parts.append(
            "<h2>Validation stages</h2><table id='stages'>"
            + _rows([(stage["name"], _status(stage["status"])) for stage in stages])
            + "</table>"
            + (f"<p id='verdict'><code>{_e(validation.get('verdict'))}</code></p>" if validation.get("verdict") else "")
        )
    parts.append("<h2>Versions</h2><table><tr><th></th><th>pinned</th><th>in the image</th></tr>")
    for key in ("torch", "torchvision", "torchaudio", "cuda", "cudnn", "nccl", "python"):
        parts.append(f"<tr><th>{key}</th><td>{_e(pins.get(key))}</td><td>{_e(facts.get(key))}</td></tr>")
    parts.append("</table>")
    if size:
        compressed = ", ".join(f"{n / GB:.2f} GB ({form})" for form, n in (push.get("compressed_bytes") or {}).items())
        size_rows = [
            ("uncompressed", f"{size.get('uncompressed_bytes', 0) / GB:.2f} GB (budget {_e(pins.get('size_budget_gb'))} GB)"),
            ("compressed (registry)", compressed or "not pushed"),
            ("layers", _e(size.get("layers"))),
        ]
        parts.append(
            "<h2>Size</h2><table>"
            + _rows(size_rows)
            + "</table><table><tr><th>largest layers</th><th>bytes</th></tr>"
            + "".join(
                f"<tr><td>{_e(layer.get('name') or layer['created_by'][:110])}</td><td>{layer['bytes'] / GB:.2f} GB</td></tr>"
                for layer in size.get("largest_layers", [])
            )
            + "</table>"
        )
    parts.append("<h2>Smoke checks</h2>")
    if smoke.get("checks"):
        parts.append("<table id='smoke'><tr><th>check</th><th>status</th><th>detail</th><th>s</th></tr>")
        for check in smoke["checks"]:
            parts.append(
                f"<tr><td>{_e(check.get('name'))}</td><td>{_status(check.get('status', '?'))}</td>"
                f"<td>{_e(check.get('detail'))}</td><td>{_e(check.get('seconds'))}</td></tr>"
            )
        parts.append("</table>")
    else:
        parts.append("<p>not run</p>")
    parts.append("<h2>PPO benchmark</h2>")
    if ppo:
        ppo_rows = [
            ("solved", _status("pass" if ppo.get("solved") else "fail")),
            (
                "env / backend / device",
                _e(f"{ppo.get('env_id')} / {ppo.get('backend')} / {ppo.get('device')} {ppo.get('gpu_name') or ''}"),
            ),
            ("final mean return / target", _join(ppo.get("final_mean_return"), ppo.get("target_return"))),
            ("env steps / seconds to target", _join(ppo.get("steps_to_target"), ppo.get("seconds_to_target"))),
            (
                "SPS end to end / rollout / update",
                _join(ppo.get("sps_end_to_end"), ppo.get("sps_rollout"), ppo.get("sps_update")),
            ),
            ("GPU/CPU ratio (end-to-end SPS)", _e(validation.get("gpu_cpu_sps_ratio") or "n/a (no GPU)")),
        ]
        parts.append("<table id='ppo'>" + _rows(ppo_rows) + "</table>")
        if (run_dir / "ppo" / "learning_curve.png").exists():
            parts.append("<p><img id='curve' src='ppo/learning_curve.png' alt='learning curve'></p>")
    else:
        parts.append("<p>not run</p>")
    rlhf = (validation.get("proof") or {}).get("rlhf")
    if rlhf:  # the rlhf flavor's gate, beside the PPO curve
        rlhf_rows = [
            ("passed", _status("pass" if rlhf.get("passed") else "fail")),
            ("mean reward, first / last window", _join(rlhf.get("first_window_mean"), rlhf.get("last_window_mean"))),
            ("gain / required", _join(rlhf.get("gain"), rlhf.get("min_gain"))),
            ("failure", _e(rlhf.get("failure") or "none")),
        ]
        parts.append("<h2>RLHF gate (GRPO)</h2><table id='rlhf'>" + _rows(rlhf_rows) + "</table>")
        if (run_dir / "rlhf" / "reward_curve.png").exists():
            parts.append("<p><img id='reward-curve' src='rlhf/reward_curve.png' alt='reward curve'></p>")
    hygiene = validation.get("hygiene")
    parts.append("<h2>Hygiene scan</h2>")
    parts.append(
        "<p class='pass'>clean: no keys, tokens, build CA, .git or pip caches</p>"
        if hygiene == []
        else "<ul>" + "".join(f"<li class='fail'>{_e(f)}</li>" for f in hygiene or []) + "</ul>"
        if hygiene
        else "<p>not run</p>"
    )
    sbom = validation.get("sbom")
    parts.append("<h2>SBOM</h2>" + (f"<pre>{_e(json.dumps(sbom, indent=1))}</pre>" if sbom else "<p>not produced</p>"))
    parts.append("<h2>Vulnerability audit</h2>" + _audit_section(validation.get("audit")))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_page(report_path: Path) -> Path:
    report = json.loads(report_path.read_text())
    page = report_path.with_name("report.html")
    page.write_text(render_page(report, report_path.parent))
    return page


def line_reports(line_dir: Path) -> list[Path]:
    """A line's reports, oldest first: RUN/report.json, and RUN/ARCH/report.json for a multi-arch line."""
    return sorted(
        [*line_dir.glob("*/report.json"), *line_dir.glob("*/*/report.json")], key=lambda p: p.relative_to(line_dir).parts
    )


def write_index(report_dir: Path) -> Path:
    """reports/index.html: every report under report_dir, newest first."""
    rows = []
    line_dirs = [d for d in report_dir.iterdir() if d.is_dir()] if report_dir.is_dir() else []
    for path in sorted((p for d in line_dirs for p in line_reports(d)), reverse=True):
        try:
            report = json.loads(path.read_text())
        except ValueError:
            continue
        page = write_page(path)
        run = "/".join(path.parent.relative_to(report_dir).parts[1:])  # RUN, or RUN/ARCH for a multi-arch line
        rows.append(
            f"<tr><td><a href='{_e(page.relative_to(report_dir))}'>{_e(run)}</a></td><td>{_e(report.get('variant'))}</td>"
            f"<td>{_status(report.get('status', '?'))}</td><td>{'GPU' if report.get('gpu') else 'CPU'}</td>"
            f"<td>{'<br>'.join(_e(t) for t in report.get('tags', []))}</td></tr>"
        )
    index = report_dir / "index.html"
    report_dir.mkdir(parents=True, exist_ok=True)
    index.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>proven-torch reports</title><style>{_STYLE}</style></head><body>"
        "<h1>Validation reports</h1><table id='reports'><tr><th>build</th><th>variant</th><th>status</th><th>validated on</th><th>tags</th></tr>"
        + "".join(rows)
        + "</table></body></html>"
    )
    return index


def rebuild_index(report_dir: Path) -> list[str]:
    """`build.py report`: every report's page and the index, written again; the line to print."""
    return [f"wrote {write_index(report_dir)}"]

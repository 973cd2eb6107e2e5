"""How a gate report reads: plain text for a terminal or CI log, markdown for a pull-request
comment, JSON for tools. The verdict comes first, then only the rows that block, the rest as
counts. What the report holds: :class:`regress.gate.GateReport`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from regress.confirm import Confirmation

if TYPE_CHECKING:
    from regress.gate import GateReport

_MAX_TABLE_ROWS = 60  # a PR comment is limited to 65536 characters


def _fmt_value(value: float, unit: str | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if unit == "seconds":
        for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
            if abs(value) >= scale:
                return f"{value / scale:.3g} {name}"
        return f"{value / 1e-9:.3g} ns"
    if unit == "bytes":
        for scale, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if abs(value) >= scale:
                return f"{value / scale:.3g} {name}"
        return f"{value:.0f} B"
    if unit in ("fraction", "relative", "count", None, "unit"):
        return f"{value:.4g}"
    return f"{value:.4g} {unit}"


def _fmt_ratio(ratio: float) -> str:
    if ratio is None or math.isnan(ratio):
        return "—"
    return "∞" if math.isinf(ratio) else f"{ratio:.3f}×"


def _fmt_significance(row: pd.Series) -> str:
    test = row["test"]
    if test == "mann-whitney":
        return f"p={row['p_value']:.2g}"
    if test == "ci-overlap":
        return "CIs apart" if row["significant"] else "CIs overlap"
    if test == "ratio-only":
        return "no stats"
    if test == "threshold":
        return "exact"
    return "—"


def _fmt_config_change(row: pd.Series) -> str:
    """Whether a config change explains the row: "yes: forward A → B", "no", "unknown"
    (launches not recorded) or "—" (a peer's row: safeattn's configs do not touch it)."""
    if row["peer"]:
        return "—"
    change = row.get("config_change")
    if change is None or (isinstance(change, float) and math.isnan(change)):
        return "unknown"
    return f"yes: {change}" if change else "no"


def _table_rows(rows: pd.DataFrame, multi_machine: bool) -> list[list[str]]:
    out = []
    for _, r in rows.iterrows():
        cells = [r["verdict"], f"`{r['benchmark']}`", r["param_key"] or "—",
                 _fmt_value(r["base_value"], r["unit"]), _fmt_value(r["head_value"], r["unit"]),
                 _fmt_ratio(r["ratio"]), _fmt_significance(r), _fmt_config_change(r),
                 r["reason"]]  # fmt: skip
        if multi_machine:
            cells.insert(1, r["machine"])
        out.append(cells)
    return out


def _headers(multi_machine: bool) -> list[str]:
    cols = ["verdict", "benchmark", "parameters", "base", "head", "ratio (>1 worse)",
            "confidence", "config change", "why"]  # fmt: skip
    if multi_machine:
        cols.insert(1, "machine")
    return cols


def _md_table(rows: pd.DataFrame, multi_machine: bool) -> list[str]:
    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    shown = rows.head(_MAX_TABLE_ROWS)
    lines = [
        "| " + " | ".join(_headers(multi_machine)) + " |",
        "|" + "---|" * len(_headers(multi_machine)),
    ]
    lines += [
        "| " + " | ".join(cell(c) for c in cells) + " |"
        for cells in _table_rows(shown, multi_machine)
    ]
    if len(rows) > len(shown):
        lines.append(f"\n… and {len(rows) - len(shown)} more (run with --format json for all)")
    return lines


def _verdict_summary(report: GateReport) -> str:
    counts = report.rows["verdict"].value_counts()
    plural = {"regression": "regressions", "failure": "failures", "missing": "missing"}
    parts = [
        f"{counts[v]} {v if counts[v] == 1 else plural[v]}"
        for v in ("regression", "failure", "missing")
        if v in counts
    ]
    summary = ", ".join(parts) if parts else "no regressions"
    cleared = sum(not c.confirmed for c in report.confirmations or [])
    if cleared:  # a PASS that --confirm made: say so in the verdict line
        summary += f" ({cleared} flagged row{'s' if cleared > 1 else ''} cleared by re-measurement)"
    return summary


def _sections(report: GateReport) -> dict[str, pd.DataFrame]:
    rows = report.rows
    order = {"failure": 0, "missing": 1, "regression": 2}
    blocking = report.blocking.sort_values(
        ["verdict", "ratio"], key=lambda s: s.map(order) if s.name == "verdict" else -s
    )
    improvements = rows[rows["verdict"] == "improvement"].sort_values("ratio")
    not_comparable = rows[rows["verdict"].isin(["not_comparable", "new"])]
    return {
        "blocking": blocking[blocking["verdict"] != "missing"],
        "missing": blocking[blocking["verdict"] == "missing"],  # block too, shown as counts
        "improvements": improvements,
        "not_comparable": not_comparable,
    }


def _missing_summary(missing: pd.DataFrame) -> str:
    """Vanished benchmarks as counts per machine and suite: "104 measured on base, absent
    on head: nvidia-h100 speed.SpeedSuite 96, speed.ModelStepSuite 8"."""
    parts = []
    for machine, rows in missing.groupby("machine", sort=True):
        suites = rows["benchmark"].str.rsplit(".", n=1).str[0].value_counts()
        parts.append(f"{machine} " + ", ".join(f"{k} {v}" for k, v in suites.items()))
    return f"{len(missing)} measured on base, absent on head: " + "; ".join(parts)


def _rest_counts(report: GateReport) -> str:
    """The rows that do not block, as counts: "57 unchanged, 1 improvement, ..."."""
    counts = report.rows["verdict"].value_counts().to_dict()
    labels = (("unchanged", "unchanged", "unchanged"),
              ("improvement", "improvement", "improvements"),
              ("context", "peer row (context, never blocking)", "peer rows (context, never "
               "blocking)"),
              ("new", "new row", "new rows"),
              ("not_comparable", "row not comparable", "rows not comparable"))  # fmt: skip
    parts = [f"{counts[v]} {one if counts[v] == 1 else many}"
             for v, one, many in labels if counts.get(v)]  # fmt: skip
    return ", ".join(parts) if parts else "no other rows"


def _confirm_summary(report: GateReport) -> str:
    """--confirm's outcome in one line: "2 flagged rows cleared by re-measurement, 1
    confirmed (3 interleaved pairs each)"."""
    found = report.confirmations or []
    if not found:
        return "Re-measurement (--confirm): no speed or live-resource regression to re-measure."
    cleared = sum(not c.confirmed for c in found)
    rounds = max(len(c.ratios) for c in found)
    return (f"Re-measurement (--confirm): {cleared} flagged row{'s' if cleared != 1 else ''} "
            f"cleared by re-measurement, {len(found) - cleared} confirmed ({rounds} "
            f"interleaved base/head pair{'s' if rounds != 1 else ''} each).")  # fmt: skip


def _confirm_line(c: Confirmation) -> str:
    """One re-measured row: "cleared: nvidia-h100 `speed.S.track_forward_ms` impl=... — first
    run 1.210× p=1e-05; re-run blocked in 0/3 pairs: 1.003× p=0.6, ..."."""
    outcome = "confirmed" if c.confirmed else "cleared"
    return (
        f"{outcome}: {c.machine} `{c.benchmark}` {c.param_key} — first run "
        f"{c.first_run()}; re-run {c.evidence()}"
    )


def _details(summary: str, body: list[str]) -> list[str]:
    return ["<details><summary>" + summary + "</summary>", "", *body, "", "</details>", ""]


def render_markdown(report: GateReport) -> str:
    """A pull-request comment for a reviewer: the verdict first, then only the rows that
    block (benchmark, parameters, ratio, confidence, whether a config change explains it),
    and everything else as counts, with the lists folded in ``<details>``."""
    multi = len(report.machines) > 1
    passed = report.passed
    sections = _sections(report)
    lines = [
        f"## safeattn-gate: {'✅ PASS' if passed else '❌ FAIL'} — {_verdict_summary(report)}",
        "",
        f"base `{report.base[:10]}` → head `{report.head[:10]}` · machines: "
        + ", ".join(f"`{m}`" for m in report.machines)
        + f" · policy: {report.policy_source}",
        "",
    ]
    n_blocking = len(sections["blocking"]) + len(sections["missing"])
    if n_blocking:
        lines += [f"### Blocking ({n_blocking})", ""]
    if len(sections["blocking"]):
        lines += [*_md_table(sections["blocking"], multi), ""]
    if len(sections["missing"]):
        lines += [f"**Missing:** {_missing_summary(sections['missing'])}.", ""]
        lines += _details(f"{len(sections['missing'])} missing rows",
                          _md_table(sections["missing"], multi))  # fmt: skip
    lines += [f"Not blocking: {_rest_counts(report)}.", ""]
    if report.confirmations is not None:
        lines += [_confirm_summary(report), ""]
        cleared = [c for c in report.confirmations if not c.confirmed]
        if cleared:
            lines += _details(f"{len(cleared)} cleared row{'s' if len(cleared) > 1 else ''}",
                              [f"- {_confirm_line(c)}" for c in cleared])  # fmt: skip
    if len(sections["improvements"]):
        n = len(sections["improvements"])
        lines += _details(f"{n} improvement{'s' if n > 1 else ''}",
                          _md_table(sections["improvements"], multi))  # fmt: skip
    if len(sections["not_comparable"]):
        lines += _details(f"{len(sections['not_comparable'])} rows without a verdict",
                          _md_table(sections["not_comparable"], multi))  # fmt: skip
    notes = report.notes + report.warnings
    if notes:
        lines += _details(f"{len(notes)} note{'s' if len(notes) > 1 else ''}",
                          [f"- {n}" for n in notes])  # fmt: skip
    return "\n".join(lines).rstrip() + "\n"


_TEXT_LIST_LIMIT = 5  # improvements and notes listed in the text format; the rest counted


def render_text(report: GateReport) -> str:
    """Plain text for a terminal or a CI log: the verdict, every blocking row, then the rest
    as counts (a few improvements and notes named); a PASS fits a screen."""
    multi = len(report.machines) > 1
    passed = report.passed
    sections = _sections(report)
    lines = [
        f"safeattn-gate: {'PASS' if passed else 'FAIL'} — {_verdict_summary(report)}",
        f"base {report.base[:10]} -> head {report.head[:10]} on {', '.join(report.machines)}"
        f" (policy: {report.policy_source})",
    ]

    def listed(rows: pd.DataFrame) -> list[str]:
        out = []
        for cells in _table_rows(rows, multi):
            verdict, *rest = cells
            out.append(f"  [{verdict}] " + " | ".join(c.strip("`") for c in rest))
        return out

    n_blocking = len(sections["blocking"]) + len(sections["missing"])
    if n_blocking:
        lines += ["", f"Blocking ({n_blocking}):", *listed(sections["blocking"])]
    if len(sections["missing"]):
        lines.append(f"  [missing] {_missing_summary(sections['missing'])}")
    lines += ["", f"Not blocking: {_rest_counts(report)}."]
    cleared = [c for c in report.confirmations or [] if not c.confirmed]
    if report.confirmations is not None:
        lines.append(_confirm_summary(report))
        lines += [f"  {_confirm_line(c)}".replace("`", "") for c in cleared[:_TEXT_LIST_LIMIT]]
        if len(cleared) > _TEXT_LIST_LIMIT:
            lines.append(f"  … {len(cleared) - _TEXT_LIST_LIMIT} more cleared rows")
    improvements = sections["improvements"]
    if len(improvements):
        lines += listed(improvements.head(_TEXT_LIST_LIMIT))
        if len(improvements) > _TEXT_LIST_LIMIT:
            lines.append(f"  … {len(improvements) - _TEXT_LIST_LIMIT} more improvements")
    notes = report.notes + report.warnings
    lines += [f"note: {n}" for n in notes[:_TEXT_LIST_LIMIT]]
    if len(notes) > _TEXT_LIST_LIMIT:
        lines.append(f"note: … {len(notes) - _TEXT_LIST_LIMIT} more")
    hidden = len(sections["missing"]) + len(sections["not_comparable"])
    cut = max(len(improvements), len(notes), len(cleared)) > _TEXT_LIST_LIMIT
    if hidden or cut:
        lines.append("(--format markdown or json lists every row)")
    return "\n".join(lines) + "\n"


def render_json(report: GateReport) -> str:
    """Everything, machine-readable (NaN -> null)."""

    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
        return value

    rows = [{k: clean(v) for k, v in r.items()} for r in report.rows.to_dict("records")]
    payload = {
        "verdict": "pass" if report.passed else "fail",
        "exit_code": report.exit_code,
        "base": report.base,
        "head": report.head,
        "machines": report.machines,
        "policy": report.policy_source,
        "counts": report.rows["verdict"].value_counts().to_dict(),
        "notes": report.notes,
        "warnings": report.warnings,
        "confirmations": None
        if report.confirmations is None
        else [_clean_confirmation(c, clean) for c in report.confirmations],
        "rows": rows,
    }
    return json.dumps(payload, indent=2, default=str) + "\n"


def _clean_confirmation(c: Confirmation, clean) -> dict[str, Any]:
    """A Confirmation as JSON values (its NaN p-values -> null)."""
    return {
        k: [clean(x) for x in v] if isinstance(v, list) else clean(v)
        for k, v in dataclasses.asdict(c).items()
    }


RENDERERS = {"text": render_text, "markdown": render_markdown, "json": render_json}

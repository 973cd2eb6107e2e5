"""The defects the A/A study plants in one pair, and whether the gate catches each: a
slowdown of every safeattn speed row or of one row, a non-finite rate, and damaged result
files. A plant counts as caught only through rows it touched that did not already block on
the real pair, so a false alarm cannot pass for a catch. How large each plant is, and the
study as a whole: :mod:`regress.aa`.
"""

from __future__ import annotations

import io
import shutil
import tempfile
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from regress import gate
from regress.asv_files import RESULT_FILE
from regress.compare import GROUP_PARAM_KEY, compare
from regress.policy import BLOCKING_VERDICTS, Policy
from regress.results import LoadedResults
from regress.sensitivity import (
    own_speed_compared,
    own_speed_rows,
    plant_nonfinite,
    plant_slowdown,
    speed_flag_counts,
)


@dataclass
class Plant:
    """One planted defect and whether the gate caught it."""

    name: str  # short, for tables: "5% every row", "20% one row", ...
    caught: bool
    detail: str  # what happened, for the text and JSON reports
    cell: str = ""  # the same, a few words, for a README table cell


def _newly_blocking(
    real: pd.DataFrame, planted: pd.DataFrame, keys: set[tuple[str, str]]
) -> pd.DataFrame:
    """Rows of ``planted`` that block, belong to the plant (a planted (benchmark,
    param_key) or the group row of a planted benchmark) and did not block on ``real``."""
    benchmarks = {b for b, _ in keys}
    related = [
        (b, k) in keys or (k == GROUP_PARAM_KEY and b in benchmarks)
        for b, k in zip(planted["benchmark"], planted["param_key"], strict=True)
    ]
    blocking = planted[pd.Series(related, index=planted.index, dtype=bool)]
    blocking = blocking[blocking["verdict"].isin(BLOCKING_VERDICTS)]
    real_blocking = real[real["verdict"].isin(BLOCKING_VERDICTS)]
    already = set(zip(real_blocking["benchmark"], real_blocking["param_key"], strict=True))
    fresh = [
        (b, k) not in already
        for b, k in zip(blocking["benchmark"], blocking["param_key"], strict=True)
    ]
    return blocking[pd.Series(fresh, index=blocking.index, dtype=bool)]


def _keys(table: pd.DataFrame, mask: pd.Series) -> set[tuple[str, str]]:
    rows = table[mask]
    return set(zip(rows["benchmark"], rows["param_key"], strict=True))


def median_noise_row(real: pd.DataFrame) -> tuple[str, str] | None:
    """(benchmark, param_key) of the safeattn speed row whose real ratio is the lower
    median of the pair's (ties broken by benchmark, then parameters); None without any."""
    own, _ = own_speed_compared(real)
    if own.empty:
        return None
    ordered = own.sort_values(["ratio", "benchmark", "param_key"], kind="stable")
    row = ordered.iloc[(len(ordered) - 1) // 2]
    return str(row["benchmark"]), str(row["param_key"])


def check_broad_slowdown(
    loaded: LoadedResults,
    real: pd.DataFrame,
    machine: str,
    base: str,
    head: str,
    policy: Policy,
    factor: float,
) -> Plant:
    """(b): every safeattn speed row of ``head`` ``factor`` times slower; caught when the
    gate newly blocks on those rows or their benchmarks' geometric means."""
    name = f"{factor - 1:.0%} every row"
    rows = own_speed_rows(loaded.table, machine, head)
    if not rows.any():
        return Plant(name, False, "no safeattn speed rows on head: nothing to plant")
    planted = compare(plant_slowdown(loaded, rows, factor), base, head, machine, policy)
    counts = speed_flag_counts(planted)
    caught = not _newly_blocking(real, planted, _keys(loaded.table, rows)).empty
    detail = (
        f"{'blocks' if caught else 'does not block'}: {counts['flagged']} of {counts['rows']} "
        f"rows flagged ({counts['fraction']:.0%}), {counts['groups_flagged']} of "
        f"{counts['groups']} benchmark means"
    )
    cell = (
        f"{counts['groups_flagged']}/{counts['groups']} means, "
        f"{counts['flagged']}/{counts['rows']} rows"
    )
    return Plant(name, caught, detail, cell)


def check_one_row_slowdown(
    loaded: LoadedResults,
    real: pd.DataFrame,
    machine: str,
    base: str,
    head: str,
    policy: Policy,
    factor: float,
) -> Plant:
    """(c): the median-noise row (:func:`median_noise_row`) of ``head`` ``factor`` times
    slower; caught when the gate newly blocks on it."""
    name = f"{factor - 1:.0%} one row"
    key = median_noise_row(real)
    if key is None:
        return Plant(name, False, "no safeattn speed row on both commits: nothing to plant")
    table = loaded.table
    rows = (
        own_speed_rows(table, machine, head)
        & table["benchmark"].eq(key[0])
        & table["param_key"].eq(key[1])
    )
    planted = compare(plant_slowdown(loaded, rows, factor), base, head, machine, policy)
    caught = not _newly_blocking(real, planted, {key}).empty
    row = planted[(planted["benchmark"] == key[0]) & (planted["param_key"] == key[1])].iloc[0]
    real_ratio = real[(real["benchmark"] == key[0]) & (real["param_key"] == key[1])].iloc[0]
    detail = (
        f"{'blocks' if caught else 'does not block'}: {key[0].rsplit('.', 1)[-1]} [{key[1]}] "
        f"(median-noise row, A/A ratio {real_ratio['ratio']:.3f}) -> {row['ratio']:.3f}, "
        f"{row['verdict']}"
    )
    return Plant(name, caught, detail, f"{real_ratio['ratio']:.3f} → {row['ratio']:.3f}×")


def check_nonfinite(
    loaded: LoadedResults,
    real: pd.DataFrame,
    machine: str,
    base: str,
    head: str,
    policy: Policy,
    rate: float,
) -> Plant:
    """(d): one safeattn ``nonfinite_rate`` row of ``head`` that measured 0 reads ``rate``
    (:func:`~regress.sensitivity.plant_nonfinite`); caught when the gate newly blocks on it."""
    name = "non-finite rate"
    trial, key = plant_nonfinite(loaded, machine, head, rate)
    if key is None:
        return Plant(name, False, "no safeattn nonfinite_rate row measuring 0 on head: not planted")
    planted = compare(trial, base, head, machine, policy)
    caught = not _newly_blocking(real, planted, {key}).empty
    detail = (
        f"{'blocks' if caught else 'does not block'}: {key[0].rsplit('.', 1)[-1]} [{key[1]}] "
        f"= {rate:g}"
    )
    return Plant(name, caught, detail, f"rate {rate:g}")


def _pair_copy(results_dir: Path, machine: str, base: str, head: str, dest: Path) -> list[Path]:
    """Copy what the gate reads for ``base`` and ``head`` on ``machine`` (benchmarks.json,
    machine.json, every sidecar, the two commits' result files) under ``dest``; return the
    head's result files in the copy. asv names result files ``<sha[:8]>-<env>.json``."""
    (dest / machine).mkdir(parents=True)
    if (results_dir / "benchmarks.json").exists():
        shutil.copy2(results_dir / "benchmarks.json", dest / "benchmarks.json")
    head_files = []
    for path in sorted((results_dir / machine).glob("*.json")):
        is_result = RESULT_FILE.match(path.name) is not None
        if is_result and not path.name.startswith((f"{base[:8]}-", f"{head[:8]}-")):
            continue  # another commit's results: the gate does not read them
        shutil.copy2(path, dest / machine / path.name)
        if is_result and path.name.startswith(f"{head[:8]}-"):
            head_files.append(dest / machine / path.name)
    return head_files


def _truncate(files: list[Path]) -> None:
    for path in files:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])


def _remove(files: list[Path]) -> None:
    for path in files:
        path.unlink()


def _run_gate_cli(args: list[str]) -> tuple[int, str]:
    """safeattn-gate's exit code and first error line, its output swallowed."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = gate.main(args)
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    return code, lines[0] if lines else ""


def check_damaged_data(
    results_dir: Path, machine: str, base: str, head: str, policy_path: str | None
) -> list[Plant]:
    """(e): the gate on a temporary copy of the pair's files, undamaged (a control: it must
    not exit 2), with the head's result files truncated, and with them removed."""
    damages: dict[str, Callable[[list[Path]], None]] = {
        "corrupt data": _truncate,
        "missing data": _remove,
    }
    codes: dict[str, tuple[int, str]] = {}
    for label, damage in {"control": None, **damages}.items():
        with tempfile.TemporaryDirectory(prefix="safeattn-aa-") as tmp:
            copy = Path(tmp) / "results"
            head_files = _pair_copy(results_dir, machine, base, head, copy)
            if damage is not None:
                damage(head_files)
            args = ["--results", str(copy), "--base", base, "--head", head, "--machine", machine]
            args += ["--policy", policy_path] if policy_path else []
            codes[label] = _run_gate_cli(args)
    control_code, control_error = codes["control"]
    plants = []
    for label in damages:
        code, error = codes[label]
        if control_code == gate.EXIT_DATA_ERROR:
            caught, detail = False, f"the undamaged copy already exits 2 ({control_error})"
        else:
            caught = code == gate.EXIT_DATA_ERROR
            detail = f"gate exit {code}" + (f" ({error[:120]})" if error else "")
        plants.append(Plant(label, caught, detail, f"exit {code}"))
    return plants

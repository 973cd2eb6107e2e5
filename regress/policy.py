"""The gate's verdict policy: the verdict names :func:`regress.compare.compare` gives, which
of them block a merge, and the per-kind thresholds it judges by, read from ``policy.toml``
(overlaid with a user's file). What each verdict means: :mod:`regress.compare`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

DEFAULT_POLICY_PATH = Path(__file__).with_name("policy.toml")

VERDICTS: tuple[str, ...] = (
    "failure",
    "missing",
    "regression",
    "improvement",
    "unchanged",
    "new",
    "context",
    "not_comparable",
)
# Verdicts that make the gate exit 1.
BLOCKING_VERDICTS: frozenset[str] = frozenset({"failure", "missing", "regression"})
KINDS: tuple[str, ...] = ("speed", "memory", "resource", "accuracy", "safety")


@dataclass(frozen=True)
class KindPolicy:
    """Thresholds for one metric kind. ``max_ratio``: worse by more than this factor is a
    regression (1.05 = 5%). Speed only: ``alpha``, ``min_samples``,
    ``max_ratio_without_stats``, ``max_group_ratio``, ``min_group_rows``; deterministic
    kinds: ``min_abs_increase``."""

    max_ratio: float
    min_abs_increase: float = 0.0
    alpha: float = 0.01
    min_samples: int = 5
    max_ratio_without_stats: float = 1.10
    max_group_ratio: float = 1.03
    min_group_rows: int = 8


@dataclass(frozen=True)
class Policy:
    kinds: dict[str, KindPolicy]
    source: str  # the file it came from, for reports


def load_policy(path: str | Path | None = None) -> Policy:
    """The gate policy: the packaged ``policy.toml``, overlaid with ``path`` if given.

    A user file only needs the values it changes. Unknown sections or keys and values out
    of range raise ValueError naming them (a typo must not silently loosen the gate).
    """
    merged = _read_policy_file(DEFAULT_POLICY_PATH)
    source = str(DEFAULT_POLICY_PATH)
    if path is not None:
        for kind, values in _read_policy_file(Path(path)).items():
            merged.setdefault(kind, {}).update(values)
        source = str(path)
    kinds = {}
    for kind in KINDS:
        if kind not in merged or "max_ratio" not in merged[kind]:
            raise ValueError(f"policy {source}: section [{kind}] needs a max_ratio")
        kinds[kind] = _kind_policy(kind, merged[kind], source)
    return Policy(kinds=kinds, source=source)


def _read_policy_file(path: Path) -> dict[str, dict[str, Any]]:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise ValueError(f"cannot read policy file {str(path)!r}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"policy file {str(path)!r} is not valid TOML: {exc}") from exc
    unknown = sorted(set(data) - set(KINDS))
    if unknown:
        raise ValueError(
            f"policy file {str(path)!r}: unknown section(s) {unknown}; "
            f"known sections: {list(KINDS)}"
        )
    return data


def _kind_policy(kind: str, values: dict[str, Any], source: str) -> KindPolicy:
    known = {f.name for f in fields(KindPolicy)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(
            f"policy {source}: [{kind}] has unknown key(s) {unknown}; known: {sorted(known)}"
        )
    policy = KindPolicy(**values)
    checks = [
        (policy.max_ratio >= 1.0, "max_ratio must be >= 1.0"),
        (policy.max_ratio_without_stats >= 1.0, "max_ratio_without_stats must be >= 1.0"),
        (policy.max_group_ratio >= 1.0, "max_group_ratio must be >= 1.0"),
        (policy.min_group_rows >= 2, "min_group_rows must be >= 2"),
        (policy.min_abs_increase >= 0, "min_abs_increase must be >= 0"),
        (0.0 < policy.alpha < 1.0, "alpha must be in (0, 1)"),
        (policy.min_samples >= 2, "min_samples must be >= 2"),
    ]
    for ok, message in checks:
        if not ok:
            raise ValueError(f"policy {source}: [{kind}] {message} (got {values})")
    return policy

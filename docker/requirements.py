"""Print what a Docker image pip-installs, read from pyproject.toml (the one list).

    python requirements.py PYPROJECT [--build-system] [EXTRA ...]

prints ``[project].dependencies``, then each named extra's requirements, then (with
``--build-system``) ``[build-system].requires``, one per line, for ``pip install -r``.
The images install only these, never the safeattn package itself: the dashboard runs from
its copied source tree and the bench service from a clone of the checkout, where an
installed copy could only shadow the code under test. asv builds each commit offline
without build isolation, so the bench image needs the build requirements installed too.
Needs Python >= 3.11 (tomllib), which both images have.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import tomllib

BUILD_SYSTEM_FLAG = "--build-system"


def requirements(pyproject: Path, extras: Sequence[str], build_system: bool = False) -> list[str]:
    """Core dependencies, each extra's, then the build requirements if asked; without
    repeats (first occurrence kept).

    Raises SystemExit naming the extras pyproject.toml defines when one is unknown.
    """
    config = tomllib.loads(pyproject.read_text())
    project = config["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise SystemExit(
            f"{pyproject}: no extra named {', '.join(unknown)}; "
            f"it defines {', '.join(sorted(optional)) or 'none'}"
        )
    found = list(project.get("dependencies", []))
    for extra in extras:
        found += optional[extra]
    if build_system:
        found += config.get("build-system", {}).get("requires", [])
    return list(dict.fromkeys(found))


def main(argv: Sequence[str]) -> int:
    if not argv:
        raise SystemExit(
            f"usage: python requirements.py PYPROJECT [{BUILD_SYSTEM_FLAG}] [EXTRA ...]"
        )
    pyproject, rest = Path(argv[0]), list(argv[1:])
    build_system = BUILD_SYSTEM_FLAG in rest
    extras = [a for a in rest if a != BUILD_SYSTEM_FLAG]
    print("\n".join(requirements(pyproject, extras, build_system)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""docs/ARCHITECTURE.md is kept true: its tree names every source file of the product's rooms
and nothing that is gone, and no module grows past ~400 lines without saying why."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "ARCHITECTURE.md"
ROOMS = ("safeattn", "regress", "benchmarks", "tools", "dashboard")
SOURCE_SUFFIXES = (".py", ".sh", ".toml")
# "Files a person can hold in their head": ~400 lines (5 % over is still ~400); a longer
# module says why in its docstring.
LINE_LIMIT = 420
REASON = re.compile(r"over ~?400 lines", re.IGNORECASE)


def tree_paths(text: str) -> set[str]:
    """The paths the first fenced block of ARCHITECTURE.md draws: one entry a line, two spaces
    of indentation a level, folders ending in ``/``, a description after the name (a line
    indented deeper than one level below the entry before it continues that description)."""
    block = text.split("```", 2)[1]
    paths: set[str] = set()
    stack: list[str] = []
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        if depth > len(stack) or (depth == len(stack) and stack and not stack[-1].endswith("/")):
            continue  # a description's continuation
        name = line.split()[0]
        stack[depth:] = [name]
        paths.add("".join(stack).rstrip("/"))
    return paths


def tracked_sources() -> set[str]:
    out = subprocess.run(
        ["git", "ls-files", *ROOMS], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    return {
        p
        for p in out
        if p.endswith(SOURCE_SUFFIXES) and not p.endswith("__init__.py") and (REPO / p).exists()
    }


def test_the_tree_names_every_source_file_and_nothing_that_is_gone():
    drawn = tree_paths(DOC.read_text())
    missing = sorted(tracked_sources() - drawn)
    gone = sorted(p for p in drawn if not (REPO / p).exists())
    assert not missing, f"docs/ARCHITECTURE.md does not name {missing}"
    assert not gone, f"docs/ARCHITECTURE.md names paths that do not exist: {gone}"


def test_the_tree_parser_reads_nesting():
    text = (
        "x\n```\nsafeattn/    the package\n  kernels/   the kernels\n    forward.py  fwd\n"
        "                the forward's description, continued\n  api.py     the API\n```\n"
    )
    assert tree_paths(text) == {
        "safeattn",
        "safeattn/kernels",
        "safeattn/kernels/forward.py",
        "safeattn/api.py",
    }


def test_no_module_over_about_400_lines_without_a_stated_reason():
    long = []
    for path in sorted(tracked_sources()):
        if not path.endswith(".py"):
            continue
        source = (REPO / path).read_text()
        lines = source.count("\n")
        if lines <= LINE_LIMIT:
            continue
        doc = ast.get_docstring(ast.parse(source)) or ""
        if not REASON.search(doc):
            long.append(f"{path} ({lines} lines)")
    assert not long, (
        f"modules over {LINE_LIMIT} lines whose docstring does not say why ('over ~400 lines: "
        f"<reason>'): {long}"
    )


def test_a_kernel_only_install_gets_a_clear_message_from_the_service():
    """Without pandas (the ``service`` extra), importing the service names what to install."""
    code = "import sys; sys.modules['pandas'] = None; import regress.gate"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "pip install 'safeattn[service]'" in proc.stderr

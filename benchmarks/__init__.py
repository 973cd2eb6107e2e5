"""safeattn's asv benchmark suites (speed, memory, resources, numerics); see run.py.

The private modules (``_*.py``) are their helpers: asv imports them too but finds no
benchmark there. ``_env`` is imported first, here, so that every benchmark process has its
environment fixed (``PYTHONPATH`` entries asv dropped, one Triton cache) before a suite or a
helper runs anything.
"""

from . import _env  # noqa: F401  (fixes the process environment on import)

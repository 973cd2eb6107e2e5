"""The regression service (no UI): metric registry, asv result loading, comparison, the merge
gate, the README report and the A/A study. The dashboard pages and the ``safeattn-gate`` CLI
import from here; ``safeattn`` never does (docs/ARCHITECTURE.md)."""

try:
    import pandas  # noqa: F401  (every table of the service is a pandas frame)
except ImportError as exc:  # a kernel-only install: say what to install, not a traceback
    raise ImportError(
        "the regression service (regress: safeattn-gate, the README report, the dashboard's "
        "data) needs pandas, which a kernel-only install leaves out: "
        "pip install 'safeattn[service]'"
    ) from exc

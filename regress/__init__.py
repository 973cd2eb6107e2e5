"""The regression service's logic (no UI): metric registry, asv result loading, comparison
and the merge gate. The dashboard pages and the ``safeattn-gate`` CLI both import from here."""

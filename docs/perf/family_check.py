"""One adversarial family's verdicts (seeds 0-2, GPU size) for one safeattn package, as
tests/test_families.py::test_safeattn_passes checks them (a diagnostic, not a test).

    PYTHONPATH=$PWD python docs/perf/family_check.py base|new varlen_empty_seqs float32

``base`` is the copy under .dev/base (bwd_prof.py says how to make it), ``new`` the tree.
"""

import os
import sys


def main(variant: str, family: str, dtype: str) -> None:
    sys.path.insert(0, os.path.abspath(".dev/base" if variant == "base" else "."))
    import torch

    import safeattn
    from safeattn import contract, families

    for seed in range(3):
        case = families.make_case(family, seed, getattr(torch, dtype), "cuda", "gpu")
        v = contract.check(case, safeattn)
        where = safeattn.__file__[-30:]  # which package ran
        print(variant, family, dtype, seed, where, v.nonfinite, v.wrong, f"{v.max_rel_error:.4g}",
              v.detail)  # fmt: skip


if __name__ == "__main__":
    main(*sys.argv[1:4])

"""Where the CPU time of one safeattn forward+backward goes, on a CUDA GPU (a diagnostic,
not a test): cProfile of 50 calls of ``attention(...).backward(...)``, the GPU synchronised
before each so the queue never blocks, sorted by own time, for the two cases the H200 A/A
pair flagged (docs/perf/fwd_bwd_host_bound.py) and FlexAttention beside them. The backward
runs in the calling thread (``torch.autograd.set_multithreading_enabled(False)``): on CUDA,
autograd otherwise runs it on a device thread that cProfile does not see.

    python docs/perf/fwd_bwd_host_profile.py [--top 25]
"""

import argparse
import cProfile
import pstats
import time

CASES = (
    ("speed", "safeattn", "float16", 128, 1024, True, 4),
    ("masked", "safeattn", "bfloat16", 128, "key_padding_causal"),
    ("speed", "flex", "float16", 128, 1024, True, 4),
)


def build(case):
    from benchmarks import _attention, _masks

    if case[0] == "speed":
        _, impl, dtype, head_dim, seq_len, causal, gqa = case
        fn = _attention.attention_call(impl, causal, seq_len, gqa)
        return fn, _attention.attention_inputs(impl, dtype, seq_len, head_dim, gqa)
    _, impl, dtype, head_dim, mask = case
    built = _masks.mask_case(mask, impl, dtype, head_dim)
    return built.call, built.inputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    import torch

    from benchmarks import _attention

    for case in CASES:
        fn, (q, k, v, g) = build(case)
        single_thread = torch.autograd.set_multithreading_enabled(False)
        with _attention.impl_context(case[1]), single_thread:
            for _ in range(3):
                fn(q, k, v).backward(g)
            torch.cuda.synchronize()
            profile = cProfile.Profile()
            wall = 0.0
            for _ in range(50):
                for t in (q, k, v):
                    t.grad = None
                torch.cuda.synchronize()
                start = time.perf_counter()
                profile.enable()
                fn(q, k, v).backward(g)
                profile.disable()
                wall += time.perf_counter() - start
        print(f"\n=== {' '.join(map(str, case))}: {wall / 50 * 1e3:.3f} ms CPU per call ===")
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()

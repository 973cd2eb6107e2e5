"""Is a ~1 ms forward+backward host-bound? (a diagnostic, not a test; run on a CUDA GPU)

    python docs/perf/fwd_bwd_host_bound.py            # 3 fresh processes, a table at the end

The A/A pair 194f3ff -> 2ef2155 on the H200 (results/, same kernels, same configs from the
tuning tables) flagged two fwd_bwd rows 1.16-1.26x slower whose forward and backward rows
did not move. If one forward+backward takes the CPU about as long to issue as the GPU to run,
the CUDA-event time of SpeedSuite's fwd_bwd (benchmarks/_gpu_measure.py: no sync between
samples) is the slower of the two, and the CPU's speed differs between processes.
Per case and process this prints:
- cpu_issue: host time to issue fn(q, k, v).backward(grad_out) (perf_counter, the GPU idle
  before, so the queue never blocks), median of 30;
- events: the suite's own measurement (cuda_event_samples), median of 30;
- events_ahead: the same with a 2 ms GPU sleep enqueued before each start event, so the CPU
  has issued the whole call before the GPU reaches it: GPU time alone.
"""

import json
import statistics
import subprocess
import sys
import time

CASES = (
    ("speed", "safeattn", "float16", 128, 1024, True, 4),
    ("masked", "safeattn", "bfloat16", 128, "key_padding_causal"),
    ("speed", "flex", "float16", 128, 1024, True, 4),
    ("masked", "flex", "bfloat16", 128, "key_padding_causal"),
)


def one_process() -> dict:
    import torch

    from benchmarks import _attention, _masks
    from benchmarks._gpu_measure import cuda_event_samples

    out = {}
    for case in CASES:
        kind, impl = case[0], case[1]
        if kind == "speed":
            _, _, dtype, head_dim, seq_len, causal, gqa = case
            fn = _attention.attention_call(impl, causal, seq_len, gqa)
            q, k, v, g = _attention.attention_inputs(impl, dtype, seq_len, head_dim, gqa)
        else:
            _, _, dtype, head_dim, mask = case
            c = _masks.mask_case(mask, impl, dtype, head_dim)
            fn, (q, k, v, g) = c.call, c.inputs
        grads = [q, k, v]

        def call(fn=fn, q=q, k=k, v=v, g=g):
            fn(q, k, v).backward(g)

        with _attention.impl_context(impl):
            for _ in range(3):
                call()
            torch.cuda.synchronize()
            issue = []
            for _ in range(30):
                for t in grads:
                    t.grad = None
                torch.cuda.synchronize()
                start = time.perf_counter()
                call()
                issue.append((time.perf_counter() - start) * 1e3)
            torch.cuda.synchronize()
            events = cuda_event_samples(call, 30, grad_to_none=grads)
            cycles = 4_000_000  # >= 2 ms at H100/H200 clocks (<= 1.98 GHz)
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(30)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(30)]
            for s, e in zip(starts, ends, strict=True):
                for t in grads:
                    t.grad = None
                torch.cuda._sleep(cycles)
                s.record()
                call()
                e.record()
            torch.cuda.synchronize()
            ahead = [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
        out[" ".join(map(str, case))] = {
            "cpu_issue": statistics.median(issue),
            "events": statistics.median(events),
            "events_ahead": statistics.median(ahead),
        }
    return out


if __name__ == "__main__":
    if sys.argv[1:] == ["--one"]:
        print(json.dumps(one_process()))
        sys.exit(0)
    runs = []
    for i in range(3):
        done = subprocess.run([sys.executable, __file__, "--one"], capture_output=True, text=True)
        if done.returncode:
            print(done.stderr[-3000:])
            sys.exit(1)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"process {i}: {runs[-1]}", flush=True)
    print("| case | process | cpu_issue ms | events ms (suite's) | events_ahead ms (GPU only) |")
    print("|---|---|---|---|---|")
    for case in runs[0]:
        for i, run in enumerate(runs):
            r = run[case]
            print(
                f"| {case} | {i} | {r['cpu_issue']:.3f} | {r['events']:.3f} | "
                f"{r['events_ahead']:.3f} |"
            )

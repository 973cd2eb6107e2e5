"""The tools around the product, each a ``python -m tools.<name>`` command run from the
repository root (none is imported by the kernel package, the asv suites or the dashboard app).

Benchmarking: ``run`` (the asv runner: suites, commit ranges, status file, all GPUs of a
host with ``--gpus``; its parts in ``runner/``), ``gpu_history.sh`` (history on a GPU
machine), ``publish_results`` and ``follow_results`` (many runners' results on one git
branch, and a served copy that follows it), ``prewarm`` (compile caches), ``tune`` (tuning
tables), ``config_sweep`` and ``kernel_perf`` (one-shape sweeps and tables), ``smoke`` and
``compiled_step`` (GPU runs outside asv), ``peer_ratios`` (ratios from results/),
``confirm_demo`` (the gate's ``--confirm`` for real).

Dashboard: ``demo`` (``make demo``: dashboard + runner), ``sample_results`` (a CPU fixture of
results/), ``browser`` (drives a real Chromium for the tests and screenshots), ``screens``
(docs/screenshots), ``bench_load`` (the dashboard's load speed).
"""

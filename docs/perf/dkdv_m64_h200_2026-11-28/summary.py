"""Print a folder of ab.py's JSON lines as one line per (file, shape): ``python summary.py DIR``."""

import glob
import json
import os
import sys

folder = sys.argv[1]
for path in sorted(glob.glob(f"{folder}/*.jsonl")):
    tag = os.path.basename(path)[: -len(".jsonl")]
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            shape = f"N{r['n']} c{int(r['causal'])} g{r['gqa']}"
            if "bwd_ms" in r:
                print(tag, shape, "bwd", r["bwd_ms"], "dkdv", r["cfg"]["bwd_dkdv"], "err", r["err"])
            else:
                print(tag, shape, "dkdv", r.get("dkdv"), r["res"]["bwd_dkdv"].split("config=")[1])

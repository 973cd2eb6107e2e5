import json, glob, os, sys
S = sys.argv[1]
for f in sorted(glob.glob(f"{S}/*.jsonl")):
    tag = os.path.basename(f)[:-6]
    for line in open(f):
        r = json.loads(line)
        shape = f"N{r['n']} c{int(r['causal'])} g{r['gqa']}"
        if "bwd_ms" in r:
            print(tag, shape, "bwd", r["bwd_ms"], "dkdv", r["cfg"]["bwd_dkdv"], "err", r["err"])
        else:
            print(tag, shape, "dkdv", r.get("dkdv"), r["res"]["bwd_dkdv"].split("config=")[1][:60])

#!/bin/bash
cd "$(dirname "$0")/.."
S=${S:-/tmp/ab}; mkdir -p $S
export TRITON_PTXAS_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'bin','ptxas'))")
for job in "A e2e" "B1 e2e" "B2 e2e" "A sweep" "B1 sweep" "B2 sweep"; do
  set -- $job
  python3 _ab/ab.py _ab/$1 $2 > $S/$2_$1.jsonl 2> $S/$2_$1.err
  echo "$2 $1 rc=$?" >> $S/status.txt
done

#!/bin/bash
# On the GPU machine (as run.sh): encoderd against another build of it
# (.gpu/encoderd.old.xz, if there; bundle.sh's libraries) on W1 and W5, the two binaries
# alternated three times, and their outputs compared byte for byte; then the
# CUDA tests under compute-sanitizer: memcheck over all of them, racecheck
# and synccheck over the attention kernel (the op that shares memory between
# warps). Logs go to $OUT.
#
#   bash bench/gpu/check.sh
set -u
source bench/gpu/env.sh
make_model
if [ -f .gpu/encoderd.old.xz ]; then  # else the sanitizers alone
  stamp a/b
  xz -dc .gpu/encoderd.old.xz > /tmp/g/bin/encoderd.old && chmod +x /tmp/g/bin/encoderd.old
  for round in 1 2 3; do
    for v in old new; do
      bin=/tmp/g/bin/encoderd; [ $v = old ] && bin=/tmp/g/bin/encoderd.old
      outputs=(); [ $round = 1 ] && outputs=(--outputs /tmp/ab-$v)
      timeout 60 $bin bench --device cuda --engines encoderd --workloads W1,W5 --model /tmp/bi/model \
        --inputs /tmp/bi/workloads.json --min-seconds 1 "${outputs[@]}" --json > $OUT/ab-$v$round.json 2>> $OUT/ab.err
      python3 -c "
import json; d=json.load(open('$OUT/ab-$v$round.json'))
print('round $round $v', '  '.join('%s %s %.3f ms' % (r['workload'], r['dtype'], r['ms']) for r in d['results']))"
    done
  done
  for f in /tmp/ab-old/*/*.f32; do
    cmp -s "$f" "/tmp/ab-new/${f#/tmp/ab-old/}" && echo "same bytes: ${f#/tmp/ab-old/}" || echo "DIFFERENT: ${f#/tmp/ab-old/}"
  done
fi
stamp memcheck
timeout 170 compute-sanitizer --tool memcheck --print-limit 10 /tmp/g/bin/encoderd_tests \
  --gtest_filter='*Cuda*:*cuda*' > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?"
grep -E "ERROR SUMMARY|^\[  PASSED|^\[  FAILED|Invalid|Uninitialized" $OUT/memcheck.log | head -12
for tool in racecheck synccheck; do
  stamp $tool
  timeout 60 compute-sanitizer --tool $tool --print-limit 10 /tmp/g/bin/encoderd_tests \
    --gtest_filter='Dtypes/CudaOpsTest.AttentionMatchesCpuOnRaggedBatch/fp16' > $OUT/$tool.log 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  PASSED|^\[  FAILED|hazard" $OUT/$tool.log | head -6
done
stamp done

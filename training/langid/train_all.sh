#!/usr/bin/env bash
# Rebuilds models/langid from scratch: data, tokenizer, two training stages
# (2 epochs from a random init, then 1 more epoch at a lower peak learning
# rate starting from stage 1), evaluation. Deterministic for given package
# versions; about 45 minutes on one core of a busy 2-core machine.
# Usage: training/langid/train_all.sh [DATA_DIR] [MODEL_DIR]
set -euo pipefail
data=${1:-build/langid-data}
model=${2:-models/langid}
here=$(dirname "$0")
py=/usr/bin/python3
$py "$here/extract_data.py" --out "$data"
"$here/train_tokenizer.sh" "$data" "$model" 8000
nice -n 19 $py "$here/train.py" --data "$data" --model-dir "$model" \
  --epochs 2 --lr 5e-4 --warmup 300 --seed 1 | tee "$data/train-stage1.log"
cp "$model/model.pt" "$data/stage1.pt"
nice -n 19 $py "$here/train.py" --data "$data" --model-dir "$model" \
  --init "$data/stage1.pt" --epochs 1 --lr 3e-4 --warmup 100 --seed 2 \
  | tee "$data/train-stage2.log"
$py "$here/evaluate.py" --model-dir "$model" --data "$data" --min-accuracy 0.95

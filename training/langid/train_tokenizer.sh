#!/usr/bin/env bash
# Trains the sentencepiece tokenizer on INPUT (default: the catalog training
# texts, spm_train.txt, written by extract_data.py; the committed tokenizer is
# learnt from tokenizer_corpus.py's sample of all five sources). spm ids:
# <unk>=0 <s>=1 </s>=2 (no pad piece); the model is used fairseq/XLM-R style,
# every piece id shifted by 1 (<s>=0 <pad>=1 </s>=2 <unk>=3).
# Usage: training/langid/train_tokenizer.sh [DATA_DIR] [OUT_DIR] [VOCAB] [INPUT]
set -euo pipefail
data=${1:-build/langid-data}
out=${2:-models/langid}
vocab=${3:-8000}
input=${4:-$data/spm_train.txt}
mkdir -p "$out"
nice -n 19 spm_train --input="$input" \
  --model_prefix="$data/sentencepiece.bpe" --model_type=bpe \
  --vocab_size="$vocab" --character_coverage=0.9995 \
  --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 \
  --input_sentence_size=1000000 --shuffle_input_sentence=false \
  --num_threads=1 --seed_sentencepiece_size=1000000 \
  --minloglevel=1
cp "$data/sentencepiece.bpe.model" "$out/sentencepiece.bpe.model"
echo "tokenizer: $out/sentencepiece.bpe.model ($vocab pieces)"

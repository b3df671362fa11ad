#!/usr/bin/env python3
"""Writes the text the sentencepiece tokenizer is learnt from: the first N
training texts per language of every source (the split files are in sha1
order, so this is a deterministic sample), so that each language and each
kind of text (UI strings, man-page prose, game dialogue, frequent words) has
its share of the pieces. Only training splits are read; the smoke and
everyday sentences are dropped like train.py drops them.

Usage: /usr/bin/python3 training/langid/tokenizer_corpus.py --data build/langid-data \
           --out build/langid-data/spm_all.txt [--caps catalog=3000,prose=2000,...]
"""
import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import langid_data  # noqa: E402
import langid_sources  # noqa: E402

DEFAULT_CAPS = "catalog=3000,prose=2000,dialogue=3000,games=3000,words=4000"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="build/langid-data")
    ap.add_argument("--out", required=True)
    ap.add_argument("--caps", default=DEFAULT_CAPS,
                    help="texts per language taken from each source's training split")
    args = ap.parse_args()
    caps = {k: int(v) for k, v in (kv.split("=") for kv in args.caps.split(","))}
    here = os.path.dirname(os.path.abspath(__file__))
    held_out = langid_data.held_out_texts(
        os.path.join(here, name) for name in ("smoke_sentences.tsv", "everyday_sentences.tsv"))
    total = collections.Counter()
    with open(args.out, "w", encoding="utf-8") as out:
        for source in langid_sources.select(list(caps)):
            seen = collections.Counter()
            for label, text in langid_data.read_jsonl(
                    os.path.join(args.data, source.prefix + "train.jsonl")):
                if seen[label] >= caps[source.name] or langid_data.normalized(text) in held_out:
                    continue
                seen[label] += 1
                out.write(text + "\n")
            total.update(seen)
            print("%-8s %6d texts" % (source.name, sum(seen.values())))
    print("tokenizer corpus: %d texts (%s) -> %s" % (
        sum(total.values()), " ".join("%s=%d" % kv for kv in total.items()), args.out))


if __name__ == "__main__":
    main()

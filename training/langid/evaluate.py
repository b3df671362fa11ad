#!/usr/bin/env python3
"""Evaluates the committed langid model on the test split with PyTorch.

Reads DATA/test.jsonl; with --recreate (or when it is missing) first
re-creates it from the Debian catalogs (installing them with apt-get if
needed) with the same filters and split as extract_data.py, no retraining.
Writes DATA/test_predictions.jsonl, one line per test line in the same order:
{"label": predicted label, "ids": token ids fed to the model, "logits": [...]}
and prints accuracy per language. Exits 1 if accuracy < --min-accuracy.

Usage: /usr/bin/python3 training/langid/evaluate.py --model-dir models/langid \
           --data build/langid-data [--recreate] [--min-accuracy 0.95]
"""
import argparse
import json
import os
import sys

import torch
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import langid_data  # noqa: E402
import langid_model as lm  # noqa: E402


def recreate_test(path, install):
    if install:
        langid_data.ensure_packages()
    data, _ = langid_data.build_corpus()
    rows = data["test"]
    if os.path.exists(path):
        same = langid_data.read_jsonl(path) == rows
        print("re-created test split %s the existing %s" % (
            "is identical to" if same else "DIFFERS from", path))
    langid_data.write_jsonl(path, rows)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", default="models/langid")
    ap.add_argument("--data", default="build/langid-data")
    ap.add_argument("--recreate", action="store_true")
    ap.add_argument("--no-install", action="store_true")
    ap.add_argument("--min-accuracy", type=float, default=0.0)
    args = ap.parse_args()
    torch.set_num_threads(1)

    with open(os.path.join(args.model_dir, "encoderd.yaml")) as f:
        card = yaml.safe_load(f)
    labels = list(card["labels"])
    tok = lm.Tokenizer(os.path.join(args.model_dir, card["tokenizer"]["file"]))
    model = lm.build_model(tok.vocab_size, len(labels))
    state = torch.load(os.path.join(args.model_dir, card["checkpoint"]),
                       map_location="cpu")
    model.load_state_dict(state)

    os.makedirs(args.data, exist_ok=True)
    test_path = os.path.join(args.data, "test.jsonl")
    if args.recreate or not os.path.exists(test_path):
        rows = recreate_test(test_path, not args.no_install)
    else:
        rows = langid_data.read_jsonl(test_path)
    encoded = [tok.encode(text, card.get("max_tokens", lm.MAX_TOKENS))
               for _, text in rows]
    preds, logits = lm.predict(model, encoded)
    out_path = os.path.join(args.data, "test_predictions.jsonl")
    with open(out_path, "w") as f:
        for p, ids, lg in zip(preds, encoded, logits.tolist()):
            f.write(json.dumps({"label": labels[p], "ids": ids,
                                "logits": [round(v, 6) for v in lg]}) + "\n")

    gold = [lab for lab, _ in rows]
    correct = [labels[p] == g for p, g in zip(preds, gold)]
    total = sum(correct) / len(correct)
    print("%-4s %6s %8s" % ("lang", "texts", "accuracy"))
    for lab in labels:
        idx = [i for i, g in enumerate(gold) if g == lab]
        if idx:
            print("%-4s %6d %8.4f" % (lab, len(idx), sum(correct[i] for i in idx) / len(idx)))
    print("all  %6d %8.4f" % (len(gold), total))
    print("wrote %s" % out_path)
    if total < args.min_accuracy:
        print("accuracy %.4f is below --min-accuracy %.4f" % (total, args.min_accuracy))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Evaluates the committed langid model with PyTorch on the held-out test
splits of the chosen sources and on the smoke sentences.

Reads DATA/<prefix>test.jsonl of each source in --sources (test.jsonl:
gettext catalogs, prose_test.jsonl: man pages, dialogue_test.jsonl: Wesnoth
story and dialogue); with --recreate (or when one is missing) first
re-creates them from the Debian packages (installing them with apt-get if
needed) with the same filters and splits as extract_data.py, no retraining,
and says whether each is identical to an existing file. Writes
DATA/<prefix>test_predictions.jsonl, one line per test line in the same
order: {"label": predicted label, "ids": token ids fed to the model,
"logits": [...]}. Prints accuracy per language for each test set, all of
them together, and the smoke sentences (training/langid/smoke_sentences.tsv).
Exits 1 if the overall test accuracy is below --min-accuracy or the smoke
accuracy is below --min-smoke-accuracy.

Usage: /usr/bin/python3 training/langid/evaluate.py --model-dir models/langid \\
           --data build/langid-data [--sources catalog,prose,dialogue] \\
           [--recreate] [--min-accuracy 0.95] [--min-smoke-accuracy 0.9]
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
import langid_sources  # noqa: E402


def recreate_tests(sources, paths, install):
    """Re-creates the test split of each source at paths[source.name]."""
    out = {}
    for source in sources:
        if install:
            langid_data.ensure_packages(source.packages)
        rows = source.module.build_corpus()[0]["test"]
        path = paths[source.name]
        if os.path.exists(path):
            same = langid_data.read_jsonl(path) == rows
            print("re-created %s test split %s the existing %s" % (
                source.name, "is identical to" if same else "DIFFERS from", path))
        langid_data.write_jsonl(path, rows)
        out[source.name] = rows
    return out


def report(name, labels, gold, pred):
    """Prints accuracy per language; returns (correct, total)."""
    correct = [p == g for p, g in zip(pred, gold)]
    print("%s\n%-4s %6s %8s" % (name, "lang", "texts", "accuracy"))
    for lab in labels:
        idx = [i for i, g in enumerate(gold) if g == lab]
        if idx:
            print("%-4s %6d %8.4f" % (lab, len(idx), sum(correct[i] for i in idx) / len(idx)))
    print("all  %6d %8.4f\n" % (len(gold), sum(correct) / max(1, len(gold))))
    return sum(correct), len(gold)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", default="models/langid")
    ap.add_argument("--data", default="build/langid-data")
    ap.add_argument("--smoke", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "smoke_sentences.tsv"))
    ap.add_argument("--sources", default="catalog,prose,dialogue",
                    help="test splits to evaluate, comma-separated")
    ap.add_argument("--recreate", action="store_true")
    ap.add_argument("--no-install", action="store_true")
    ap.add_argument("--min-accuracy", type=float, default=0.0)
    ap.add_argument("--min-smoke-accuracy", type=float, default=0.0)
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
    max_tokens = card.get("max_tokens", lm.MAX_TOKENS)

    os.makedirs(args.data, exist_ok=True)
    sources = langid_sources.select(args.sources)
    paths = {s.name: os.path.join(args.data, s.prefix + "test.jsonl") for s in sources}
    if args.recreate or not all(map(os.path.exists, paths.values())):
        tests = recreate_tests(sources, paths, not args.no_install)
    else:
        tests = {k: langid_data.read_jsonl(p) for k, p in paths.items()}

    def classify(rows):
        encoded = [tok.encode(text, max_tokens) for _, text in rows]
        preds, logits = lm.predict(model, encoded)
        return [labels[p] for p in preds], encoded, logits

    all_gold, all_pred = [], []
    for source in sources:
        rows = tests[source.name]
        pred, encoded, logits = classify(rows)
        out_path = os.path.join(args.data, source.prefix + "test_predictions.jsonl")
        with open(out_path, "w") as f:
            for p, ids, lg in zip(pred, encoded, logits.tolist()):
                f.write(json.dumps({"label": p, "ids": ids,
                                    "logits": [round(v, 6) for v in lg]}) + "\n")
        gold = [lab for lab, _ in rows]
        report("%s test (%s; predictions in %s)" % (source.name, paths[source.name], out_path),
               labels, gold, pred)
        all_gold += gold
        all_pred += pred
    ok, n = report(" + ".join(s.name for s in sources) + " test", labels, all_gold, all_pred)
    total = ok / max(1, n)

    smoke = langid_data.read_smoke(args.smoke)
    pred, _, _ = classify(smoke)
    sok, sn = report("smoke sentences (%s)" % args.smoke, labels,
                     [lab for lab, _ in smoke], pred)
    for (lab, text), p in zip(smoke, pred):
        if p != lab:
            print("  smoke miss: %s -> %s  %s" % (lab, p, text))
    smoke_acc = sok / max(1, sn)
    status = 0
    if total < args.min_accuracy:
        print("test accuracy %.4f is below --min-accuracy %.4f" % (total, args.min_accuracy))
        status = 1
    if smoke_acc < args.min_smoke_accuracy:
        print("smoke accuracy %.4f is below --min-smoke-accuracy %.4f" % (
            smoke_acc, args.min_smoke_accuracy))
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Evaluates the committed langid model with PyTorch on the held-out test
splits of the chosen sources and on the smoke and everyday sentences.

Reads DATA/<prefix>test.jsonl of each source in --sources (default: all;
test.jsonl: gettext catalogs, prose_test.jsonl: man pages,
dialogue_test.jsonl: Wesnoth story and dialogue, games_test.jsonl: three
more games' dialogue, words_test.jsonl and words2_test.jsonl: texts of
frequent words from npm, two versions, fortunes_test.jsonl: fortune
cookies, eight languages, whose test entries no stage trains on);
with --recreate (or those that are missing) first re-creates them from the
Debian packages (installing them with apt-get if needed; the word lists
with npm) with the same filters and splits as extract_data.py, no retraining,
and says whether each is identical to an existing file. Writes
DATA/<prefix>test_predictions.jsonl, one line per test line in the same
order: {"label": predicted label, "ids": token ids fed to the model,
"logits": [...]}. Prints accuracy per language for each test set, all of
them together, the smoke sentences (training/langid/smoke_sentences.tsv) and
the everyday sentences (training/langid/everyday_sentences.tsv). Exits 1 if
the accuracy over the test sets of real text (every chosen source but the
generated word texts) is below --min-accuracy, or the smoke or everyday
accuracy below --min-smoke-accuracy / --min-everyday-accuracy.

With --peers, also classifies every one of those sets with the JavaScript
detectors eld, tinyld and franc from npm (training/langid/npm/detect.mjs,
installed there with npm on first use) and prints a Markdown table of every
system's accuracy per set, with its misses on the everyday sentences.

Usage: /usr/bin/python3 training/langid/evaluate.py --model-dir models/langid \\
           --data build/langid-data [--sources catalog,prose,dialogue,games,words2] \\
           [--recreate] [--min-accuracy 0.95] [--min-smoke-accuracy 0.9] \\
           [--min-everyday-accuracy A] [--peers]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import langid_data  # noqa: E402
import langid_model as lm  # noqa: E402
import langid_sources  # noqa: E402


def recreate_tests(sources, paths, install):
    """Re-creates the test split of each source at paths[source.name]."""
    out, built = {}, {}
    for source in sources:
        if install:
            langid_data.ensure_packages(langid_sources.packages(source))
        built[source.name] = langid_sources.build(source, built)[0]
        rows = built[source.name]["test"]
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


HERE = os.path.dirname(os.path.abspath(__file__))
def run_peers(labels, sets):
    """Every JavaScript detector's labels for each set: {set: {detector: [..]}}."""
    langid_data.ensure_npm()
    out = {}
    with tempfile.TemporaryDirectory(prefix="langid_peers_") as tmp:
        for name, rows in sets.items():
            src, dst = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.json")
            with open(src, "w", encoding="utf-8") as f:
                for _, text in rows:
                    f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
            subprocess.run(["node", os.path.join(langid_data.NPM_DIR, "detect.mjs"),
                            ",".join(labels), src, dst], check=True)
            with open(dst, encoding="utf-8") as f:
                out[name] = json.load(f)
    return out


def peer_table(sets, ours, peers):
    """Markdown: one row per system, one column per set (accuracy, correct/total)."""
    names = list(sets)
    systems = ["encoderd langid"] + list(next(iter(peers.values())))
    lines = ["| system | " + " | ".join(names) + " |",
             "|---|" + "---:|" * len(names)]
    for system in systems:
        cells = []
        for name in names:
            gold = [lab for lab, _ in sets[name]]
            pred = ours[name] if system == "encoderd langid" else peers[name][system]
            ok = sum(p == g for p, g in zip(pred, gold))
            cells.append("%.2f%% (%d/%d)" % (100.0 * ok / max(1, len(gold)), ok, len(gold)))
        lines.append("| %s | %s |" % (system, " | ".join(cells)))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", default="models/langid")
    ap.add_argument("--data", default="build/langid-data")
    ap.add_argument("--smoke", default=os.path.join(HERE, "smoke_sentences.tsv"))
    ap.add_argument("--everyday", default=os.path.join(HERE, "everyday_sentences.tsv"))
    ap.add_argument("--sources", default=",".join(s.name for s in langid_sources.SOURCES),
                    help="test splits to evaluate, comma-separated")
    ap.add_argument("--recreate", action="store_true")
    ap.add_argument("--no-install", action="store_true")
    ap.add_argument("--min-accuracy", type=float, default=0.0)
    ap.add_argument("--min-smoke-accuracy", type=float, default=0.0)
    ap.add_argument("--min-everyday-accuracy", type=float, default=0.0)
    ap.add_argument("--peers", action="store_true",
                    help="compare with eld, tinyld and franc from npm on every set")
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
    missing = [s for s in sources if args.recreate or not os.path.exists(paths[s.name])]
    tests = recreate_tests(missing, paths, not args.no_install)
    tests.update({s.name: langid_data.read_jsonl(paths[s.name])
                  for s in sources if s.name not in tests})

    def classify(rows):
        encoded = [tok.encode(text, max_tokens) for _, text in rows]
        preds, logits = lm.predict(model, encoded)
        return [labels[p] for p in preds], encoded, logits

    all_gold, all_pred = [], []
    sets, ours = {}, {}
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
        sets[source.name + " test"], ours[source.name + " test"] = rows, pred
    report(" + ".join(s.name for s in sources) + " test", labels, all_gold, all_pred)
    real = [s.name for s in sources if s.name not in langid_sources.WORD_SOURCES]
    gold = [lab for name in real for lab, _ in sets[name + " test"]]
    pred = [p for name in real for p in ours[name + " test"]]
    total = sum(p == g for p, g in zip(pred, gold)) / max(1, len(gold))
    first = ["catalog", "prose", "dialogue"]  # the test sets of the first models
    if len(sources) > 3 and all(name + " test" in sets for name in first):
        rows = [r for name in first for r in sets[name + " test"]]
        report(" + ".join(first) + " test (as in the earlier models' table)", labels,
               [lab for lab, _ in rows], [p for name in first for p in ours[name + " test"]])

    status = 0
    if total < args.min_accuracy:
        print("test accuracy %.4f (%s) is below --min-accuracy %.4f" % (
            total, " + ".join(real), args.min_accuracy))
        status = 1
    for name, path, minimum in (("smoke", args.smoke, args.min_smoke_accuracy),
                                ("everyday", args.everyday, args.min_everyday_accuracy)):
        rows = langid_data.read_smoke(path)
        pred, _, _ = classify(rows)
        sok, sn = report("%s sentences (%s)" % (name, path), labels,
                         [lab for lab, _ in rows], pred)
        for (lab, text), p in zip(rows, pred):
            if p != lab:
                print("  %s miss: %s -> %s  %s" % (name, lab, p, text))
        if sok / max(1, sn) < minimum:
            print("%s accuracy %.4f is below --min-%s-accuracy %.4f" % (
                name, sok / max(1, sn), name, minimum))
            status = 1
        sets[name], ours[name] = rows, pred

    if args.peers:
        peers = run_peers(labels, sets)
        print(peer_table(sets, ours, peers) + "\n")
        for system, pred in peers["everyday"].items():
            misses = ["%s -> %s %s" % (lab, p or "?", text)
                      for (lab, text), p in zip(sets["everyday"], pred) if p != lab]
            print("%s everyday misses (%d): %s" % (system, len(misses), "; ".join(misses)))
    return status

if __name__ == "__main__":
    sys.exit(main())

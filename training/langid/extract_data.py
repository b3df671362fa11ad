#!/usr/bin/env python3
"""Extracts the langid corpus into DIR: from Debian gettext catalogs
train.jsonl, val.jsonl, test.jsonl ({"text", "label"} per line) and
spm_train.txt (catalog training texts, one per line, for spm_train); from
Debian's translated man pages (langid_prose.py) prose_train.jsonl,
prose_val.jsonl, prose_test.jsonl; from Wesnoth's translated story and
dialogue (langid_dialogue.py) dialogue_train.jsonl, dialogue_val.jsonl,
dialogue_test.jsonl; from three more games' dialogue (langid_games.py)
games_*.jsonl; from npm word-frequency lists (langid_words.py)
words_*.jsonl and words2_*.jsonl; from Debian's fortune-cookie packages
(langid_fortunes.py) fortunes_*.jsonl; manifest.json (package versions and per-split counts of
every source).

Usage: /usr/bin/python3 training/langid/extract_data.py [--out build/langid-data]
Installs the Debian packages with apt-get when missing (needs root then),
and the npm packages of training/langid/npm with `npm ci`.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import langid_data  # noqa: E402
import langid_sources  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="build/langid-data")
    ap.add_argument("--no-install", action="store_true",
                    help="do not run apt-get, use what is installed")
    args = ap.parse_args()
    if not args.no_install:
        for source in langid_sources.SOURCES:
            langid_data.ensure_packages(langid_sources.packages(source))
    os.makedirs(args.out, exist_ok=True)
    manifest = {"labels": langid_data.LABELS}
    built = {}
    for source in langid_sources.SOURCES:
        data, stats = langid_sources.build(source, built)
        built[source.name] = data
        for split, rows in data.items():
            langid_data.write_jsonl(os.path.join(args.out, source.prefix + split + ".jsonl"), rows)
        if source.name == "catalog":
            with open(os.path.join(args.out, "spm_train.txt"), "w", encoding="utf-8") as f:
                for _, text in data["train"]:
                    f.write(text + "\n")
        packages = (langid_data.package_versions(source.packages) if source.packages
                    else source.module.npm_versions())
        manifest[source.name] = {"packages": packages,
                                 "caps": source.module.CAPS, "stats": stats}
        if source.uses:  # words2: the rule that decides a shared word
            manifest[source.name]["uses"] = {
                "training splits of": list(source.uses),
                "min_uses": source.module.MIN_USES, "usage_ratio": source.module.USAGE_RATIO}
        for split in langid_data.SPLITS:
            print("%-8s %-5s %6d texts  %s" % (source.name, split, len(data[split]), " ".join(
                "%s=%d" % kv for kv in stats["kept"][split].items())), flush=True)
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)

if __name__ == "__main__":
    main()

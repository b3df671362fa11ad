#!/usr/bin/env python3
"""Extracts the langid corpus into DIR: from Debian gettext catalogs
train.jsonl, val.jsonl, test.jsonl ({"text", "label"} per line) and
spm_train.txt (catalog training texts, one per line, for spm_train); from
Debian's translated man pages (langid_prose.py) prose_train.jsonl,
prose_val.jsonl, prose_test.jsonl; manifest.json (package versions,
per-split counts of both sources).

Usage: /usr/bin/python3 training/langid/extract_data.py [--out build/langid-data]
Installs the catalog packages with apt-get when missing (needs root then).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import langid_data  # noqa: E402
import langid_prose  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="build/langid-data")
    ap.add_argument("--no-install", action="store_true",
                    help="do not run apt-get, use what is installed")
    args = ap.parse_args()
    if not args.no_install:
        langid_data.ensure_packages()
        langid_data.ensure_packages(langid_prose.MAN_PACKAGES)
    os.makedirs(args.out, exist_ok=True)
    data, stats = langid_data.build_corpus()
    for split, rows in data.items():
        langid_data.write_jsonl(os.path.join(args.out, split + ".jsonl"), rows)
    with open(os.path.join(args.out, "spm_train.txt"), "w", encoding="utf-8") as f:
        for _, text in data["train"]:
            f.write(text + "\n")
    prose, prose_stats = langid_prose.build_corpus()
    for split, rows in prose.items():
        langid_data.write_jsonl(os.path.join(args.out, "prose_" + split + ".jsonl"), rows)
    manifest = {"labels": langid_data.LABELS, "packages": langid_data.package_versions(),
                "caps": langid_data.CAPS, "stats": stats,
                "prose_packages": langid_data.package_versions(langid_prose.MAN_PACKAGES),
                "prose_caps": langid_prose.CAPS, "prose_stats": prose_stats}
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    for split in langid_data.SPLITS:
        print("%-5s %6d texts  %s" % (split, len(data[split]), " ".join(
            "%s=%d" % kv for kv in stats["kept"][split].items())))
    for split in langid_data.SPLITS:
        print("prose %-5s %6d texts  %s" % (split, len(prose[split]), " ".join(
            "%s=%d" % kv for kv in prose_stats["kept"][split].items())))


if __name__ == "__main__":
    main()

"""Builds the fortunes part of the langid corpus: sayings, proverbs, jokes,
quotes and short exchanges from Debian's fortune-cookie packages, written
in each language (not translated from one source): everyday written
language, "O que será que acontece se passarmos manteiga nas costas de um
gato?", that catalogs, man pages and game dialogue have little of.

| package | files under /usr/share/games/fortunes | licence | label |
| --- | --- | --- | --- |
| fortunes-min | fortunes, literature, riddles | BSD | en |
| fortunes-de | de/* | GPL-2+ | de |
| fortunes-es | es/*.fortunes (not es/off, the offensive section) | GPL-2+ | es |
| fortunes-it | it/* | public domain | it |
| fortunes-br | brasil | GPL-2+ | pt |
| fortunes-pl | pl/* | GPL-2+ | pl |
| fortunes-ru | ru/* | GPL-2 | ru |
| fortunes-cs | cs/* (Czech; the Slovak sk/ and the *-sk files left out) | GPL-3+ | cs |

Debian 12 has no fortunes in fr, nl, uk, sv, tr, ja or ko (fortunes-zh is
traditional-script classical poetry, so zh is left out too): this source
adds text for eight of the 16 labels. Stages 1-7 kept it for evaluation
only (training on it might tie chatty text to those eight labels); stage 8
trains on its training split, and its test split stays held out
(models/langid/README.md has what that gained and cost).

Each file is split into entries at lines holding only "%"; attribution
lines ("-- Author", "— Author") and chat nicknames ("<nick> ") are dropped,
blank lines separate paragraphs, and each paragraph is split into sentences
with langid_prose.sentences (from 12 characters and 2 words, in the label's
script, not left in English). The files quote English (error messages, IRC
lines): outside en, an entry or a sentence with a word of _ENGLISH in every
fifth word is left out; so are sentences with mojibake (UTF-8 read as
Latin-1). Split BY ENTRY (sha1(file name, entry) % 10:
0 test, 1 validation, else train), so the sentences of one joke share a
split; deduplicated and capped per language like the other sources.
"""
import collections
import glob
import os
import re

import langid_data
import langid_prose

ROOT = "/usr/share/games/fortunes"
# label -> (package, globs under ROOT)
FILES = {
    "en": ("fortunes-min", ["fortunes", "literature", "riddles"]),
    "de": ("fortunes-de", ["de/*"]),
    "es": ("fortunes-es", ["es/*.fortunes"]),
    "it": ("fortunes-it", ["it/*"]),
    "pt": ("fortunes-br", ["brasil"]),
    "pl": ("fortunes-pl", ["pl/*"]),
    "ru": ("fortunes-ru", ["ru/*"]),
    "cs": ("fortunes-cs", ["cs/*"]),
}
PACKAGES = sorted({package for package, _ in FILES.values()})
CAPS = {"train": 3000, "val": 300, "test": 500}
MIN_CHARS, MIN_WORDS = 12, 2
_ATTRIBUTION = re.compile(r"^\s*(--|—|―|~~)\s*\S")
_NICK = re.compile(r"^\s*(<[^>\s]{1,30}>|\[[0-9:]{4,8}\])\s*")
_MOJIBAKE = re.compile("[ÃÂ][\u0080-\u00bf]")  # UTF-8 read as Latin-1 (a few it files)
# English words that are no word of de, es, it, pt, pl, ru or cs: the files
# of those languages quote English (error messages, IRC lines, film titles).
_ENGLISH = set("the and is are was were you your what why it it's don't i'm i've "
               "of with this that have has not be will can do does".split())


def files():
    """[(label, path)] of the fortune files read, in a fixed order."""
    out = []
    for label, (_, patterns) in FILES.items():
        for pattern in patterns:
            for path in sorted(glob.glob(os.path.join(ROOT, pattern))):
                name = os.path.basename(path)
                if os.path.isfile(path) and "." not in name.replace(".fortunes", "") \
                        and not name.endswith("-sk"):
                    out.append((label, path))
    return out


def entries(text):
    """The entries of a fortune file, each a list of paragraphs."""
    out = []
    for entry in re.split(r"(?m)^%\s*$", text):
        paragraphs, lines = [], []
        for line in entry.split("\n") + [""]:
            line = _NICK.sub("", line.rstrip())
            if _ATTRIBUTION.match(line):
                continue
            if line.strip():
                lines.append(line.strip())
            elif lines:
                paragraphs.append(" ".join(lines))
                lines = []
        if paragraphs:
            out.append(paragraphs)
    return out


def _english(text):
    """Whether a text of another label quotes English: an English word in
    every fifth word or more."""
    words = re.findall(r"[a-z']+", text.lower())
    hits = sum(w in _ENGLISH for w in words)
    return hits >= 1 and hits >= 0.2 * len(words)


def build_corpus(log=print):
    """Returns ({split: [(label, text), ...]}, stats) from the installed
    fortune packages."""
    found = files()
    absent = sorted({FILES[label][0] for label in FILES} - {FILES[label][0] for label, _ in found})
    if absent:
        raise SystemExit("langid: no fortune file of %s under %s" % (absent, ROOT))
    candidates = collections.defaultdict(set)
    counts = collections.Counter()
    for label, path in found:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for entry in entries(text):
            counts[label] += 1
            split = langid_data.split_of(os.path.basename(path) + "\n" + "\n".join(entry))
            if label != "en" and _english(" ".join(entry)):
                continue
            for paragraph in entry:
                for sent in langid_prose.sentences(paragraph, label, MIN_CHARS, MIN_WORDS):
                    if not _MOJIBAKE.search(sent) and (label == "en" or not _english(sent)):
                        candidates[(label, sent)].add(split)
    data, stats = langid_data.finalize_splits(candidates, CAPS)
    stats.update(files=len(found), entries=dict(counts))
    return data, stats

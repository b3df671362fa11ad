"""Builds the dialogue part of the langid corpus from the translations of
Battle for Wesnoth (Debian's wesnoth-1.16-data and some campaign packages).

The gettext catalogs (langid_data.py) are UI strings and the man pages
(langid_prose.py) technical prose; neither has everyday speech: greetings,
questions, exclamations, narration. Wesnoth's campaigns are story and
dialogue translated into all 16 labels' languages ("Alas, Westin has
fallen!", "Where are you going?"), so they fill that gap without tying
chatty text to a subset of the labels.

Pipeline: msgunfmt every wesnoth-*.mo of DOMAINS (the same PO parser as the
catalogs) -> split each string into sentences (langid_prose.sentences, here
from MIN_CHARS characters and MIN_WORDS words so short lines stay) -> keep
sentences in the label's script that are not left in English -> split BY
SOURCE STRING like the catalogs (sha1(msgid) % 10) so all translations of one
line share a split -> deduplicate and cap like the catalogs.
"""
import collections
import os

import langid_data
import langid_prose

# Packages that ship the translations read here.
PACKAGES = [
    "wesnoth-1.16-data", "wesnoth-1.16-ei", "wesnoth-1.16-httt",
    "wesnoth-1.16-sof", "wesnoth-1.16-trow", "wesnoth-1.16-tsg",
    "wesnoth-1.16-ttb",
]
LOCALE_DIR = "/usr/share/games/wesnoth/1.16/locale"
# Story, dialogue and descriptions; the editor's and the engine's UI strings
# (wesnoth-editor, wesnoth-lib) are left out.
DOMAINS = [
    "wesnoth", "wesnoth-anl", "wesnoth-ei", "wesnoth-help", "wesnoth-httt",
    "wesnoth-multiplayer", "wesnoth-sof", "wesnoth-tb", "wesnoth-trow",
    "wesnoth-tsg", "wesnoth-tutorial", "wesnoth-units", "wesnoth-wc",
]
CAPS = {"train": 5000, "val": 300, "test": 500}
MIN_CHARS, MIN_WORDS = 12, 2


def _paragraphs(text):
    """Lines of a catalog string, joined where a sentence continues."""
    return [p.strip() for p in text.replace("\r", "\n").split("\n\n") if p.strip()]


def _sentences(text, label):
    out = []
    for para in _paragraphs(text):
        para = " ".join(para.split())
        out += langid_prose.sentences(para, label, MIN_CHARS, MIN_WORDS)
    return out


def corpus_from_catalogs(catalogs, caps, skip=None):
    """({split: [(label, text)]}, stats) from (label, .mo path) pairs of
    translated story and dialogue: each string split into sentences in its
    label's script (the English ones from the msgids), a translation's
    sentence dropped when the English source has it too, split by source
    string, deduplicated and capped. skip(msgid, msgstr): entries to leave out."""
    candidates = collections.defaultdict(set)
    english = {}  # msgid -> its English sentences
    for label, path in catalogs:
        for msgid, msgstr in langid_data.read_catalog(path):
            if skip is not None and skip(msgid, msgstr):
                continue
            if msgid not in english:
                english[msgid] = _sentences(msgid, "en")
            source = set(english[msgid])
            split = langid_data.split_of(msgid)
            for sent in _sentences(msgstr, label):
                if sent not in source:
                    candidates[(label, sent)].add(split)
    for msgid, sents in english.items():
        for sent in sents:
            candidates[("en", sent)].add(langid_data.split_of(msgid))
    return langid_data.finalize_splits(candidates, caps)


def build_corpus(log=print):
    """Returns ({split: [(label, text), ...]}, stats) from the installed
    Wesnoth translations."""
    found, missing = [], []
    for domain in DOMAINS:
        for label, locales in langid_data.LANGUAGES.items():
            for loc in locales:
                path = os.path.join(LOCALE_DIR, loc, "LC_MESSAGES", domain + ".mo")
                (found if os.path.exists(path) else missing).append((label, path))
    if not found:
        raise SystemExit("langid: no Wesnoth catalog under %s (packages %s)"
                         % (LOCALE_DIR, PACKAGES))
    data, stats = corpus_from_catalogs(found, CAPS)
    stats.update(catalogs=dict(collections.Counter(label for label, _ in found)),
                 catalogs_absent=len(missing))
    return data, stats

"""Builds the games part of the langid corpus: the translated dialogue and
story of three more games in Debian, for everyday speech beyond Wesnoth's
(langid_dialogue.py): "Glad to meet you.", "Did you bring the sugar?",
"Sorry, pal.", "Greetings, strangers!".

| package | catalogs | licence | languages of the 16 |
| --- | --- | --- | --- |
| cataclysm-dda-data | /usr/share/locale/<L>/LC_MESSAGES/cataclysm-dda.mo (NPC dialogue, item and event descriptions) | CC-BY-SA-3.0 | 15 (no sv; nl, uk, cs, tr thin) |
| freedroidrpg-data | /usr/share/locale/<L>/LC_MESSAGES/freedroidrpg-dialogs.mo | GPL-2+ | 9: en de fr es it pt ru cs sv |
| widelands-data | /usr/share/games/widelands/data/locale/<L>/LC_MESSAGES/scenario_*.mo (campaign story) | GPL-2+ | 16 (uk, tr, zh thin) |

No game covers all 16 languages richly; each language is capped
(CAPS), so the languages with most text do not outweigh the others, and the
word source (langid_words.py) gives every language the same everyday
vocabulary. Locales: a label's own (de, pt_BR, ...) plus its country variants
(es_AR, es_ES, it_IT, uk_UA, pt_PT), but zh is zh_CN only (simplified).

Pipeline as for Wesnoth: strings with printf/brace/dollar placeholders or
markup are skipped (cutting the placeholder out leaves broken text), each
string is split into sentences (langid_prose.sentences: label's script, not
left in English), split BY SOURCE STRING (sha1(msgid) % 10) so that all
translations of a line share a split, deduplicated and capped per language.
"""
import collections
import glob
import os
import re

import langid_data
import langid_dialogue

PACKAGES = ["cataclysm-dda-data", "freedroidrpg-data", "widelands-data"]
# (name, glob of the catalogs with {loc} for the locale directory)
CATALOG_GLOBS = [
    ("cataclysm-dda", "/usr/share/locale/{loc}/LC_MESSAGES/cataclysm-dda.mo"),
    ("freedroidrpg", "/usr/share/locale/{loc}/LC_MESSAGES/freedroidrpg-dialogs.mo"),
    ("widelands", "/usr/share/games/widelands/data/locale/{loc}/LC_MESSAGES/scenario_*.mo"),
]
CAPS = {"train": 5000, "val": 300, "test": 500}
# printf (%s, %1$d), braces ({name}), dollar variables, tags, game escapes.
_PLACEHOLDER = re.compile(r"%[-0-9.$]*[a-zA-Z]|\{[^}]*\}|\$|<[^>]*>|\[[^\]]*\]|&|\\|\|")


def locale_labels(root_glob):
    """{locale directory: label} for the locales of root_glob's catalogs."""
    base = root_glob.split("{loc}")[0]
    out = {}
    for loc in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        lang = loc.split("_")[0].split("@")[0]
        if lang == "zh":
            if loc == "zh_CN":
                out[loc] = "zh"
        elif lang in langid_data.LANGUAGES and lang != "en":
            out[loc] = lang
    return out


def build_corpus(log=print):
    """Returns ({split: [(label, text), ...]}, stats) from the installed games."""
    found, catalogs = [], collections.Counter()
    for name, pattern in CATALOG_GLOBS:
        for loc, label in locale_labels(pattern).items():
            for path in sorted(glob.glob(pattern.format(loc=loc))):
                found.append((label, path))
                catalogs["%s/%s" % (name, label)] += 1
    absent = [name for name, _ in CATALOG_GLOBS
              if not any(key.startswith(name + "/") for key in catalogs)]
    if absent:
        # A missing game would change every split without a word.
        raise SystemExit("langid: no catalog of %s (packages %s)" % (absent, PACKAGES))
    data, stats = langid_dialogue.corpus_from_catalogs(
        found, CAPS, skip=lambda msgid, msgstr: bool(
            _PLACEHOLDER.search(msgid) or _PLACEHOLDER.search(msgstr)))
    stats.update(catalogs=dict(catalogs))
    return data, stats

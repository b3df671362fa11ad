"""The corpus sources of the langid data, in one table: name, file prefix of
their splits in the data directory, the module that builds them, the Debian
packages they read, and the other sources whose training split they use
(words2 decides shared words by the Debian sources' texts)."""
import collections

import langid_data
import langid_dialogue
import langid_fortunes
import langid_games
import langid_prose
import langid_words

Source = collections.namedtuple("Source", "name prefix module packages uses")

SOURCES = [
    Source("catalog", "", langid_data, langid_data.PACKAGES, ()),
    Source("prose", "prose_", langid_prose, langid_prose.MAN_PACKAGES, ()),
    Source("dialogue", "dialogue_", langid_dialogue, langid_dialogue.PACKAGES, ()),
    Source("games", "games_", langid_games, langid_games.PACKAGES, ()),
    Source("words", "words_", langid_words, langid_words.PACKAGES, ()),
    Source("words2", "words2_", langid_words, langid_words.PACKAGES, langid_words.USAGE_SOURCES),
    Source("fortunes", "fortunes_", langid_fortunes, langid_fortunes.PACKAGES, ()),
]
BY_NAME = {s.name: s for s in SOURCES}
WORD_SOURCES = ("words", "words2")  # made-up texts of frequent words, not running text


def packages(source):
    """The Debian packages building `source` reads, with those of the
    sources it uses."""
    names = set(source.packages)
    for name in source.uses:
        names |= set(BY_NAME[name].packages)
    return sorted(names)


def build(source, built=None):
    """({split: [(label, text), ...]}, stats) of `source`. `built` is
    {name: data} of sources built before; a source it uses and that is not
    there is built (and added to it)."""
    if not source.uses:
        return source.module.build_corpus()
    built = {} if built is None else built
    for name in source.uses:
        if name not in built:
            built[name] = build(BY_NAME[name], built)[0]
    return source.module.build_corpus_by_usage({name: built[name]["train"] for name in source.uses})


def select(names):
    """The sources named in a comma-separated list, in table order."""
    wanted = set(names.split(",")) if isinstance(names, str) else set(names)
    unknown = wanted - set(BY_NAME)
    if unknown:
        raise SystemExit("langid: unknown source(s) %s; known: %s"
                         % (sorted(unknown), ", ".join(BY_NAME)))
    return [s for s in SOURCES if s.name in wanted]

"""The corpus sources of the langid data, in one table: name, file prefix of
their splits in the data directory, the module that builds them
(build_corpus()), and the Debian packages that module reads."""
import collections

import langid_data
import langid_dialogue
import langid_games
import langid_prose
import langid_words

Source = collections.namedtuple("Source", "name prefix module packages")

SOURCES = [
    Source("catalog", "", langid_data, langid_data.PACKAGES),
    Source("prose", "prose_", langid_prose, langid_prose.MAN_PACKAGES),
    Source("dialogue", "dialogue_", langid_dialogue, langid_dialogue.PACKAGES),
    Source("games", "games_", langid_games, langid_games.PACKAGES),
    Source("words", "words_", langid_words, langid_words.PACKAGES),
]
BY_NAME = {s.name: s for s in SOURCES}


def select(names):
    """The sources named in a comma-separated list, in table order."""
    wanted = set(names.split(",")) if isinstance(names, str) else set(names)
    unknown = wanted - set(BY_NAME)
    if unknown:
        raise SystemExit("langid: unknown source(s) %s; known: %s"
                         % (sorted(unknown), ", ".join(BY_NAME)))
    return [s for s in SOURCES if s.name in wanted]

#!/usr/bin/env python3
"""The words2 rule of training/langid/langid_words.py on made-up lists and
texts: which label a word in several lists goes to, how it is spelt, how it
is split, and Turkish casing."""
import pathlib
import sys
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "training" / "langid"))
import langid_data  # noqa: E402
import langid_words  # noqa: E402

decide = langid_words.decide_by_usage


def rows(label, text, times=1):
    return [(label, text)] * times


class DecideByUsage(unittest.TestCase):
    def test_shared_word_goes_to_the_label_whose_texts_use_it_more_per_word(self):
        raw = {"ru": ["я", "не", "что"], "uk": ["я", "не", "що"]}
        # ru: 20 texts of 5 words, я 20 times (0.2 a word); uk: 100 texts of
        # 5 words, я 20 times (0.04 a word): the same count, 5x the rate.
        texts = rows("ru", "я не знаю что это", 20) + rows("uk", "я не знаю що це", 20) \
            + rows("uk", "не знаю що це тут", 80)
        out = decide(raw, texts)
        self.assertEqual(out["ru"], ["я", "что"])  # не: 0.2 against 0.2 a word, neither
        self.assertEqual(out["uk"], ["що"])

    def test_a_ratio_just_below_the_threshold_drops_the_word(self):
        raw = {"ru": ["я"], "uk": ["я"]}
        # я: 20 uses in 100 ru words, 21 in 500 uk words: 4.76x < 5x.
        texts = rows("ru", "я не знаю что это", 20) + rows("uk", "я не знаю що це", 21) \
            + rows("uk", "не знаю що це тут", 79)
        self.assertEqual(decide(raw, texts), {"ru": [], "uk": []})

    def test_min_uses_is_the_least_count_that_keeps_a_shared_word(self):
        raw = {"es": ["casa", "perro"], "pt": ["casa", "cão"]}
        texts = rows("pt", "o cão é grande", 5)
        for uses, kept in ((langid_words.MIN_USES - 1, ["perro"]),
                           (langid_words.MIN_USES, ["casa", "perro"])):
            out = decide(raw, texts + rows("es", "la casa es grande", uses))
            self.assertEqual(out["es"], kept, uses)
            self.assertEqual(out["pt"], ["cão"])

    def test_a_word_after_an_elision_counts(self):
        raw = {"it": ["ora", "anno"], "pt": ["ora", "ano"]}
        texts = rows("it", "è l’ora di cena", 3) + rows("pt", "o ano novo", 3)
        self.assertEqual(decide(raw, texts)["it"], ["ora", "anno"])

    def test_words_are_capitalised_only_where_sentences_do_it_inside(self):
        raw = {"de": ["abend", "nein", "ich"], "en": ["ich", "i"]}
        texts = (rows("de", "Guten Abend, sagte ich.", 3)
                 + rows("de", "Nein. Nein, ich komme heute Abend nicht.", 3)
                 + rows("de", "Er sagte: „Nein“ und ging… Nein?", 3)
                 + rows("en", "Then I left, as I said.", 2))
        out = decide(raw, texts)
        self.assertEqual(out["de"], ["Abend", "nein", "ich"])
        self.assertEqual(out["en"], ["I"])

    def test_an_all_caps_spelling_is_not_taken(self):
        raw = {"es": ["orden"]}
        texts = rows("es", "una ORDEN nueva", 5)
        self.assertEqual(decide(raw, texts)["es"], ["orden"])

    def test_japanese_and_chinese_count_substrings_per_character(self):
        raw = {"ja": ["時間"], "zh": ["時間"]}
        # ja: 10 uses in 10 texts of 20 characters (0.05 a character); zh:
        # 10 uses in 10 texts of 2 characters (0.5): zh, though the counts
        # per text are equal.
        texts = rows("ja", "時間がありませんでしたからまた明日来ます", 10) + rows("zh", "時間", 10)
        self.assertEqual(decide(raw, texts), {"ja": [], "zh": ["時間"]})

    def test_turkish_words_are_counted_and_spelt_with_turkish_casing(self):
        raw = {"tr": ["iyi", "ılık"], "en": ["iyi"]}
        texts = rows("tr", "İyi akşamlar. Su ILIK ve İYİ.", 3) + rows("en", "good evening", 3)
        self.assertEqual(decide(raw, texts)["tr"], ["iyi", "ılık"])
        self.assertEqual(langid_words._lower("tr", "İYİ ILIK"), "iyi ılık")
        self.assertEqual(langid_words._lower("en", "I’M"), "i'm")


class Texts(unittest.TestCase):
    def test_turkish_dotted_and_dotless_i(self):
        up = langid_words._upper_first
        self.assertEqual(up("tr", "iyi akşamlar"), "İyi akşamlar")
        self.assertEqual(up("tr", "ılık"), "Ilık")
        self.assertEqual(up("en", "it is"), "It is")
        self.assertEqual(up("tr", ""), "")

    def test_a_spelt_word_splits_like_its_lowercase_form(self):
        words = ["Abend", "nein", "Haus", "Zeit", "Tag", "Weg", "Welt", "Frau", "Mann", "Kind"]
        data, _ = langid_words._corpus({"de": words}, langid_words._lower,
                                       langid_words._upper_first)
        split = {w: langid_data.split_of("de\t" + w.lower()) for w in words}
        for name, texts in data.items():
            for _, text in texts:
                for token in text.rstrip(".!?").split():
                    spelt = next(w for w in words if w.lower() == token.lower())
                    self.assertEqual(split[spelt], name, text)


if __name__ == "__main__":
    unittest.main()

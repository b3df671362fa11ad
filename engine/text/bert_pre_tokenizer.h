// The BasicTokenizer half of BERT's tokenizer, by one of two sets of rules
// (BertRules): drop NUL, U+FFFD and control characters, map whitespace to
// ' ', surround CJK ideographs with spaces, split on whitespace, optionally
// lower-case and optionally NFD + drop non-spacing marks (strip accents),
// then split every punctuation character into its own word.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace encoderd {

// Whose rules. They differ on a few characters: kPython composes the text
// (NFC) first, lower-cases Greek capital sigma at a word's end to final
// sigma, drops unassigned code points (Cn) as control characters and counts
// U+2B820-U+2B91F as CJK; kTokenizers does none of these (so decomposed
// accents stay apart, and an unassigned character makes its word [UNK]),
// and takes Unicode's White_Space for whitespace.
enum class BertRules {
  // Hugging Face's slow BasicTokenizer (tokenization_bert.py): vocab.txt
  // models.
  kPython,
  // The tokenizers library's BertNormalizer and BertPreTokenizer (what
  // BertTokenizerFast runs): tokenizer.json models.
  kTokenizers,
};

// `text` is a sequence of Unicode scalar values. Returns the words, in order,
// none of them empty. Thread-safe (ICU's normalizers are immutable singletons).
std::vector<std::u32string> BertPreTokenize(std::u32string_view text, bool lower_case,
                                            bool strip_accents,
                                            BertRules rules = BertRules::kPython);

// The tokenizers library's BertNormalizer, in its order: NUL, U+FFFD and
// control characters dropped, whitespace made ' ', spaces around CJK
// ideographs, then (strip_accents) NFD and non-spacing marks dropped, then
// (lower_case) each character lower-cased alone (Rust's
// char::to_lowercase).
std::u32string BertNormalized(std::u32string_view text, bool lower_case, bool strip_accents);

// Whether lower-casing (Python's str.lower()) changes `word`: it has a
// capital letter, in any script.
bool ChangesWhenLowerCased(std::u32string_view word);

// Character classes of Hugging Face's tokenization_bert.py (kPython) or of
// the tokenizers library's bert.rs (kTokenizers); exposed for tests.
bool IsBertWhitespace(char32_t c, BertRules rules = BertRules::kPython);  // _is_whitespace
bool IsBertControl(char32_t c, BertRules rules = BertRules::kPython);     // _is_control
bool IsBertPunctuation(char32_t c);                                       // _is_punctuation
bool IsBertCjk(char32_t c, BertRules rules = BertRules::kPython);         // _is_chinese_char
// A character that stays in the middle of a word whatever surrounds it: not
// dropped (NUL, U+FFFD, control, non-spacing mark) and not a split point
// (whitespace, punctuation, CJK).
bool IsBertWordCharacter(char32_t c, BertRules rules = BertRules::kPython);

}  // namespace encoderd

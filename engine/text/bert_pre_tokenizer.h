// The BasicTokenizer half of BERT's tokenizer, as Hugging Face's
// BasicTokenizer.tokenize does it: drop NUL, U+FFFD and control characters,
// map whitespace to ' ', surround CJK ideographs with spaces, NFC, split on
// Python's whitespace, optionally lower-case and optionally NFD + drop
// non-spacing marks (strip accents), then split every punctuation character
// into its own word.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace encoderd {

// `text` is a sequence of Unicode scalar values. Returns the words, in order,
// none of them empty. Thread-safe (ICU's normalizers are immutable singletons).
std::vector<std::u32string> BertPreTokenize(std::u32string_view text, bool lower_case,
                                            bool strip_accents);

// Whether lower-casing (Python's str.lower()) changes `word`: it has a
// capital letter, in any script.
bool ChangesWhenLowerCased(std::u32string_view word);

// Character classes of Hugging Face's tokenization_bert.py (exposed for tests).
bool IsBertWhitespace(char32_t c);   // _is_whitespace
bool IsBertControl(char32_t c);      // _is_control
bool IsBertPunctuation(char32_t c);  // _is_punctuation
bool IsBertCjk(char32_t c);          // _is_chinese_char
// A character that stays in the middle of a word whatever surrounds it: not
// dropped (NUL, U+FFFD, control, non-spacing mark) and not a split point
// (whitespace, punctuation, CJK).
bool IsBertWordCharacter(char32_t c);

}  // namespace encoderd

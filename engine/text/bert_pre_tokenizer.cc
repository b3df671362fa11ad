#include "engine/text/bert_pre_tokenizer.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

namespace encoderd {
namespace {

// Python's str.isspace(), which str.split() and str.strip() use.
bool IsPythonSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

std::u16string ToUtf16(std::u32string_view text) {
  std::u16string out;
  out.reserve(text.size());
  for (char32_t c : text) {
    if (c < 0x10000) {
      out.push_back(static_cast<char16_t>(c));
    } else {
      c -= 0x10000;
      out.push_back(static_cast<char16_t>(0xd800 + (c >> 10)));
      out.push_back(static_cast<char16_t>(0xdc00 + (c & 0x3ff)));
    }
  }
  return out;
}

std::u32string ToUtf32(const std::u16string& text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    char32_t c = text[i];
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.size() && text[i + 1] >= 0xdc00 &&
        text[i + 1] <= 0xdfff) {
      c = 0x10000 + ((c - 0xd800) << 10) + (text[i + 1] - 0xdc00);
      ++i;
    }
    out.push_back(c);
  }
  return out;
}

// Runs an ICU "preflight then fill" string function; returns `input` unchanged
// if ICU reports an error (it cannot for valid scalar values).
template <typename Fn>
std::u16string RunIcu(const std::u16string& input, Fn fn) {
  std::u16string out(input.size() + 16, u'\0');
  UErrorCode err = U_ZERO_ERROR;
  int32_t n = fn(input, &out, &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) {
    out.resize(n);
    err = U_ZERO_ERROR;
    n = fn(input, &out, &err);
  }
  if (U_FAILURE(err)) return input;
  out.resize(n);
  return out;
}

std::u16string Normalize(const UNormalizer2* normalizer, const std::u16string& text) {
  if (normalizer == nullptr) return text;
  return RunIcu(text, [normalizer](const std::u16string& in, std::u16string* out, UErrorCode* e) {
    return unorm2_normalize(normalizer, in.data(), static_cast<int32_t>(in.size()), out->data(),
                            static_cast<int32_t>(out->size()), e);
  });
}

const UNormalizer2* Nfc() {
  static const UNormalizer2* const kNfc = [] {
    UErrorCode err = U_ZERO_ERROR;
    const UNormalizer2* n = unorm2_getNFCInstance(&err);
    return U_SUCCESS(err) ? n : nullptr;
  }();
  return kNfc;
}

const UNormalizer2* Nfd() {
  static const UNormalizer2* const kNfd = [] {
    UErrorCode err = U_ZERO_ERROR;
    const UNormalizer2* n = unorm2_getNFDInstance(&err);
    return U_SUCCESS(err) ? n : nullptr;
  }();
  return kNfd;
}

// Python's str.lower() (full case mapping with Final_Sigma; root locale).
std::u16string Lower(const std::u16string& word) {
  return RunIcu(word, [](const std::u16string& in, std::u16string* out, UErrorCode* e) {
    return u_strToLower(out->data(), static_cast<int32_t>(out->size()), in.data(),
                        static_cast<int32_t>(in.size()), "", e);
  });
}

// NFD and removal of category Mn: _run_strip_accents.
std::u32string StripAccents(const std::u16string& word) {
  std::u32string out;
  for (char32_t c : ToUtf32(Normalize(Nfd(), word))) {
    if (u_charType(static_cast<UChar32>(c)) != U_NON_SPACING_MARK) out.push_back(c);
  }
  return out;
}

// BasicTokenizer.tokenize's casing of one word: lower-cased, then accents
// stripped, each if asked.
std::u32string Cased(const std::u32string& word, bool lower_case, bool strip_accents) {
  std::u16string utf16 = ToUtf16(word);
  if (lower_case) utf16 = Lower(utf16);
  return strip_accents ? StripAccents(utf16) : ToUtf32(utf16);
}

// Rust's char::to_lowercase of each character alone: the full mapping, with
// no context (so no Final_Sigma). The only unconditional full mapping that
// differs from the simple one is U+0130's.
void AppendLowerCased(char32_t c, std::u32string* out) {
  if (c == 0x130) {
    out->append(U"i\u0307");
  } else {
    out->push_back(static_cast<char32_t>(u_tolower(static_cast<UChar32>(c))));
  }
}

// _clean_text and _tokenize_chinese_chars (BertNormalizer's do_clean_text
// and do_handle_chinese_chars): drop NUL, U+FFFD and control characters, map
// whitespace to ' ', put spaces around CJK ideographs.
std::u32string CleanText(std::u32string_view text, BertRules rules) {
  std::u32string cleaned;
  cleaned.reserve(text.size());
  for (char32_t c : text) {
    if (c == 0 || c == 0xfffd || IsBertControl(c, rules)) continue;
    if (IsBertWhitespace(c, rules)) {
      cleaned.push_back(' ');
    } else if (IsBertCjk(c, rules)) {
      cleaned.push_back(' ');
      cleaned.push_back(c);
      cleaned.push_back(' ');
    } else {
      cleaned.push_back(c);
    }
  }
  return cleaned;
}

// BertNormalizer and BertPreTokenizer (split on whitespace, isolate
// punctuation).
std::vector<std::u32string> TokenizersPreTokenize(std::u32string_view text, bool lower_case,
                                                  bool strip_accents) {
  constexpr BertRules kRules = BertRules::kTokenizers;
  const std::u32string normalized = BertNormalized(text, lower_case, strip_accents);
  std::vector<std::u32string> words;
  std::u32string current;
  const auto flush = [&] {
    if (!current.empty()) words.push_back(std::move(current));
    current.clear();
  };
  for (char32_t c : normalized) {
    if (IsBertWhitespace(c, kRules)) {
      flush();
    } else if (IsBertPunctuation(c)) {
      flush();
      words.emplace_back(1, c);
    } else {
      current.push_back(c);
    }
  }
  flush();
  return words;
}

}  // namespace

std::u32string BertNormalized(std::u32string_view text, bool lower_case, bool strip_accents) {
  std::u32string cleaned = CleanText(text, BertRules::kTokenizers);
  if (strip_accents) cleaned = StripAccents(ToUtf16(cleaned));
  if (!lower_case) return cleaned;
  std::u32string normalized;
  normalized.reserve(cleaned.size());
  for (char32_t c : cleaned) AppendLowerCased(c, &normalized);
  return normalized;
}

bool ChangesWhenLowerCased(std::u32string_view word) {
  for (const char32_t c : word) {
    if (u_tolower(static_cast<UChar32>(c)) != static_cast<UChar32>(c)) return true;
  }
  return false;
}

bool IsBertWordCharacter(char32_t c, BertRules rules) {
  return c != 0 && c != 0xFFFD && !IsBertWhitespace(c, rules) && !IsBertControl(c, rules) &&
         !IsBertPunctuation(c) && !IsBertCjk(c, rules) &&
         u_charType(static_cast<UChar32>(c)) != U_NON_SPACING_MARK;
}

bool IsBertWhitespace(char32_t c, BertRules rules) {
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return true;
  if (rules == BertRules::kTokenizers) return u_isUWhiteSpace(static_cast<UChar32>(c));
  return u_charType(static_cast<UChar32>(c)) == U_SPACE_SEPARATOR;
}

bool IsBertControl(char32_t c, BertRules rules) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  // Python's category "C*"; the unicode_categories crate's is_other, which
  // bert.rs calls, is Cc, Cf and Co only.
  const uint32_t mask =
      rules == BertRules::kTokenizers ? U_GC_CC_MASK | U_GC_CF_MASK | U_GC_CO_MASK : U_GC_C_MASK;
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & mask) != 0;
}

bool IsBertPunctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
      (c >= 123 && c <= 126)) {
    return true;
  }
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_P_MASK) != 0;
}

bool IsBertCjk(char32_t c, BertRules rules) {
  // bert.rs starts the range tokenization_bert.py starts at U+2B820 at U+2B920.
  const char32_t extension_e = rules == BertRules::kTokenizers ? 0x2B920 : 0x2B820;
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= extension_e && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::vector<std::u32string> BertPreTokenize(std::u32string_view text, bool lower_case,
                                            bool strip_accents, BertRules rules) {
  if (rules == BertRules::kTokenizers)
    return TokenizersPreTokenize(text, lower_case, strip_accents);
  const std::u32string cleaned = CleanText(text, rules);
  const std::u32string normalized = ToUtf32(Normalize(Nfc(), ToUtf16(cleaned)));

  std::vector<std::u32string> words;
  size_t i = 0;
  while (i < normalized.size()) {
    while (i < normalized.size() && IsPythonSpace(normalized[i])) ++i;
    size_t end = i;
    while (end < normalized.size() && !IsPythonSpace(normalized[end])) ++end;
    if (end == i) break;
    std::u32string token = normalized.substr(i, end - i);
    i = end;
    if (lower_case || strip_accents) token = Cased(token, lower_case, strip_accents);
    // _run_split_on_punc; the final whitespace_tokenize drops empty pieces
    // and splits again on any whitespace that case mapping produced.
    std::u32string current;
    const auto flush = [&] {
      if (!current.empty()) words.push_back(std::move(current));
      current.clear();
    };
    for (char32_t c : token) {
      if (IsBertPunctuation(c)) {
        flush();
        words.emplace_back(1, c);
      } else if (IsPythonSpace(c)) {
        flush();
      } else {
        current.push_back(c);
      }
    }
    flush();
  }
  return words;
}

}  // namespace encoderd

// A built-in multilingual word list for generated request texts: common words
// of the sixteen languages the bundled langid model knows, so that generated
// texts tokenise like real text (token counts grow with the word count).
#pragma once

#include <string_view>
#include <vector>

namespace encoderd::loadtest {

struct LanguageWords {
  std::string_view language;  // ISO 639-1 code
  std::vector<std::string_view> words;
};

// Every language has at least 20 words; the list lives for the program.
const std::vector<LanguageWords>& BuiltinWordList();

}  // namespace encoderd::loadtest

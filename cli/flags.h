// How the commands read their arguments (encode, inspect, bench): each flag
// is declared with where its value goes and how it is checked, positional
// arguments in order; an error names the flag and the value. `serve` reads
// its flags through the config table instead (server/config/config_loader.h),
// where every flag is also a config key and an ENCODERD_* variable.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "server/config/config.h"  // ParseInt, ParseDouble

namespace encoderd::server {

class Flags {
 public:
  // --name (no value) sets *out to true.
  void Switch(const std::string& name, bool* out);
  // --name VALUE; a repeated flag keeps the last value.
  void String(const std::string& name, std::string* out);
  // --name VALUE, repeatable: each value appended.
  void Strings(const std::string& name, std::vector<std::string>* out);
  // --name N: an integer >= min that T holds (not cut to it: a --threads
  // of 2147483648 became INT_MIN).
  template <typename T>
  void Int(const std::string& name, T* out, int64_t min) {
    constexpr auto max = static_cast<int64_t>(std::numeric_limits<T>::max());
    Value(name, "an integer in " + std::to_string(min) + ".." + std::to_string(max),
          [out, min](const std::string& v) {
            int64_t n = 0;
            if (!ParseInt(v, &n) || n < min || n > max) return false;
            *out = static_cast<T>(n);
            return true;
          });
  }
  // --name X: a number >= min.
  void Number(const std::string& name, double* out, double min);
  // --name VALUE checked by `parse` (false: refused, `expected` says what
  // would do).
  void Value(const std::string& name, const std::string& expected,
             std::function<bool(const std::string&)> parse);
  // The next argument that is not a flag; `name` is for messages. Required
  // unless `optional`.
  void Positional(const std::string& name, std::string* out, bool optional = false);

  // Reads `args`: an empty string, or the first error ("--threads needs a
  // value", "--threads: 'x' is not an integer in 0..2147483647", "unknown option --x",
  // "missing MODEL_DIR", "unexpected argument 'y'").
  std::string Parse(const std::vector<std::string>& args) const;

 private:
  struct Flag {
    bool takes_value = true;
    std::string expected;
    std::function<bool(const std::string&)> apply;
  };
  struct Slot {
    std::string name;
    std::string* out;
    bool optional;
  };
  std::map<std::string, Flag> flags_;
  std::vector<Slot> positional_;
};

}  // namespace encoderd::server

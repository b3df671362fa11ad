#include "cli/flags.h"

namespace encoderd::server {

void Flags::Switch(const std::string& name, bool* out) {
  flags_[name] = Flag{false, "", [out](const std::string&) { return *out = true; }};
}

void Flags::String(const std::string& name, std::string* out) {
  Value(name, "a value", [out](const std::string& v) {
    *out = v;
    return true;
  });
}

void Flags::Strings(const std::string& name, std::vector<std::string>* out) {
  Value(name, "a value", [out](const std::string& v) {
    out->push_back(v);
    return true;
  });
}

void Flags::Number(const std::string& name, double* out, double min) {
  Value(name, "a number >= " + std::to_string(min), [out, min](const std::string& v) {
    double x = 0;
    if (!ParseDouble(v, &x) || !(x >= min)) return false;
    *out = x;
    return true;
  });
}

void Flags::Value(const std::string& name, const std::string& expected,
                  std::function<bool(const std::string&)> parse) {
  flags_[name] = Flag{true, expected, std::move(parse)};
}

void Flags::Positional(const std::string& name, std::string* out, bool optional) {
  positional_.push_back({name, out, optional});
}

std::string Flags::Parse(const std::vector<std::string>& args) const {
  size_t next_positional = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() > 1 && arg[0] == '-') {
      auto it = flags_.find(arg);
      if (it == flags_.end()) return "unknown option " + arg;
      const Flag& flag = it->second;
      if (!flag.takes_value) {
        flag.apply("");
        continue;
      }
      if (i + 1 >= args.size()) return arg + " needs a value";
      const std::string& value = args[++i];
      if (!flag.apply(value)) return arg + ": '" + value + "' is not " + flag.expected;
      continue;
    }
    if (next_positional >= positional_.size()) return "unexpected argument '" + arg + "'";
    *positional_[next_positional++].out = arg;
  }
  for (size_t k = next_positional; k < positional_.size(); ++k) {
    if (!positional_[k].optional) return "missing " + positional_[k].name;
  }
  return "";
}

}  // namespace encoderd::server

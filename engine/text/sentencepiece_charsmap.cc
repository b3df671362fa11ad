#include "engine/text/sentencepiece_charsmap.h"

#include <unicode/ubrk.h>
#include <unicode/utext.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/text/utf8.h"

namespace encoderd {
namespace {

// The most matches the library's normalizer keeps for one prefix search
// (sentencepiece's Normalizer::kMaxTrieResultsSize); darts-clone counts on
// past it, and the normalizer then reads that many.
constexpr uint32_t kMaxMatches = 32;

// A darts-clone unit, as commonPrefixSearch reads it.
bool HasLeaf(uint32_t unit) { return (unit >> 8) & 1; }
uint32_t Value(uint32_t unit) { return unit & ((1u << 31) - 1); }
uint32_t Label(uint32_t unit) { return unit & ((1u << 31) | 0xFF); }
uint32_t Offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

// Protobuf wire format, only as far as walking a message's fields: each
// field's number, wire type and, for length-delimited ones, its bytes. Where
// protobuf's parser would read the same bytes as other fields than this
// reads, the bytes are refused: tags of more than 5 bytes or over 32 bits
// (protobuf reads 5 bytes into 32 bits and drops the rest, so a padded tag
// would name field 3 to it and another field here) and lengths of more than
// 5 bytes or from 2^31 on.
class WireReader {
 public:
  explicit WireReader(std::string_view bytes) : bytes_(bytes) {}

  bool done() const { return at_ == bytes_.size(); }
  // Where the next field begins.
  size_t at() const { return at_; }

  // The next field; payload is set for wire type 2, varint for wire type
  // 0. Groups (3) are skipped whole, as protobuf skips unknown ones.
  Status Next(uint64_t* number, int* wire_type, std::string_view* payload, uint64_t* varint) {
    RETURN_IF_ERROR(Tag(number, wire_type));
    if (*wire_type == 2) return Payload(payload);
    if (*wire_type == 0) return Varint(varint) ? Status::Ok() : Broken("a varint");
    if (*wire_type == 3) return SkipGroup(*number);
    return Skip(*wire_type);
  }

 private:
  Status Broken(const std::string& what) const {
    return InvalidArgument("not protobuf wire format: " + what + " in the field from byte " +
                           std::to_string(field_start_) + " is damaged");
  }

  // A varint of at most max_bytes bytes.
  bool Varint(uint64_t* v, int max_bytes = 10) {
    *v = 0;
    for (int i = 0; i < max_bytes && at_ < bytes_.size(); ++i) {
      const uint8_t byte = static_cast<uint8_t>(bytes_[at_++]);
      *v |= static_cast<uint64_t>(byte & 0x7F) << (7 * i);
      if (!(byte & 0x80)) return true;
    }
    return false;
  }

  Status Tag(uint64_t* number, int* wire_type) {
    field_start_ = at_;
    uint64_t tag = 0;
    if (!Varint(&tag, 5) || tag > UINT32_MAX) return Broken("a field's tag");
    *number = tag >> 3;
    *wire_type = static_cast<int>(tag & 7);
    if (*number == 0) return Broken("field number 0");
    return Status::Ok();
  }

  // A length-delimited field's bytes, after its tag.
  Status Payload(std::string_view* payload) {
    uint64_t size = 0;
    if (!Varint(&size, 5) || size > INT32_MAX || size > bytes_.size() - at_) {
      return Broken("a field's length");
    }
    *payload = bytes_.substr(at_, size);
    at_ += size;
    return Status::Ok();
  }

  // A field of wire type 0, 1 or 5.
  Status Skip(int wire_type) {
    uint64_t ignored = 0;
    switch (wire_type) {
      case 0:
        return Varint(&ignored) ? Status::Ok() : Broken("a varint");
      case 1:
      case 5: {
        const size_t size = wire_type == 1 ? 8 : 4;
        if (size > bytes_.size() - at_) return Broken("a fixed-size field");
        at_ += size;
        return Status::Ok();
      }
      default:
        return Broken("wire type " + std::to_string(wire_type));
    }
  }

  // The fields up to the end of the group `number` just begun, nested
  // groups included (at most kMaxDepth deep, protobuf's own limit).
  Status SkipGroup(uint64_t number) {
    constexpr int kMaxDepth = 100;
    std::vector<uint64_t> open = {number};
    while (!open.empty()) {
      uint64_t field = 0;
      int type = 0;
      std::string_view ignored;
      RETURN_IF_ERROR(Tag(&field, &type));
      if (type == 4) {
        if (field != open.back()) return Broken("a group's end");
        open.pop_back();
      } else if (type == 3) {
        if (open.size() == kMaxDepth) return Broken("groups nested too deep");
        open.push_back(field);
      } else if (type == 2) {
        RETURN_IF_ERROR(Payload(&ignored));
      } else {
        RETURN_IF_ERROR(Skip(type));
      }
    }
    return Status::Ok();
  }

  std::string_view bytes_;
  size_t at_ = 0;
  size_t field_start_ = 0;  // where the field being read began, for errors
};

// The trie of a map whose header and strings have been checked: every node
// a text can reach, depth first from the root (unit 0). With
// whole_characters, the strings are UTF-8 and each replacement must begin
// at a character's start (the tokenizers library refuses one that begins
// inside one; sentencepiece copies the bytes as they are).
class TrieCheck {
 public:
  TrieCheck(const std::vector<uint32_t>& units, std::string_view strings, bool whole_characters)
      : units_(units),
        strings_(strings),
        last_nul_(strings.rfind('\0')),
        whole_characters_(whole_characters),
        state_(units_.size(), kUnseen),
        leaves_(units_.size(), 0) {}

  Status Run() {
    RETURN_IF_ERROR(Enter(0));
    while (!stack_.empty()) {
      Frame& f = stack_.back();
      if (f.next_label > 0xFF) {
        RETURN_IF_ERROR(Leave());
        continue;
      }
      const uint32_t label = f.next_label++;
      const uint32_t child = f.base ^ label;
      if (Label(units_[child]) != label) continue;  // no edge: the search stops there
      if (state_[child] == kOnPath) {
        return InvalidArgument("its trie has a cycle (unit " + std::to_string(child) +
                               " leads back to itself)");
      }
      if (state_[child] == kDone) {
        f.most = std::max(f.most, leaves_[child]);
        continue;
      }
      RETURN_IF_ERROR(Enter(child));  // `f` may dangle from here on
    }
    return Status::Ok();
  }

 private:
  enum : uint8_t { kUnseen, kOnPath, kDone };
  struct Frame {
    uint32_t node, base, next_label;
    uint32_t most;  // the most leaves on a path through a child so far
  };

  // Checks node `p`, which a text reaches (or the root), and puts it on the
  // path: the 256 units its children may be read from lie in the trie, and
  // its leaf's value (read for every node but the root) starts a string
  // that a NUL ends inside the map.
  Status Enter(uint32_t p) {
    const uint32_t base = p ^ Offset(units_[p]);
    if ((static_cast<uint64_t>(base) | 0xFF) >= units_.size()) {
      return InvalidArgument("unit " + std::to_string(p) + " has its children at units " +
                             std::to_string(base & ~0xFFu) + " to " + std::to_string(base | 0xFFu) +
                             ", outside its trie of " + std::to_string(units_.size()) + " units");
    }
    if (p != 0 && HasLeaf(units_[p])) {
      const uint32_t value = Value(units_[base]);
      if (last_nul_ == std::string_view::npos || value > last_nul_) {
        return InvalidArgument("unit " + std::to_string(p) + "'s replacement starts at byte " +
                               std::to_string(value) + " of its " +
                               std::to_string(strings_.size()) +
                               " bytes of strings, where no NUL ends it");
      }
      if (whole_characters_ && (static_cast<uint8_t>(strings_[value]) & 0xC0) == 0x80) {
        return InvalidArgument("unit " + std::to_string(p) + "'s replacement starts at byte " +
                               std::to_string(value) + " of its strings, inside a character");
      }
    }
    state_[p] = kOnPath;
    stack_.push_back({p, base, 0, 0});
    return Status::Ok();
  }

  // Takes the finished node off the path with the most leaves a text meets
  // from it on, and hands that to its parent.
  Status Leave() {
    const Frame f = stack_.back();
    stack_.pop_back();
    if (f.node == 0) {
      // The root's own leaf is never read: matches begin after a byte.
      if (f.most > kMaxMatches) {
        return InvalidArgument("a text can match more than " + std::to_string(kMaxMatches) +
                               " of its replacements at once, more than the library keeps");
      }
      return Status::Ok();
    }
    // Saturates: past kMaxMatches the count no longer matters.
    const uint32_t leaves = std::min(f.most + (HasLeaf(units_[f.node]) ? 1 : 0), kMaxMatches + 1);
    state_[f.node] = kDone;
    leaves_[f.node] = leaves;
    stack_.back().most = std::max(stack_.back().most, leaves);
    return Status::Ok();
  }

  const std::vector<uint32_t>& units_;
  std::string_view strings_;
  size_t last_nul_;
  bool whole_characters_;
  std::vector<uint8_t> state_;
  std::vector<uint32_t> leaves_;  // kDone nodes': at most kMaxMatches + 1
  std::vector<Frame> stack_;
};

// fn(number, payload) for each length-delimited field of `message`, and
// on_varint(number, value) for each varint field, whose wire-format errors
// are prefixed with `name` (when not empty).
template <typename Fn, typename VarintFn>
Status ForEachField(std::string_view message, const std::string& name, Fn&& fn,
                    VarintFn&& on_varint) {
  WireReader reader(message);
  while (!reader.done()) {
    uint64_t number = 0, varint = 0;
    int wire_type = 0;
    std::string_view payload;
    const Status read = reader.Next(&number, &wire_type, &payload, &varint);
    if (!read.ok()) return name.empty() ? read : read.WithContext(name);
    if (wire_type == 2) RETURN_IF_ERROR(fn(number, payload));
    if (wire_type == 0) on_varint(number, varint);
  }
  return Status::Ok();
}

template <typename Fn>
Status ForEachPayload(std::string_view message, const std::string& name, Fn&& fn) {
  return ForEachField(message, name, std::forward<Fn>(fn), [](uint64_t, uint64_t) {});
}

// Every precompiled_charsmap (field 2) of a serialized NormalizerSpec.
Status CheckNormalizerSpec(std::string_view spec, const std::string& name) {
  return ForEachPayload(spec, name, [&](uint64_t number, std::string_view payload) {
    return number == 2
               ? CheckPrecompiledCharsMap(payload).WithContext(name + ".precompiled_charsmap")
               : Status::Ok();
  });
}

// fn(number, wire_type, payload, bytes) for each field of `message` (payload
// as WireReader::Next gives it; bytes: the whole field, its tag included),
// stopping at fn's first error.
template <typename Fn>
Status ForEachRawField(std::string_view message, Fn&& fn) {
  WireReader reader(message);
  while (!reader.done()) {
    const size_t begin = reader.at();
    uint64_t number = 0, varint = 0;
    int wire_type = 0;
    std::string_view payload;
    RETURN_IF_ERROR(reader.Next(&number, &wire_type, &payload, &varint));
    RETURN_IF_ERROR(fn(number, wire_type, payload, message.substr(begin, reader.at() - begin)));
  }
  return Status::Ok();
}

// `bytes` as a length-delimited field `number` of a message.
void AppendBytesField(uint64_t number, std::string_view bytes, std::string* out) {
  for (uint64_t v : {number << 3 | 2, static_cast<uint64_t>(bytes.size())}) {
    for (; v >= 0x80; v >>= 7) out->push_back(static_cast<char>(v | 0x80));
    out->push_back(static_cast<char>(v));
  }
  out->append(bytes);
}

struct CloseBreakIterator {
  void operator()(UBreakIterator* it) const { ubrk_close(it); }
};

// fn(begin, end) for each extended grapheme cluster of `text` (well-formed
// UTF-8 of under 2 GiB), in order: ICU's character break iterator, one per
// thread, kept (opening one took ~30 us, a third of the cost of a 1 KiB
// window of a run of unknown characters: tokenize_bench's "emoji + ZWJ").
template <typename Fn>
Status ForEachGrapheme(std::string_view text, Fn&& fn) {
  if (text.empty()) return Status::Ok();
  thread_local std::unique_ptr<UBreakIterator, CloseBreakIterator> breaks;
  UErrorCode status = U_ZERO_ERROR;
  if (!breaks) breaks.reset(ubrk_open(UBRK_CHARACTER, "", nullptr, 0, &status));
  UText ut = UTEXT_INITIALIZER;
  utext_openUTF8(&ut, text.data(), static_cast<int64_t>(text.size()), &status);
  if (U_SUCCESS(status)) ubrk_setUText(breaks.get(), &ut, &status);
  if (U_SUCCESS(status)) {
    UBreakIterator* it = breaks.get();
    int32_t begin = ubrk_first(it);
    for (int32_t end = ubrk_next(it); end != UBRK_DONE; begin = end, end = ubrk_next(it)) {
      fn(static_cast<size_t>(begin), static_cast<size_t>(end));
    }
  }
  utext_close(&ut);
  if (U_FAILURE(status)) {
    return Internal(std::string("ICU's grapheme clusters: ") + u_errorName(status));
  }
  return Status::Ok();
}

// A map's trie units and replacement strings, its header checked.
struct MapParts {
  std::vector<uint32_t> units;
  std::string_view strings;
};

StatusOr<MapParts> SplitMap(std::string_view map) {
  uint32_t trie_bytes = 0;
  if (map.size() <= sizeof(trie_bytes)) {
    return InvalidArgument("its " + std::to_string(map.size()) +
                           " bytes are too few for a map's header");
  }
  // In host order, as the library reads it (it swaps bytes only when built
  // for big-endian hosts, which encoderd does not run on).
  std::memcpy(&trie_bytes, map.data(), sizeof(trie_bytes));
  map.remove_prefix(sizeof(trie_bytes));
  if (trie_bytes > map.size()) {
    return InvalidArgument("its header gives a trie of " + std::to_string(trie_bytes) +
                           " bytes, but only " + std::to_string(map.size()) + " follow");
  }
  if (trie_bytes == 0 || trie_bytes % sizeof(uint32_t) != 0) {
    return InvalidArgument("its trie of " + std::to_string(trie_bytes) +
                           " bytes is not a whole number of 4-byte units");
  }
  MapParts parts{std::vector<uint32_t>(trie_bytes / sizeof(uint32_t)), map.substr(trie_bytes)};
  std::memcpy(parts.units.data(), map.data(), trie_bytes);
  return parts;
}

}  // namespace

Status CheckPrecompiledCharsMap(std::string_view map) {
  if (map.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(const MapParts parts, SplitMap(map));
  return TrieCheck(parts.units, parts.strings, /*whole_characters=*/false).Run();
}

Status CheckSentencePieceCharsMaps(std::string_view serialized_model) {
  // ModelProto: normalizer_spec = 3, denormalizer_spec = 5.
  return ForEachPayload(serialized_model, "", [](uint64_t number, std::string_view payload) {
    if (number == 3) return CheckNormalizerSpec(payload, "normalizer_spec");
    if (number == 5) return CheckNormalizerSpec(payload, "denormalizer_spec");
    return Status::Ok();
  });
}

StatusOr<std::string> FastClassModel(std::string_view serialized_model, std::string* map) {
  map->clear();
  std::string out;
  out.reserve(serialized_model.size());
  RETURN_IF_ERROR(ForEachRawField(
      serialized_model,
      [&](uint64_t number, int wire_type, std::string_view spec, std::string_view raw) {
        if (number == 4) return Status::Ok();  // self_test_data: made with the map
        if (number != 3 || wire_type != 2) {   // not a normalizer_spec: as it was
          out.append(raw);
          return Status::Ok();
        }
        // Its fields but precompiled_charsmap (2), the last of which is the
        // map, as protobuf merges repeated messages and keeps a field's
        // last, and the whitespace flags (3-5, then true by default).
        std::string kept;
        const Status read = ForEachRawField(
            spec, [&](uint64_t field, int type, std::string_view payload, std::string_view bytes) {
              if (field == 2 && type == 2) {
                *map = std::string(payload);
              } else if (field < 3 || field > 5) {
                kept.append(bytes);
              }
              return Status::Ok();
            });
        if (!read.ok()) return read.WithContext("normalizer_spec");
        AppendBytesField(3, kept, &out);
        return Status::Ok();
      }));
  return out;
}

StatusOr<bool> IsUnigramModel(std::string_view serialized_model) {
  int64_t type = 1;  // TrainerSpec.model_type's default: UNIGRAM
  RETURN_IF_ERROR(
      ForEachPayload(serialized_model, "", [&](uint64_t number, std::string_view payload) {
        return number == 2 ? ForEachField(
                                 payload, "trainer_spec",
                                 [](uint64_t, std::string_view) { return Status::Ok(); },
                                 [&](uint64_t field, uint64_t value) {
                                   if (field == 3) type = static_cast<int64_t>(value);
                                 })
                           : Status::Ok();
      }));
  return type == 1;
}

StatusOr<std::vector<SentencePieceEntry>> ReadSentencePieces(std::string_view serialized_model) {
  std::vector<SentencePieceEntry> pieces;
  // ModelProto.pieces = 1; SentencePiece: piece = 1, score = 2 (a float,
  // wire type 5; the last occurrence of a field wins, as in protobuf).
  RETURN_IF_ERROR(
      ForEachPayload(serialized_model, "", [&](uint64_t number, std::string_view message) {
        if (number != 1) return Status::Ok();
        SentencePieceEntry& entry = pieces.emplace_back();
        RETURN_IF_ERROR(
            ForEachPayload(message, "pieces", [&](uint64_t field, std::string_view payload) {
              if (field == 1) entry.piece = std::string(payload);
              return Status::Ok();
            }));
        return ForEachRawField(
            message, [&](uint64_t field, int wire_type, std::string_view, std::string_view raw) {
              if (field == 2 && wire_type == 5) {
                uint32_t bits = 0;
                for (int i = 0; i < 4; ++i) {
                  bits |= static_cast<uint32_t>(static_cast<uint8_t>(raw[raw.size() - 4 + i]))
                          << (8 * i);
                }
                std::memcpy(&entry.score, &bits, sizeof(bits));
              }
              return Status::Ok();
            });
      }));
  return pieces;
}

StatusOr<SentencePieceWhitespace> ReadSentencePieceWhitespace(std::string_view serialized_model) {
  SentencePieceWhitespace whitespace;
  // ModelProto.normalizer_spec = 3; NormalizerSpec: add_dummy_prefix = 3,
  // remove_extra_whitespaces = 4, escape_whitespaces = 5 (proto2 bools,
  // true when absent; the last occurrence wins, as in protobuf).
  const auto flags = [&](uint64_t number, uint64_t value) {
    if (number == 3) whitespace.add_dummy_prefix = value != 0;
    if (number == 4) whitespace.remove_extra_whitespaces = value != 0;
    if (number == 5) whitespace.escape_whitespaces = value != 0;
  };
  RETURN_IF_ERROR(
      ForEachPayload(serialized_model, "", [&](uint64_t number, std::string_view payload) {
        return number == 3 ? ForEachField(
                                 payload, "normalizer_spec",
                                 [](uint64_t, std::string_view) { return Status::Ok(); }, flags)
                           : Status::Ok();
      }));
  return whitespace;
}

StatusOr<std::shared_ptr<const PrecompiledGraphemes>> PrecompiledGraphemes::Create(
    std::string_view map) {
  if (map.empty()) return InvalidArgument("the map is empty");
  ASSIGN_OR_RETURN(MapParts parts, SplitMap(map));
  if (!IsValidUtf8(parts.strings)) {
    return InvalidArgument("its replacement strings are not UTF-8 (byte " +
                           std::to_string(FirstInvalidUtf8Offset(parts.strings)) + ")");
  }
  RETURN_IF_ERROR(TrieCheck(parts.units, parts.strings, /*whole_characters=*/true).Run());
  return std::shared_ptr<const PrecompiledGraphemes>(
      new PrecompiledGraphemes(std::move(parts.units), std::string(parts.strings)));
}

// spm_precompiled's common_prefix_search, stopped at its first match (the
// library takes the first): the walk stops at a NUL byte, as the library's
// does. Every unit read is one CheckPrecompiledCharsMap checked.
const char* PrecompiledGraphemes::Shortest(std::string_view key) const {
  uint32_t pos = Offset(units_[0]);
  for (const char byte : key) {
    const auto c = static_cast<uint8_t>(byte);
    if (c == 0) break;
    pos ^= c;
    const uint32_t unit = units_[pos];
    if (Label(unit) != c) return nullptr;
    pos ^= Offset(unit);
    if (HasLeaf(unit)) return strings_.c_str() + Value(units_[pos]);
  }
  return nullptr;
}

StatusOr<PrecompiledGraphemes::Normalized> PrecompiledGraphemes::Normalize(
    std::string_view text) const {
  if (text.size() >= (size_t{1} << 31)) {
    return InvalidArgument("a text of 2 GiB or more is not normalized");
  }
  Normalized out;
  out.text.reserve(text.size());
  out.input_at.reserve(text.size() + 1);
  const auto put = [&out](std::string_view replacement, size_t from) {
    out.text.append(replacement);
    out.input_at.insert(out.input_at.end(), replacement.size(), static_cast<uint32_t>(from));
  };
  RETURN_IF_ERROR(ForEachGrapheme(text, [&](size_t begin, size_t end) {
    if (end - begin < 6) {
      if (const char* whole = Shortest(text.substr(begin, end - begin))) {
        put(whole, begin);
        return;
      }
    }
    for (size_t i = begin; i < end;) {
      const std::string_view c = text.substr(i, DecodeAt(text, i).second);
      const char* own = Shortest(c);
      put(own ? std::string_view(own) : c, i);
      i += c.size();
    }
  }));
  out.input_at.push_back(static_cast<uint32_t>(text.size()));
  return out;
}

}  // namespace encoderd

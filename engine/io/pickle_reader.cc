#include "engine/io/pickle_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "engine/io/pickle_globals.h"

namespace encoderd {
namespace {

constexpr size_t kMaxMarkDepth = 4096;
constexpr size_t kMaxStackDepth = size_t{1} << 20;
// Distinct globals that become placeholders (the fixtures' fairseq
// checkpoints name 1 to 5: argparse's Namespace, omegaconf's classes).
constexpr size_t kMaxPlaceholderGlobals = 4096;

class Machine {
 public:
  Machine(const std::byte* data, size_t size, PickleArena* arena, const PersistentLoadFn& pl,
          std::vector<std::string>* placeholders)
      : data_(data),
        size_(size),
        arena_(arena),
        persistent_load_(pl),
        placeholders_(placeholders),
        placeholder_names_(placeholders->begin(), placeholders->end()),
        budget_(8 * size + 4096) {}

  StatusOr<UnpickleResult> Run();

 private:
  Status Step(uint8_t op, bool* stop);
  Status Error(const std::string& what) const {
    return DataLoss("pickle: " + what + " at byte " + std::to_string(op_pos_));
  }
  Status Need(size_t n) const {
    return n <= size_ - pos_ ? Status::Ok()
                             : Error("truncated (needs " + std::to_string(n) + " more bytes)");
  }
  uint64_t ReadLE(size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(data_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }
  StatusOr<std::string> ReadBytes(uint64_t n) {
    if (n > size_ - pos_) return Error("length " + std::to_string(n) + " past end of data");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }
  StatusOr<std::string> ReadLine() {
    const std::byte* begin = data_ + pos_;
    const void* nl = std::memchr(begin, '\n', size_ - pos_);
    if (nl == nullptr) return Error("unterminated text argument");
    const size_t n = static_cast<const std::byte*>(nl) - begin;
    std::string s(reinterpret_cast<const char*>(begin), n);
    pos_ += n + 1;
    if (!s.empty() && s.back() == '\r') s.pop_back();
    return s;
  }

  Status Push(const PickleValue* v) {
    if (stack_.size() >= kMaxStackDepth) return Error("stack too deep");
    stack_.push_back(v);
    return Status::Ok();
  }
  StatusOr<const PickleValue*> Pop() {
    if (stack_.size() <= StackFloor()) return Error("stack underflow");
    const PickleValue* v = stack_.back();
    stack_.pop_back();
    return v;
  }
  size_t StackFloor() const { return marks_.empty() ? 0 : marks_.back(); }
  // Pops everything above the most recent MARK, and the mark.
  StatusOr<std::vector<const PickleValue*>> PopMark() {
    if (marks_.empty()) return Error("no MARK on the stack");
    const size_t at = marks_.back();
    marks_.pop_back();
    std::vector<const PickleValue*> items(stack_.begin() + at, stack_.end());
    stack_.resize(at);
    return items;
  }
  PickleValue* MakeInt(int64_t v) {
    PickleValue* p = arena_->New(PickleKind::kInt);
    p->int_value = v;
    return p;
  }
  PickleValue* MakeContainer(PickleKind kind, std::vector<const PickleValue*> items) {
    PickleValue* p = arena_->New(kind);
    p->items = std::move(items);
    return p;
  }
  Status PushString(PickleKind kind, uint64_t n) {
    ASSIGN_OR_RETURN(std::string s, ReadBytes(n));
    PickleValue* v = arena_->New(kind);
    v->str = std::move(s);
    return Push(v);
  }
  Status PushGlobal(const std::string& module, const std::string& name);
  Status PushLong(size_t nbytes);
  Status Memoize(uint64_t index) {
    if (stack_.size() <= StackFloor()) return Error("memoizing an empty stack");
    memo_[index] = stack_.back();
    return Status::Ok();
  }
  Status Fetch(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) return Error("memo key " + std::to_string(index) + " not found");
    return Push(it->second);
  }
  // Mutable access to a container on the stack (only values this machine made).
  static PickleValue* Mutable(const PickleValue* v) { return const_cast<PickleValue*>(v); }
  Status AddItems(const PickleValue* target, const std::vector<const PickleValue*>& items);
  Status SetItems(const PickleValue* target, const std::vector<const PickleValue*>& items);
  Status Call(const PickleValue* callable, const PickleValue* args);

  const std::byte* data_;
  size_t size_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  PickleArena* arena_;
  const PersistentLoadFn& persistent_load_;
  std::vector<std::string>* placeholders_;
  std::unordered_set<std::string> placeholder_names_;  // *placeholders_' names
  ElementBudget budget_;
  std::vector<const PickleValue*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, const PickleValue*> memo_;
};

Status Machine::PushGlobal(const std::string& module, const std::string& name) {
  // Protocol <= 2 pickles name Python 2 modules; map them as fix_imports does.
  const std::string mod = module == "__builtin__" ? std::string("builtins")
                          : module == "copy_reg"  ? std::string("copyreg")
                                                  : module;
  const std::string full = mod + "." + name;
  if (IsAllowedGlobal(full)) {
    PickleValue* g = arena_->New(PickleKind::kGlobal);
    g->str = full;
    return Push(g);
  }
  if (placeholder_names_.insert(full).second) {
    if (placeholder_names_.size() > kMaxPlaceholderGlobals) {
      return Error("more than " + std::to_string(kMaxPlaceholderGlobals) +
                   " distinct globals the loader does not run");
    }
    placeholders_->push_back(full);
  }
  PickleValue* p = arena_->New(PickleKind::kPlaceholder);
  p->str = full;
  return Push(p);
}

Status Machine::PushLong(size_t nbytes) {
  ASSIGN_OR_RETURN(std::string raw, ReadBytes(nbytes));
  if (nbytes <= 8) {
    uint64_t v = 0;
    for (size_t i = 0; i < nbytes; ++i) v |= static_cast<uint64_t>(uint8_t(raw[i])) << (8 * i);
    if (nbytes > 0 && nbytes < 8 && (uint8_t(raw[nbytes - 1]) & 0x80)) {
      v |= ~uint64_t{0} << (8 * nbytes);  // sign-extend
    }
    return Push(MakeInt(static_cast<int64_t>(v)));
  }
  PickleValue* big = arena_->New(PickleKind::kBigInt);
  big->str = std::move(raw);
  return Push(big);
}

Status Machine::AddItems(const PickleValue* target, const std::vector<const PickleValue*>& items) {
  if (target->kind == PickleKind::kPlaceholder) return Status::Ok();
  if (target->kind != PickleKind::kList && target->kind != PickleKind::kSet) {
    return Error("appending to a non-list");
  }
  RETURN_IF_ERROR(budget_.Take(items.size()));
  auto& dst = Mutable(target)->items;
  dst.insert(dst.end(), items.begin(), items.end());
  return Status::Ok();
}

Status Machine::SetItems(const PickleValue* target, const std::vector<const PickleValue*>& items) {
  if (items.size() % 2 != 0) return Error("SETITEMS with an odd number of items");
  if (target->kind == PickleKind::kPlaceholder) return Status::Ok();
  if (target->kind != PickleKind::kDict) return Error("setting an item on a non-dict");
  RETURN_IF_ERROR(budget_.Take(items.size()));
  auto& dst = Mutable(target)->items;
  dst.insert(dst.end(), items.begin(), items.end());
  return Status::Ok();
}

Status Machine::Call(const PickleValue* callable, const PickleValue* args) {
  if (callable->kind == PickleKind::kPlaceholder) {
    // Never called: the result is another inert placeholder of the same name.
    PickleValue* p = arena_->New(PickleKind::kPlaceholder);
    p->str = callable->str;
    return Push(p);
  }
  if (callable->kind != PickleKind::kGlobal) return Error("calling a value that is not a global");
  if (args->kind != PickleKind::kTuple) return Error("call arguments are not a tuple");
  auto result = CallGlobal(callable->str, args, arena_, &budget_);
  if (!result.ok()) return result.status().WithContext(Error(callable->str).message());
  return Push(*result);
}

Status Machine::Step(uint8_t op, bool* stop) {
  switch (op) {
    case 0x80:  // PROTO
      RETURN_IF_ERROR(Need(1));
      if (ReadLE(1) > 5) return Error("unsupported pickle protocol");
      return Status::Ok();
    case 0x95:  // FRAME: only a length hint
      RETURN_IF_ERROR(Need(8));
      ReadLE(8);
      return Status::Ok();
    case '.':  // STOP
      *stop = true;
      return Status::Ok();
    case 'N':
      return Push(arena_->New(PickleKind::kNone));
    case 0x88:
    case 0x89: {
      PickleValue* b = arena_->New(PickleKind::kBool);
      b->int_value = op == 0x88;
      return Push(b);
    }
    case 'J':
      RETURN_IF_ERROR(Need(4));
      return Push(MakeInt(static_cast<int32_t>(ReadLE(4))));
    case 'K':
      RETURN_IF_ERROR(Need(1));
      return Push(MakeInt(static_cast<int64_t>(ReadLE(1))));
    case 'M':
      RETURN_IF_ERROR(Need(2));
      return Push(MakeInt(static_cast<int64_t>(ReadLE(2))));
    case 0x8a:  // LONG1
      RETURN_IF_ERROR(Need(1));
      return PushLong(ReadLE(1));
    case 0x8b: {  // LONG4
      RETURN_IF_ERROR(Need(4));
      const uint64_t n = ReadLE(4);
      if (n > size_ - pos_) return Error("LONG4 length past end of data");
      return PushLong(static_cast<size_t>(n));
    }
    case 'I': {  // INT (text); "I00"/"I01" are False/True
      ASSIGN_OR_RETURN(std::string line, ReadLine());
      if (line == "00" || line == "01") {
        PickleValue* b = arena_->New(PickleKind::kBool);
        b->int_value = line == "01";
        return Push(b);
      }
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(line.c_str(), &end, 10);
      if (line.empty() || *end != '\0' || errno != 0) return Error("bad INT argument");
      return Push(MakeInt(v));
    }
    case 'G': {  // BINFLOAT, big-endian
      RETURN_IF_ERROR(Need(8));
      uint64_t bits = 0;
      for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<uint8_t>(data_[pos_ + i]);
      pos_ += 8;
      PickleValue* f = arena_->New(PickleKind::kFloat);
      std::memcpy(&f->float_value, &bits, 8);
      return Push(f);
    }
    case 'F': {
      ASSIGN_OR_RETURN(std::string line, ReadLine());
      char* end = nullptr;
      const double v = std::strtod(line.c_str(), &end);
      if (line.empty() || *end != '\0') return Error("bad FLOAT argument");
      PickleValue* f = arena_->New(PickleKind::kFloat);
      f->float_value = v;
      return Push(f);
    }
    case 0x8c:  // SHORT_BINUNICODE
    case 'U':   // SHORT_BINSTRING
      RETURN_IF_ERROR(Need(1));
      return PushString(PickleKind::kString, ReadLE(1));
    case 'X':  // BINUNICODE
    case 'T':  // BINSTRING
      RETURN_IF_ERROR(Need(4));
      return PushString(PickleKind::kString, ReadLE(4));
    case 0x8d:  // BINUNICODE8
      RETURN_IF_ERROR(Need(8));
      return PushString(PickleKind::kString, ReadLE(8));
    case 'C':  // SHORT_BINBYTES
      RETURN_IF_ERROR(Need(1));
      return PushString(PickleKind::kBytes, ReadLE(1));
    case 'B':  // BINBYTES
      RETURN_IF_ERROR(Need(4));
      return PushString(PickleKind::kBytes, ReadLE(4));
    case 0x8e:  // BINBYTES8
    case 0x96:  // BYTEARRAY8
      RETURN_IF_ERROR(Need(8));
      return PushString(PickleKind::kBytes, ReadLE(8));
    case ')':
      return Push(MakeContainer(PickleKind::kTuple, {}));
    case ']':
      return Push(MakeContainer(PickleKind::kList, {}));
    case '}':
      return Push(MakeContainer(PickleKind::kDict, {}));
    case 0x8f:  // EMPTY_SET
      return Push(MakeContainer(PickleKind::kSet, {}));
    case 0x85:
    case 0x86:
    case 0x87: {  // TUPLE1..3
      const size_t n = op - 0x84;
      if (stack_.size() < StackFloor() + n) return Error("stack underflow");
      std::vector<const PickleValue*> items(stack_.end() - n, stack_.end());
      stack_.resize(stack_.size() - n);
      return Push(MakeContainer(PickleKind::kTuple, std::move(items)));
    }
    case 't':
    case 'l':
    case 0x91: {  // TUPLE, LIST, FROZENSET
      ASSIGN_OR_RETURN(auto items, PopMark());
      const PickleKind kind = op == 't'   ? PickleKind::kTuple
                              : op == 'l' ? PickleKind::kList
                                          : PickleKind::kSet;
      return Push(MakeContainer(kind, std::move(items)));
    }
    case 'd': {  // DICT
      ASSIGN_OR_RETURN(auto items, PopMark());
      if (items.size() % 2 != 0) return Error("DICT with an odd number of items");
      return Push(MakeContainer(PickleKind::kDict, std::move(items)));
    }
    case 'a': {  // APPEND
      ASSIGN_OR_RETURN(const PickleValue* v, Pop());
      ASSIGN_OR_RETURN(const PickleValue* target, Pop());
      RETURN_IF_ERROR(AddItems(target, {v}));
      return Push(target);
    }
    case 'e':     // APPENDS
    case 0x90: {  // ADDITEMS
      ASSIGN_OR_RETURN(auto items, PopMark());
      if (stack_.size() <= StackFloor()) return Error("APPENDS without a target");
      return AddItems(stack_.back(), items);
    }
    case 's': {  // SETITEM
      ASSIGN_OR_RETURN(const PickleValue* v, Pop());
      ASSIGN_OR_RETURN(const PickleValue* k, Pop());
      if (stack_.size() <= StackFloor()) return Error("SETITEM without a target");
      return SetItems(stack_.back(), {k, v});
    }
    case 'u': {  // SETITEMS
      ASSIGN_OR_RETURN(auto items, PopMark());
      if (stack_.size() <= StackFloor()) return Error("SETITEMS without a target");
      return SetItems(stack_.back(), items);
    }
    case '(':  // MARK
      if (marks_.size() >= kMaxMarkDepth) return Error("MARKs nested too deeply");
      marks_.push_back(stack_.size());
      return Status::Ok();
    case '0':  // POP
      return Pop().status();
    case '1':  // POP_MARK
      return PopMark().status();
    case '2':  // DUP
      if (stack_.size() <= StackFloor()) return Error("DUP on an empty stack");
      return Push(stack_.back());
    case 'q':  // BINPUT
      RETURN_IF_ERROR(Need(1));
      return Memoize(ReadLE(1));
    case 'r':  // LONG_BINPUT
      RETURN_IF_ERROR(Need(4));
      return Memoize(ReadLE(4));
    case 0x94:  // MEMOIZE
      return Memoize(memo_.size());
    case 'p': {  // PUT (text)
      ASSIGN_OR_RETURN(std::string line, ReadLine());
      char* end = nullptr;
      const unsigned long long idx = std::strtoull(line.c_str(), &end, 10);
      if (line.empty() || *end != '\0') return Error("bad PUT argument");
      return Memoize(idx);
    }
    case 'h':  // BINGET
      RETURN_IF_ERROR(Need(1));
      return Fetch(ReadLE(1));
    case 'j':  // LONG_BINGET
      RETURN_IF_ERROR(Need(4));
      return Fetch(ReadLE(4));
    case 'g': {  // GET (text)
      ASSIGN_OR_RETURN(std::string line, ReadLine());
      char* end = nullptr;
      const unsigned long long idx = std::strtoull(line.c_str(), &end, 10);
      if (line.empty() || *end != '\0') return Error("bad GET argument");
      return Fetch(idx);
    }
    case 'c': {  // GLOBAL "module\nname\n"
      ASSIGN_OR_RETURN(std::string module, ReadLine());
      ASSIGN_OR_RETURN(std::string name, ReadLine());
      return PushGlobal(module, name);
    }
    case 0x93: {  // STACK_GLOBAL
      ASSIGN_OR_RETURN(const PickleValue* name, Pop());
      ASSIGN_OR_RETURN(const PickleValue* module, Pop());
      if (name->kind != PickleKind::kString || module->kind != PickleKind::kString) {
        return Error("STACK_GLOBAL needs two strings");
      }
      return PushGlobal(module->str, name->str);
    }
    case 'R':     // REDUCE
    case 0x81: {  // NEWOBJ
      ASSIGN_OR_RETURN(const PickleValue* args, Pop());
      ASSIGN_OR_RETURN(const PickleValue* callable, Pop());
      return Call(callable, args);
    }
    case 0x92: {  // NEWOBJ_EX: keyword arguments are only accepted for placeholders
      ASSIGN_OR_RETURN(const PickleValue* kwargs, Pop());
      ASSIGN_OR_RETURN(const PickleValue* args, Pop());
      ASSIGN_OR_RETURN(const PickleValue* callable, Pop());
      if (callable->kind != PickleKind::kPlaceholder && kwargs->kind == PickleKind::kDict &&
          !kwargs->items.empty()) {
        return Error("NEWOBJ_EX with keyword arguments");
      }
      return Call(callable, args);
    }
    case 'b': {  // BUILD: allow-listed objects need no state; a placeholder keeps
                 // its attributes (a dict state, or the dict of a (dict, slots) pair)
      ASSIGN_OR_RETURN(const PickleValue* state, Pop());
      if (stack_.size() <= StackFloor()) return Error("BUILD without an object");
      const PickleValue* target = stack_.back();
      if (state->kind == PickleKind::kTuple && state->items.size() == 2) state = state->items[0];
      if (target->kind != PickleKind::kPlaceholder || state->kind != PickleKind::kDict)
        return Status::Ok();
      RETURN_IF_ERROR(budget_.Take(state->items.size()));
      auto& attributes = Mutable(target)->items;
      attributes.insert(attributes.end(), state->items.begin(), state->items.end());
      return Status::Ok();
    }
    case 'Q': {  // BINPERSID
      ASSIGN_OR_RETURN(const PickleValue* pid, Pop());
      ASSIGN_OR_RETURN(const PickleValue* v, persistent_load_(pid, arena_));
      return Push(v);
    }
    case 'P': {  // PERSID (text)
      ASSIGN_OR_RETURN(std::string line, ReadLine());
      PickleValue* pid = arena_->New(PickleKind::kString);
      pid->str = std::move(line);
      ASSIGN_OR_RETURN(const PickleValue* v, persistent_load_(pid, arena_));
      return Push(v);
    }
    default: {
      static const char kHex[] = "0123456789abcdef";
      return Error(std::string("unsupported opcode 0x") + kHex[op >> 4] + kHex[op & 15]);
    }
  }
}

StatusOr<UnpickleResult> Machine::Run() {
  bool stop = false;
  while (!stop) {
    if (pos_ >= size_) return Error("truncated (no STOP opcode)");
    op_pos_ = pos_;
    const uint8_t op = static_cast<uint8_t>(data_[pos_++]);
    RETURN_IF_ERROR(Step(op, &stop));
  }
  if (stack_.empty()) return Error("STOP on an empty stack");
  UnpickleResult result;
  result.root = stack_.back();
  result.end = pos_;
  return result;
}

}  // namespace

const PickleValue* DictGet(const PickleValue* dict, const std::string& key) {
  if (dict == nullptr ||
      (dict->kind != PickleKind::kDict && dict->kind != PickleKind::kPlaceholder))
    return nullptr;
  for (size_t i = dict->items.size(); i >= 2; i -= 2) {
    const PickleValue* k = dict->items[i - 2];
    if (k->kind == PickleKind::kString && k->str == key) return dict->items[i - 1];
  }
  return nullptr;
}

StatusOr<UnpickleResult> Unpickle(const std::byte* data, size_t size, PickleArena* arena,
                                  const PersistentLoadFn& persistent_load,
                                  std::vector<std::string>* placeholder_globals) {
  Machine machine(data, size, arena, persistent_load, placeholder_globals);
  return machine.Run();
}

}  // namespace encoderd

#include "engine/text/unigram_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/text/utf8.h"

namespace encoderd {
namespace {

// The library's K_UNK_PENALTY (and sentencepiece's kUnkPenalty).
constexpr double kUnknownPenalty = 10.0;

}  // namespace

StatusOr<std::shared_ptr<const UnigramModel>> UnigramModel::Create(std::vector<Entry> vocab,
                                                                   int32_t unk_id) {
  if (vocab.empty()) return InvalidArgument("a Unigram model needs a vocabulary");
  if (unk_id < 0 || static_cast<size_t>(unk_id) >= vocab.size()) {
    return InvalidArgument("the Unigram model's unk_id " + std::to_string(unk_id) +
                           " is outside its vocabulary of " + std::to_string(vocab.size()));
  }
  if (vocab.size() > static_cast<size_t>(INT32_MAX)) {
    return InvalidArgument("the Unigram model's vocabulary has over 2^31 pieces");
  }
  std::shared_ptr<UnigramModel> model(new UnigramModel());
  double lowest = vocab[0].score;
  for (size_t i = 0; i < vocab.size(); ++i) {
    const Entry& e = vocab[i];
    if (e.piece.empty() || !IsValidUtf8(e.piece)) {
      return InvalidArgument("the Unigram model's piece " + std::to_string(i) +
                             " is empty or not UTF-8");
    }
    if (!std::isfinite(e.score)) {
      return InvalidArgument("the Unigram model's piece " + std::to_string(i) +
                             " has a score that is not a finite number");
    }
    lowest = std::min(lowest, e.score);
    model->longest_ = std::max(model->longest_, e.piece.size());
  }
  model->unk_id_ = unk_id;
  model->unk_score_ = lowest - kUnknownPenalty;

  // The trie, built from the pieces in byte order (a stable sort: the last
  // entry of a piece given twice comes last, and is kept). Each node is
  // expanded once, its children made together.
  std::vector<uint32_t> order(vocab.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&vocab](uint32_t a, uint32_t b) {
    return std::string_view(vocab[a].piece) < std::string_view(vocab[b].piece);
  });
  const auto text = [&](size_t at) -> const std::string& { return vocab[order[at]].piece; };
  struct Todo {
    uint32_t node;
    size_t lo, hi, depth;  // the pieces [lo, hi) of `order` share depth bytes
  };
  std::vector<Node>& nodes = model->nodes_;
  nodes.emplace_back();
  std::vector<Todo> todo{{0, 0, order.size(), 0}};
  std::vector<Todo> children;
  while (!todo.empty()) {
    Todo t = todo.back();
    todo.pop_back();
    // (Shorter pieces sort first: those that end here lead the range.)
    for (; t.lo < t.hi && text(t.lo).size() == t.depth; ++t.lo) {
      nodes[t.node].id = static_cast<int32_t>(order[t.lo]);
    }
    children.clear();
    for (size_t i = t.lo; i < t.hi;) {
      const char byte = text(i)[t.depth];
      size_t j = i + 1;
      while (j < t.hi && text(j)[t.depth] == byte) ++j;
      if (nodes.size() >= UINT32_MAX)
        return InvalidArgument("the Unigram model's trie is too large");
      Node child;
      child.byte = static_cast<uint8_t>(byte);
      children.push_back({static_cast<uint32_t>(nodes.size()), i, j, t.depth + 1});
      nodes.push_back(child);
      i = j;
    }
    if (children.empty()) continue;
    nodes[t.node].first_child = children.front().node;
    nodes[t.node].children = static_cast<uint16_t>(children.size());
    todo.insert(todo.end(), children.begin(), children.end());
  }
  for (uint32_t c = nodes[0].first_child; c < nodes[0].first_child + nodes[0].children; ++c) {
    model->root_children_[nodes[c].byte] = c;
  }
  model->vocab_ = std::move(vocab);
  return std::shared_ptr<const UnigramModel>(std::move(model));
}

uint32_t UnigramModel::Child(uint32_t node, uint8_t byte) const {
  if (node == 0) return root_children_[byte];
  const Node& n = nodes_[node];
  const auto first = nodes_.begin() + n.first_child, last = first + n.children;
  const auto it =
      std::lower_bound(first, last, byte, [](const Node& c, uint8_t b) { return c.byte < b; });
  return it != last && it->byte == byte ? static_cast<uint32_t>(it - nodes_.begin()) : 0;
}

void UnigramModel::Encode(std::string_view word, std::vector<Token>* out) const {
  const size_t size = word.size();
  if (size == 0) return;
  // The best path to each place: its score, and its last piece.
  struct Best {
    double score = 0;
    size_t start = 0;
    int32_t id = -1;  // -1: no path yet
  };
  std::vector<Best> best(size + 1);
  const auto offer = [&best](size_t end, size_t start, int32_t id, double score) {
    Best& b = best[end];
    if (b.id < 0 || score > b.score) b = {score, start, id};
  };
  for (size_t at = 0; at < size;) {
    const double here = best[at].score;
    const size_t char_end = std::min(size, at + DecodeAt(word, at).second);
    bool single = false;
    uint32_t node = 0;
    for (size_t k = at; k < size; ++k) {
      node = Child(node, static_cast<uint8_t>(word[k]));
      if (node == 0) break;
      const int32_t id = nodes_[node].id;
      if (id < 0) continue;
      offer(k + 1, at, id, vocab_[static_cast<size_t>(id)].score + here);
      single = single || k + 1 == char_end;
    }
    if (!single) offer(char_end, at, unk_id_, unk_score_ + here);
    at = char_end;
  }
  // Back from the end; a run of <unk> pieces becomes one.
  const size_t first = out->size();
  for (size_t end = size; end > 0;) {
    const Best& b = best[end];
    if (b.id == unk_id_ && out->size() > first && out->back().id == unk_id_) {
      out->back().begin = b.start;
    } else {
      out->push_back({b.id, b.start, end});
    }
    end = b.start;
  }
  std::reverse(out->begin() + static_cast<std::ptrdiff_t>(first), out->end());
  // The library gives a piece the id of its text: a run of <unk> pieces
  // whose text is a piece of the vocabulary (one that scored less than
  // the run) has that piece's id.
  for (size_t i = first; i < out->size(); ++i) {
    Token& t = (*out)[i];
    if (t.id == unk_id_ && t.end - t.begin <= longest_) {
      if (const int32_t id = Find(word.substr(t.begin, t.end - t.begin)); id >= 0) t.id = id;
    }
  }
}

int32_t UnigramModel::Find(std::string_view piece) const {
  uint32_t node = 0;
  for (const char byte : piece) {
    node = Child(node, static_cast<uint8_t>(byte));
    if (node == 0) return -1;
  }
  return nodes_[node].id;
}

}  // namespace encoderd

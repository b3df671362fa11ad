#include "engine/text/sentencepiece_tokenizer.h"

#include <algorithm>
#include <utility>

#include "core/file.h"
#include "engine/text/bounded_encoding.h"
#include "engine/text/sentencepiece_library.h"
#include "engine/text/truncation.h"
#include "engine/text/utf8.h"

namespace encoderd {
namespace {

// U+2581, sentencepiece's mark for a space; a piece that starts with it
// starts a word.
constexpr std::string_view kSpace = "\xe2\x96\x81";
// Characters this many bytes before the end of a window may normalize
// differently once the text goes on (composition, collapsed whitespace).
constexpr int64_t kNormalizerReach = 64;
// A cut word settles no closer than this many pieces to the cut.
constexpr int64_t kSettleMargin = 64;
// A window shorter than this settles nothing of the word it cuts: the
// driver reads larger windows until the word ends or one is this long.
constexpr size_t kWholeWordBytes = 16384;
// A window longer than this is first read in kScanChunk pieces for a
// character the vocabulary does not know (EncodeWindow).
constexpr size_t kScanAbove = 65536;
constexpr size_t kScanChunk = 1024;
constexpr int kScanTries = 3;

// Bytes of normalized text a piece stands for: 1 for a byte-fallback piece
// ("<0xE3>"), its length otherwise.
int64_t CoverBytes(std::string_view piece) {
  const bool byte_piece = piece.size() == 6 && piece.substr(0, 3) == "<0x" && piece[5] == '>';
  return byte_piece ? 1 : static_cast<int64_t>(piece.size());
}

using Piece = SentencePieceLibrary::Model::Piece;
using Spaces = SentencePieceOptions::Spaces;

bool StartsWord(const Piece& piece) { return piece.piece.compare(0, kSpace.size(), kSpace) == 0; }

// A word of only a space: a "▁" followed by another word or by nothing.
bool SpaceWord(const std::vector<Piece>& pieces, size_t i) {
  return pieces[i].piece == kSpace && (i + 1 == pieces.size() || StartsWord(pieces[i + 1]));
}

// The words Hugging Face's Metaspace pipeline makes of the text
// (SentencePieceOptions::Spaces), from sentencepiece's pieces of it with
// spaces kept. sentencepiece puts a "▁" first and makes every space a "▁",
// so every space starts a word, as Metaspace's split does, and a word's
// pieces are the same. Removed here: the word of only the first "▁" where
// the text starts with a space (Metaspace puts none there); collapsed,
// every word of only a space but those at the end. Returns where the words
// of only a space at the end begin: a window's last spaces, whose words
// depend on what follows.
size_t MetaspaceWords(Spaces spaces, std::vector<Piece>* pieces) {
  std::vector<Piece>& p = *pieces;
  const bool collapsed = spaces == Spaces::kMetaspaceCollapsed;
  if (!collapsed && !p.empty() && SpaceWord(p, 0)) p.erase(p.begin());
  size_t at_end = p.size();
  while (at_end > 0 && SpaceWord(p, at_end - 1)) --at_end;
  if (collapsed) {
    // (A word of only a space before at_end is followed by another word:
    // removing it leaves the others as they were.)
    std::vector<Piece> kept;
    kept.reserve(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      if (i >= at_end || !SpaceWord(p, i)) kept.push_back(std::move(p[i]));
    }
    at_end -= p.size() - kept.size();
    p = std::move(kept);
  }
  return at_end;
}

// A text as sentencepiece's normalizer leaves it for a model without a map
// of its own that puts a dummy prefix and escapes spaces (sentencepiece
// 0.1.97's Normalizer::Normalize): a "▁" first, each space a "▁"; with
// remove_extra_whitespaces, spaces at the start dropped, and each after a
// space, and every "▁" at the end (a U+2581 of the text's too); nothing at
// all for an empty text, or with remove_extra_whitespaces one of only
// spaces.
struct Spaced {
  std::string text;
  // text.size() + 1 entries, as sentencepiece's norm_to_orig: where in the
  // input the character byte i came from begins; the last entry, where the
  // input's kept characters end.
  std::vector<size_t> source;
};

Spaced SpacedAsSentencePiece(std::string_view input, bool remove_extra) {
  Spaced out;
  size_t consumed = 0;
  while (remove_extra && consumed < input.size() && input[consumed] == ' ') ++consumed;
  if (consumed == input.size()) {
    out.source.push_back(consumed);
    return out;
  }
  const auto space = [&] {
    out.text.append(kSpace);
    out.source.insert(out.source.end(), kSpace.size(), consumed);
  };
  space();
  bool after_space = remove_extra;
  while (consumed < input.size()) {
    const size_t size = DecodeAt(input, consumed).second;
    if (input[consumed] == ' ') {
      if (!after_space) space();
      after_space = remove_extra;
    } else {
      out.text.append(input.substr(consumed, size));
      out.source.insert(out.source.end(), size, consumed);
      after_space = false;
    }
    consumed += size;
  }
  const auto ends_in_space = [&out] {
    return out.text.size() >= kSpace.size() &&
           out.text.compare(out.text.size() - kSpace.size(), kSpace.size(), kSpace) == 0;
  };
  while (remove_extra && ends_in_space()) {
    const size_t size = out.text.size() - kSpace.size();
    consumed = out.source[size];
    out.text.resize(size);
    out.source.resize(size);
  }
  out.source.push_back(consumed);
  return out;
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::unique_ptr<SentencePieceLibrary::Model> processor,
                         const SentencePieceOptions& options, int64_t vocab_size)
      : processor_(std::move(processor)),
        options_(options),
        vocab_size_(vocab_size),
        added_(std::exchange(options_.added_tokens, {})) {
    // (With Metaspace's spaces a piece with a "▁" past its first byte is
    // unused, never given: SentencePieceOptions::Spaces.)
    // (options_.unigram splits each word on its own.)
    const bool metaspace = options_.spaces != Spaces::kSentencePiece;
    for (int id = 0; id < processor_->piece_size(); ++id) {
      const std::string piece = processor_->IdToPiece(id);
      max_cover_bytes_ = std::max(max_cover_bytes_, CoverBytes(piece));
      if (!metaspace && !options_.unigram && piece.find(kSpace, 1) != std::string::npos) {
        splits_at_spaces_ = false;
      }
    }
    if (options_.unigram) {
      max_cover_bytes_ =
          std::max(max_cover_bytes_, static_cast<int64_t>(options_.unigram->longest_piece()));
    }
    // A text that starts at a space encodes as the whole text does from
    // there when the normalizer both puts a "▁" first and drops leading
    // spaces (the space's "▁" stands once), or does neither, or with
    // Metaspace's spaces, which put no "▁" before a space. Otherwise a
    // window at a space gains a "▁" (the dummy prefix and the kept space)
    // or loses one (no prefix; the space dropped): windows then all start
    // where the text does, and grow.
    const SentencePieceWhitespace& ws = processor_->whitespace();
    resumes_at_spaces_ =
        splits_at_spaces_ && (metaspace || (ws.escape_whitespaces &&
                                            ws.add_dummy_prefix == ws.remove_extra_whitespaces));
  }

  StatusOr<Encoding> Encode(std::string_view text, int64_t max_tokens,
                            bool truncate) const override {
    RETURN_IF_ERROR(CheckUtf8(text));
    const SpecialTokens& special = options_.special_tokens;
    return EncodeBounded(
        text, max_tokens, truncate, {special.bos, options_.pieces.bos},
        {special.eos, options_.pieces.eos},
        [this](const TextWindow& window) { return EncodeWindow(window); }, &added_);
  }

  int64_t vocab_size() const override { return vocab_size_; }
  const SpecialTokens& special_tokens() const override { return options_.special_tokens; }
  std::string Describe() const override {
    const char* spaces = options_.spaces == Spaces::kMetaspace ? ", spaces as Metaspace's"
                         : options_.spaces == Spaces::kMetaspaceCollapsed
                             ? ", spaces as Metaspace's after runs collapsed"
                             : "";
    return "sentencepiece (" + std::to_string(processor_->piece_size()) + " pieces, id offset " +
           std::to_string(options_.id_offset) + ", " + std::to_string(vocab_size_) + " tokens" +
           (options_.graphemes ? ", normalized a grapheme cluster at a time" : "") + spaces +
           (options_.unigram ? ", each word split by the tokenizers library's Unigram" : "") +
           added_.Describe() + ")";
  }

 private:
  // One window of the text (bounded_encoding.h). Pieces never span a space
  // when no piece has U+2581 after its first byte (checked at load), nor an
  // unknown character (sentencepiece gives a whole run of them one <unk>):
  // both are hard boundaries, where the text may be encoded on its own. A
  // word cut by the window's end is settled up to its last hard boundary:
  // how the rest of it splits may depend on its end (a unigram model splits
  // a word as a whole: "7" x 4353 starts "▁7 77", "7" x 4354 "▁ 77 77"), so
  // the driver reads larger windows until the word ends. Only a word longer
  // than kWholeWordBytes (16 KiB without a space, which no language writes)
  // is settled before its end, up to half its pieces, no closer than
  // kSettleMargin pieces to the cut: BPE and unigram segmentations of real
  // text settle long before that, but a periodic run may not (the "7"s
  // above; tests/unit/bounded_encoding_test.cc compares with whole-text
  // encodings).
  // Its lower bound comes from the normalized bytes its known pieces cover:
  // no piece covers more than max_cover_bytes_.
  //
  // sentencepiece joins a run of unknown characters into one piece by
  // appending, so its time for a run grows with the square of the run's
  // length within one window (2.3 s for 512 KiB of U+1F600 on the langid
  // model). Windows inside a run stay small (ResumeInRun), but a window
  // grows through a long cut word, or a stretch that encodes as nothing
  // (dropped characters, whitespace at its end), to whatever follows: a
  // window over kScanAbove bytes is first read in kScanChunk pieces, each
  // encoded alone (with the normalizer's reach on both sides), for an
  // unknown character, and where one turns up is encoded only to kScanChunk
  // (and that reach) past it, so that the run begins in the window and the
  // next resumes inside it. A piece alone is a hint only (what surrounds a
  // character may make it known; a run at a text's start may offer no
  // place to resume): where the window so cut lets no next one start, the
  // next unknown character past its cut is tried, kScanTries in all, and
  // then the window is encoded whole. (options_.unigram joins a run in
  // linear time.)
  StatusOr<WindowEncoding> EncodeWindow(const TextWindow& window) const {
    const std::string_view text = window.text;
    if (options_.scan_long_windows && !options_.unigram && text.size() > kScanAbove) {
      size_t from = 0;
      for (int tries = 0; tries < kScanTries; ++tries) {
        ASSIGN_OR_RETURN(const size_t unknown, FirstUnknownAlone(text, from));
        const size_t cut = unknown + kScanChunk + kNormalizerReach;
        if (unknown >= text.size() || cut >= text.size()) break;
        TextWindow shorter = window;
        shorter.text = text.substr(0, CharStartAtOrBefore(text, cut));
        shorter.whole = shorter.at_space = false;
        ASSIGN_OR_RETURN(WindowEncoding w, EncodeWholeWindow(shorter));
        if (w.resume_at > 0) {
          w.encoded = shorter.text.size();
          return w;
        }
        from = shorter.text.size();
      }
    }
    return EncodeWholeWindow(window);
  }

  // Where the first character of `text` from byte `from` on that is an
  // unknown piece begins, `text` read in pieces of kScanChunk bytes, each
  // encoded alone with kNormalizerReach bytes on both sides; text.size()
  // when none is.
  StatusOr<size_t> FirstUnknownAlone(std::string_view text, size_t from) const {
    if (from >= text.size()) return text.size();
    const auto reach = static_cast<size_t>(kNormalizerReach);
    for (size_t at = CharStartAtOrBefore(text, from); at < text.size();) {
      size_t end =
          text.size() - at > kScanChunk ? CharStartAtOrBefore(text, at + kScanChunk) : text.size();
      if (end <= at) end = at + DecodeAt(text, at).second;
      const size_t begin = at > reach ? CharStartAtOrBefore(text, at - reach) : 0;
      const size_t stop =
          text.size() - end > reach ? CharStartAtOrBefore(text, end + reach) : text.size();
      ASSIGN_OR_RETURN(const std::vector<Piece> pieces, PiecesOf(text.substr(begin, stop - begin)));
      for (const Piece& piece : pieces) {
        const size_t place = begin + piece.begin;
        if (IsUnknown(piece) && place >= at && place < end) return place;
      }
      at = end;
    }
    return text.size();
  }

  // EncodeWindow of all of `window`.
  StatusOr<WindowEncoding> EncodeWholeWindow(const TextWindow& window) const {
    ASSIGN_OR_RETURN(std::vector<Piece> pieces, PiecesAfterLead(window.lead, window.text));
    // Bytes before settled_end normalize as in the whole text: what follows
    // the cut changes at most the last kNormalizerReach bytes' (a lone
    // conjoining jamo is unknown, with its vowel after the cut a known
    // syllable; "<" is known, with U+0338 after it an unknown "≮").
    const size_t size = window.text.size();
    const size_t settled_end =
        size > static_cast<size_t>(kNormalizerReach) ? size - kNormalizerReach : 0;
    // (With a dummy prefix, a lone "▁" is that prefix: a space would add one.)
    const bool nothing = pieces.empty() || (pieces.size() == 1 && pieces[0].piece == kSpace &&
                                            processor_->whitespace().add_dummy_prefix);
    if (nothing && !window.whole && !window.in_unknown_run) {
      // Nothing but characters the normalizer drops, or makes spaces it
      // strips: from any place in it the text encodes as from its start, so
      // the next window starts near the cut, not here, larger. (Growing it
      // took in whatever followed such a stretch, a run of unknown
      // characters too, in one window.)
      WindowEncoding out;
      out.resume_at = CharStartAtOrBefore(window.text, settled_end);
      return out;
    }
    size_t spaces_at_end = pieces.size();
    if (options_.spaces != Spaces::kSentencePiece) {
      spaces_at_end = MetaspaceWords(options_.spaces, &pieces);
      // Collapsed, the spaces at the text's end are one word.
      if (window.whole && options_.spaces == Spaces::kMetaspaceCollapsed &&
          spaces_at_end < pieces.size()) {
        pieces.resize(spaces_at_end + 1);
      }
    }
    size_t first = 0;
    if (window.in_unknown_run) {
      // The window starts inside an unknown run whose <unk> is counted
      // (ResumeInRun): skip the dummy-prefix piece and that <unk>.
      if (first < pieces.size() && pieces[first].piece == kSpace) ++first;
      if (first < pieces.size() && IsUnknown(pieces[first])) ++first;
    }
    WindowEncoding out;
    for (size_t i = first; i < pieces.size(); ++i) {
      out.ids.push_back(TokenId(pieces[i]));
      out.pieces.push_back(std::move(pieces[i].piece));
    }
    const auto n = static_cast<int64_t>(out.ids.size());
    if (!window.whole && spaces_at_end < pieces.size()) {
      // Metaspace's spaces, and the window ends in spaces: how many words
      // they make depends on what follows (the text's end, a word, more
      // spaces). Settled: what comes before them and, uncollapsed, each but
      // the last (each is followed by a space). The next window starts at
      // the last, from where Metaspace reads the rest as in the whole text
      // (unless that space's character also gave earlier pieces).
      const size_t last = pieces.size() - 1;
      const size_t before = options_.spaces == Spaces::kMetaspaceCollapsed ? spaces_at_end : last;
      out.settled = out.min_tokens = static_cast<int64_t>(std::max(before, first) - first);
      const Piece& space = pieces[last];
      if (space.begin > 0 && (last == 0 || (space.begin > pieces[last - 1].begin &&
                                            space.begin >= pieces[last - 1].end))) {
        out.resume_at = space.begin;
        out.resume_tokens = out.settled;
      }
      return out;
    }
    if (window.whole || (window.at_space && splits_at_spaces_)) {
      out.settled = out.min_tokens = n;
      if (window.at_space && resumes_at_spaces_) {
        out.resume_at = window.text.size();
        out.resume_tokens = n;
      }
      return out;
    }
    // The window is cut mid-word. Tokens before `exact` are settled; the
    // next window may start at `resume_at`. A "▁" piece starts a word where
    // it is the first piece of its characters: one character may normalize
    // to several words (NFKC makes U+FDFA four), whose later pieces all
    // begin where it does, and a window from there would give the earlier
    // ones again.
    int64_t exact = 0;
    for (int64_t i = n - 1; i >= 1 && splits_at_spaces_; --i) {
      const Piece& piece = pieces[first + i];
      const Piece& before = pieces[first + i - 1];
      if (out.pieces[i].compare(0, kSpace.size(), kSpace) == 0 && piece.begin > before.begin &&
          piece.begin >= before.end) {
        exact = i;
        if (resumes_at_spaces_) {
          out.resume_at = piece.begin;
          out.resume_tokens = i;
        }
        break;
      }
    }
    // The cut word's last unknown piece that begins before settled_end (-1:
    // the run an earlier window counted, whose <unk> this one skipped;
    // none: null). One that begins later may be no unknown piece, or part
    // of another one, in the whole text.
    int64_t unknown = -1;
    const Piece* run = nullptr;
    for (int64_t i = n - 1; i >= exact; --i) {
      const Piece& piece = pieces[first + i];
      if (IsUnknown(piece) && piece.begin < settled_end) {
        unknown = i;
        run = &piece;
        break;
      }
    }
    if (!run && exact == 0 && window.in_unknown_run && first > 0 && IsUnknown(pieces[first - 1])) {
      run = &pieces[first - 1];
    }
    if (run) {
      // One <unk> for the run, counted here (or by an earlier window).
      // Resume inside it, in small windows: what follows it (up to the cut,
      // where a word may go on) is read again. (A window that grew instead,
      // when the run reached or ended near its cut, kept the cut in the
      // same place of the run, up to the whole text, and sentencepiece's
      // cost for a run grows faster than its length.)
      exact = unknown + 1;
      if (const size_t at = ResumeInRun(window.text, pieces, *run, settled_end); at > 0) {
        out.resume_at = at;
        out.resume_tokens = exact;
        out.resume_in_unknown_run = true;
      } else if (first > 0 && run == &pieces[first - 1] && run->end > 0) {
        // The run this window resumed in, whose only character the
        // vocabulary does not know is its first (or the lead), then
        // characters the normalizer drops: the next window starts at the
        // last of them (or at settled_end), led by the window's first
        // character (or its lead), where that and the text from there
        // encode as one <unk> to the run's end (the dropped character
        // keeps the lead from joining what follows it, as in the whole
        // text).
        const size_t at = CharStartAtOrBefore(window.text, std::min(run->end - 1, settled_end));
        std::string lead(window.lead);
        if (lead.empty()) lead = window.text.substr(0, DecodeAt(window.text, 0).second);
        if (at > 0 && LeadsAsUnknown(lead, window.text.substr(at), run->end - at)) {
          out.resume_at = at;
          out.resume_tokens = exact;
          out.resume_in_unknown_run = true;
          out.resume_lead = std::move(lead);
        }
      }
    }
    int64_t covered = 0;
    for (int64_t i = exact; i < n; ++i) covered += CoverBytes(out.pieces[i]);
    const int64_t reach = kNormalizerReach + max_cover_bytes_;
    const int64_t cut = n - exact;
    if (window.text.size() >= kWholeWordBytes)
      out.settled = exact + std::max<int64_t>(0, cut - std::max(cut / 2, kSettleMargin));
    else
      out.settled = exact;
    out.min_tokens = exact + (covered > reach ? (covered - reach) / max_cover_bytes_ : 0);
    return out;
  }

  // sentencepiece's pieces of `text`, with where each begins and ends in
  // it. With options_.graphemes, sentencepiece reads the text that
  // normalizes it (the model has no map of its own), and the pieces'
  // offsets are taken back to `text` as sentencepiece takes its own map's.
  StatusOr<std::vector<Piece>> PiecesOf(std::string_view text) const {
    if (!options_.graphemes) {
      return options_.unigram ? UnigramPieces(text) : processor_->EncodeWithOffsets(text);
    }
    ASSIGN_OR_RETURN(const PrecompiledGraphemes::Normalized normalized,
                     options_.graphemes->Normalize(text));
    std::vector<Piece> pieces;
    if (options_.unigram) {
      pieces = UnigramPieces(normalized.text);
    } else {
      ASSIGN_OR_RETURN(pieces, processor_->EncodeWithOffsets(normalized.text));
    }
    const size_t size = normalized.text.size();
    for (Piece& piece : pieces) {
      const size_t begin = std::min(piece.begin, size), end = std::min(piece.end, size);
      piece.begin = normalized.input_at[begin];
      piece.end = normalized.input_at[end];
      // The start of the cluster a whole-replaced one's last byte came from
      // (its last character would begin a window that normalizes it apart).
      piece.last = end > begin ? normalized.input_at[end - 1] : piece.begin;
    }
    return pieces;
  }

  // options_.unigram's pieces of `text`, as sentencepiece gives its own
  // (an <unk>'s piece is its text): its words are those of the text as
  // sentencepiece's normalizer spaces it (SpacedAsSentencePiece), each from
  // a "▁" to the next, as Metaspace splits them; a piece's id is its token
  // id.
  std::vector<Piece> UnigramPieces(std::string_view text) const {
    const Spaced spaced =
        SpacedAsSentencePiece(text, processor_->whitespace().remove_extra_whitespaces);
    const std::string_view s = spaced.text;
    std::vector<Piece> pieces;
    std::vector<UnigramModel::Token> tokens;
    for (size_t word = 0; word < s.size();) {
      const size_t next = std::min(s.find(kSpace, word + 1), s.size());
      tokens.clear();
      options_.unigram->Encode(s.substr(word, next - word), &tokens);
      for (const UnigramModel::Token& token : tokens) {
        Piece& piece = pieces.emplace_back();
        piece.piece = std::string(s.substr(word + token.begin, token.end - token.begin));
        piece.id = token.id;
        piece.begin = spaced.source[word + token.begin];
        piece.end = spaced.source[word + token.end];
        piece.last =
            piece.end > piece.begin ? CharStartAtOrBefore(text, piece.end - 1) : piece.begin;
      }
      word = next;
    }
    return pieces;
  }

  bool IsUnknown(const Piece& piece) const {
    return piece.id == (options_.unigram ? options_.unigram->unk_id() : processor_->unk_id());
  }

  // The token id of one of PiecesOf's pieces.
  int32_t TokenId(const Piece& piece) const {
    return options_.unigram ? piece.id : PieceToId(piece.piece);
  }

  // Where a window may resume inside the unknown run `run` (one of the
  // window's `pieces`): the start of a character at or before settled_end
  // from which the window's text encodes as one <unk> (after a "▁") to the
  // run's end, so that a window from there gives the whole text's pieces
  // after the run; and after where the piece before the run last began, as
  // a window from there would give that piece again (U+00BC is "1", an
  // unknown U+2044 and "4"). The run's last character (or the one at
  // settled_end) and the four before it, else the last such place by
  // bisection (a run may end in characters the normalizer drops, from
  // which the text encodes as nothing: from a place the text encodes so,
  // it does from every earlier one in the run). 0: none.
  size_t ResumeInRun(std::string_view text, const std::vector<Piece>& pieces, const Piece& run,
                     size_t settled_end) const {
    size_t lowest = std::max<size_t>(run.begin, 1);
    if (&run != pieces.data()) lowest = std::max(lowest, (&run - 1)->last + 1);
    if (lowest >= text.size()) return 0;
    const size_t lowest_char = CharStartAtOrBefore(text, lowest);
    lowest = lowest_char < lowest ? lowest_char + DecodeAt(text, lowest_char).second : lowest;
    const auto resumes = [&](size_t at) {
      return at <= run.end && UnknownFirst(PiecesOf(text.substr(at)), run.end - at) != nullptr;
    };
    size_t hi = CharStartAtOrBefore(text, std::min(run.last, settled_end));
    if (hi < lowest) return 0;
    for (int tries = 0; tries < 4; ++tries) {
      if (resumes(hi)) return hi;
      if (hi == lowest) return 0;
      hi = CharStartAtOrBefore(text, hi - 1);
    }
    if (resumes(hi)) return hi;
    if (!resumes(lowest)) return 0;
    // resumes(lo), not resumes(hi).
    size_t lo = lowest;
    while (true) {
      const size_t mid = CharStartAtOrBefore(text, lo + (hi - lo) / 2);
      if (mid <= lo) return lo;
      (resumes(mid) ? lo : hi) = mid;
    }
  }

  // The first piece of `pieces` after a "▁", if it is an <unk> that ends at
  // `end`: the text encodes from its start as a run's <unk> to there.
  const Piece* UnknownFirst(const StatusOr<std::vector<Piece>>& pieces, size_t end) const {
    if (!pieces.ok()) return nullptr;
    const size_t i = !pieces->empty() && (*pieces)[0].piece == kSpace ? 1 : 0;
    if (i >= pieces->size() || !IsUnknown((*pieces)[i]) || (*pieces)[i].end != end) return nullptr;
    return &(*pieces)[i];
  }

  // Whether `lead` alone, and `lead` + `text`, encode as one <unk> (after a
  // "▁") standing for all of the lead and the first `run` bytes of `text`:
  // a TextWindow::lead for a window of `text` inside that run.
  bool LeadsAsUnknown(std::string_view lead, std::string_view text, size_t run) const {
    const StatusOr<std::vector<Piece>> alone = PiecesOf(lead);
    const Piece* unknown = UnknownFirst(alone, lead.size());
    return unknown != nullptr && unknown == &alone->back() &&
           UnknownFirst(PiecesAfterLead(lead, text), run) != nullptr;
  }

  // PiecesOf(lead + text), with the offsets taken back to `text` (a piece
  // of the lead's begins at 0).
  StatusOr<std::vector<Piece>> PiecesAfterLead(std::string_view lead, std::string_view text) const {
    if (lead.empty()) return PiecesOf(text);
    std::string led(lead);
    led.append(text);
    ASSIGN_OR_RETURN(std::vector<Piece> pieces, PiecesOf(led));
    const size_t n = lead.size();
    for (Piece& piece : pieces) {
      piece.begin = std::max(piece.begin, n) - n;
      piece.end = std::max(piece.end, n) - n;
      piece.last = std::max(piece.last, n) - n;
    }
    return pieces;
  }

  // XLMRobertaTokenizer._convert_token_to_id: the fairseq specials by name,
  // then the sentencepiece id shifted by the offset; spm's own <unk> (id 0 in
  // XLM-R's model) maps to the fairseq <unk>.
  int32_t PieceToId(const std::string& piece) const {
    const SpecialTokens& special = options_.special_tokens;
    const SentencePieceOptions::Pieces& names = options_.pieces;
    if (piece == names.bos) return special.bos;
    if (piece == names.pad) return special.pad;
    if (piece == names.eos) return special.eos;
    if (piece == names.unk) return special.unk;
    const int spm_id = processor_->PieceToId(piece);
    return spm_id == processor_->unk_id() ? special.unk : spm_id + options_.id_offset;
  }

  std::unique_ptr<SentencePieceLibrary::Model> processor_;
  SentencePieceOptions options_;
  int64_t vocab_size_;
  // The most normalized bytes one piece stands for (at least 1).
  int64_t max_cover_bytes_ = 1;
  // No piece has U+2581 after its first byte: pieces never span a space.
  bool splits_at_spaces_ = true;
  // A window may start at a space (see the constructor).
  bool resumes_at_spaces_ = true;
  AddedTokens added_;
};

// The vocabulary transformers' converter makes of a Unigram model whose
// first pieces are <unk> <s> </s>, where the options carry its class's ids
// (XlmrConverterLayout, CamembertConverterLayout). Null for another model
// or other ids, which keep sentencepiece's own Viterbi.
StatusOr<std::shared_ptr<const UnigramModel>> FastClassUnigram(std::string_view serialized_model,
                                                               const SentencePieceOptions& options,
                                                               int64_t vocab_size) {
  ASSIGN_OR_RETURN(const std::vector<SentencePieceEntry> pieces,
                   ReadSentencePieces(serialized_model));
  const UnigramConverterLayout* layout = nullptr;
  for (const UnigramConverterLayout* l : {&XlmrConverterLayout(), &CamembertConverterLayout()}) {
    const SpecialTokens& s = options.special_tokens;
    if (options.id_offset == l->offset && s.bos == l->ids.bos && s.pad == l->ids.pad &&
        s.eos == l->ids.eos && s.unk == l->ids.unk) {
      layout = l;
      break;
    }
  }
  if (pieces.size() < 3 || pieces[0].piece != "<unk>" || pieces[1].piece != "<s>" ||
      pieces[2].piece != "</s>" || options.special_ids_from_model || layout == nullptr) {
    return std::shared_ptr<const UnigramModel>();
  }
  std::vector<UnigramModel::Entry> vocab;
  for (const UnigramConverterLayout::Entry& e : layout->first) {
    vocab.push_back({e.piece, e.model_piece >= 0 ? pieces[e.model_piece].score : e.score});
  }
  for (size_t i = 3; i < pieces.size(); ++i) vocab.push_back({pieces[i].piece, pieces[i].score});
  // Appended even where the model has a <mask> of its own, which then loses
  // its id: the library keeps a repeated piece's last entry.
  if (static_cast<int64_t>(vocab.size()) < vocab_size) vocab.push_back({options.pieces.mask, 0});
  return UnigramModel::Create(std::move(vocab), /*unk_id=*/3);
}

}  // namespace

const UnigramConverterLayout& XlmrConverterLayout() {
  static const UnigramConverterLayout layout{
      "XLM-R's",
      {{"<s>", -1, 0}, {"<pad>", -1, 0}, {"</s>", -1, 0}, {"<unk>", -1, 0}},
      /*offset=*/1,
      /*ids: bos, eos, pad, unk=*/{0, 2, 1, 3}};
  return layout;
}

const UnigramConverterLayout& CamembertConverterLayout() {
  static const UnigramConverterLayout layout{"CamemBERT's",
                                             {{"<s>NOTUSED", -1, 0},
                                              {"<pad>", -1, 0},
                                              {"</s>NOTUSED", -1, 0},
                                              {"<unk>", -1, 0},
                                              {"<unk>NOTUSED", -1, -100},
                                              {"<s>", 1, 0},
                                              {"</s>", 2, 0}},
                                             /*offset=*/4,
                                             /*ids: bos, eos, pad, unk=*/{5, 6, 1, 3}};
  return layout;
}

std::vector<AddedToken> XlmrClassSpecials() {
  AddedToken mask{"<mask>"};
  mask.lstrip = true;
  return {AddedToken{"<s>"}, AddedToken{"<pad>"}, AddedToken{"</s>"}, AddedToken{"<unk>"}, mask};
}

std::vector<AddedToken> CamembertClassSpecials() {
  // The layout's entries that are neither the model's pieces nor fairseq's
  // <pad> and <unk>, at their ids (the NOTUSED tokens).
  const std::vector<UnigramConverterLayout::Entry>& fairseq = XlmrConverterLayout().first;
  const std::vector<UnigramConverterLayout::Entry>& first = CamembertConverterLayout().first;
  std::vector<AddedToken> tokens;
  for (size_t id = 0; id < first.size(); ++id) {
    const std::string_view piece = first[id].piece;
    const bool fairseqs = std::any_of(fairseq.begin(), fairseq.end(),
                                      [piece](const auto& e) { return piece == e.piece; });
    if (first[id].model_piece < 0 && !fairseqs) {
      tokens.push_back(AddedToken{std::string(piece), static_cast<int32_t>(id)});
    }
  }
  for (AddedToken& token : XlmrClassSpecials()) tokens.push_back(std::move(token));
  return tokens;
}

StatusOr<std::unique_ptr<Tokenizer>> CreateSentencePieceTokenizerFromProto(
    std::string_view serialized_model, const SentencePieceOptions& options,
    const std::string& source) {
  ASSIGN_OR_RETURN(const SentencePieceLibrary* library, SentencePieceLibrary::Get());
  std::shared_ptr<const PrecompiledGraphemes> graphemes = options.graphemes;
  std::string without_map;
  StatusOr<bool> unigram = options.fast_class ? IsUnigramModel(serialized_model) : false;
  if (!unigram.ok()) {
    return InvalidArgument(source +
                           " is not a valid sentencepiece model: " + unigram.status().message());
  }
  if (*unigram) {
    if (graphemes) return InvalidArgument("fast_class beside graphemes");
    std::string map;
    StatusOr<std::string> fast = FastClassModel(serialized_model, &map);
    if (!fast.ok()) {
      return InvalidArgument(source +
                             " is not a valid sentencepiece model: " + fast.status().message());
    }
    if (!map.empty()) {
      StatusOr<std::shared_ptr<const PrecompiledGraphemes>> made =
          PrecompiledGraphemes::Create(map);
      if (!made.ok()) {
        return InvalidArgument(source +
                               " is not a valid sentencepiece model: "
                               "normalizer_spec.precompiled_charsmap: " +
                               made.status().message());
      }
      graphemes = std::move(made).value();
    }
    without_map = std::move(fast).value();
    serialized_model = without_map;
  }
  StatusOr<std::unique_ptr<SentencePieceLibrary::Model>> loaded = library->Load(serialized_model);
  if (!loaded.ok() && loaded.status().code() != StatusCode::kInvalidArgument) {
    return loaded.status().WithContext(source);
  }
  if (!loaded.ok()) {
    return InvalidArgument(source +
                           " is not a valid sentencepiece model: " + loaded.status().message());
  }
  std::unique_ptr<SentencePieceLibrary::Model> processor = std::move(loaded).value();
  const int64_t pieces = processor->piece_size();
  if (pieces <= 0) return InvalidArgument(source + ": the sentencepiece model has no pieces");
  if (options.id_offset < 0) {
    return InvalidArgument("sentencepiece id_offset must not be negative, got " +
                           std::to_string(options.id_offset));
  }
  const int64_t needed = pieces + options.id_offset;
  const int64_t vocab_size = options.vocab_size == 0 ? needed : options.vocab_size;
  if (vocab_size < needed) {
    return InvalidArgument(source + ": " + std::to_string(pieces) + " pieces with id offset " +
                           std::to_string(options.id_offset) + " need a vocabulary of " +
                           std::to_string(needed) + " tokens, but vocab_size is " +
                           std::to_string(vocab_size));
  }
  SentencePieceOptions resolved = options;
  resolved.graphemes = std::move(graphemes);
  if (*unigram && !options.unigram) {
    StatusOr<std::shared_ptr<const UnigramModel>> words =
        FastClassUnigram(serialized_model, options, vocab_size);
    if (!words.ok()) {
      return InvalidArgument(source +
                             " is not a valid sentencepiece model: " + words.status().message());
    }
    resolved.unigram = std::move(words).value();
  }
  if (resolved.unigram) {
    const SentencePieceWhitespace& ws = processor->whitespace();
    if (!ws.add_dummy_prefix || !ws.escape_whitespaces) {
      return InvalidArgument(source +
                             ": a Unigram model of the tokenizers library's needs a model that "
                             "puts a \"\u2581\" first and makes spaces \"\u2581\"");
    }
  }
  if (options.special_ids_from_model) {
    const SentencePieceOptions::Pieces& p = options.pieces;
    SpecialTokens& ids = resolved.special_tokens;
    for (const auto& [piece, id] : {std::pair{&p.bos, &ids.bos}, std::pair{&p.eos, &ids.eos},
                                    std::pair{&p.pad, &ids.pad}, std::pair{&p.unk, &ids.unk}}) {
      const int spm_id = processor->PieceToId(*piece);
      if (processor->IdToPiece(spm_id) != *piece) {
        return InvalidArgument(source + ": the sentencepiece model has no piece \"" + *piece +
                               "\"");
      }
      *id = spm_id + options.id_offset;
    }
  }
  if (options.spaces != SentencePieceOptions::Spaces::kSentencePiece) {
    const SentencePieceWhitespace& ws = processor->whitespace();
    if (ws.remove_extra_whitespaces || !ws.add_dummy_prefix || !ws.escape_whitespaces ||
        processor->IdToPiece(processor->PieceToId(kSpace)) != kSpace) {
      return InvalidArgument(source +
                             ": Metaspace's spaces need a model that keeps spaces, puts a "
                             "\"\u2581\" first and has the piece \"\u2581\"");
    }
  }
  const SpecialTokens& s = resolved.special_tokens;
  for (const int32_t id : {s.bos, s.eos, s.pad, s.unk}) {
    if (id < 0 || id >= vocab_size) {
      return InvalidArgument(source + ": special token id " + std::to_string(id) +
                             " is outside the vocabulary of " + std::to_string(vocab_size));
    }
  }
  for (const AddedToken& token : options.added_tokens) {
    if (token.id >= vocab_size || token.id < -1) {
      return InvalidArgument(source + ": added token \"" + token.content + "\" has id " +
                             std::to_string(token.id) + ", outside the vocabulary of " +
                             std::to_string(vocab_size));
    }
  }
  const SentencePieceOptions::Pieces& p = options.pieces;
  resolved.added_tokens = ResolveIds(options.added_tokens, [&](const std::string& content) {
    for (const auto& [piece, id] : {std::pair{&p.bos, s.bos}, std::pair{&p.eos, s.eos},
                                    std::pair{&p.pad, s.pad}, std::pair{&p.unk, s.unk}}) {
      if (content == *piece) return id;
    }
    // <mask> after the pieces, even where the model has a piece <mask>
    // (XLMRobertaTokenizer's fairseq_tokens_to_ids and the converters'
    // vocabularies put it there), unless the vocabulary ends with the pieces.
    if (content == p.mask && pieces + options.id_offset < vocab_size) {
      return static_cast<int32_t>(pieces + options.id_offset);
    }
    const int spm_id = processor->PieceToId(content);
    const int64_t id =
        processor->IdToPiece(spm_id) == content ? spm_id + options.id_offset : int64_t{-1};
    return id < vocab_size ? static_cast<int32_t>(id) : -1;
  });
  return std::unique_ptr<Tokenizer>(
      new SentencePieceTokenizer(std::move(processor), resolved, vocab_size));
}

StatusOr<std::unique_ptr<Tokenizer>> CreateSentencePieceTokenizer(
    const std::string& model_path, const SentencePieceOptions& options) {
  ASSIGN_OR_RETURN(std::string data, ReadWholeFile(model_path, "sentencepiece model file"));
  return CreateSentencePieceTokenizerFromProto(data, options,
                                               "sentencepiece model file " + model_path);
}

}  // namespace encoderd

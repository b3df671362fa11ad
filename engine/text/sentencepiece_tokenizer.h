// SentencePiece models as used by XLM-R / fairseq-style checkpoints:
// ids are the sentencepiece ids shifted by `id_offset` (fairseq's dictionary
// puts <s>, <pad>, </s>, <unk> first), with sentencepiece's own <unk> mapped
// to special_tokens.unk, as Hugging Face's XLMRobertaTokenizer does.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "engine/text/added_tokens.h"
#include "engine/text/sentencepiece_charsmap.h"
#include "engine/text/tokenizer.h"
#include "engine/text/unigram_model.h"

namespace encoderd {

struct SentencePieceOptions {
  // Added to every sentencepiece id (1 for XLM-R / fairseq dictionaries).
  int32_t id_offset = 1;
  // <s>=0, <pad>=1, </s>=2, <unk>=3 in XLM-R.
  SpecialTokens special_tokens;
  // Size of the model's vocabulary (embedding rows); 0 = spm size + offset.
  int64_t vocab_size = 0;
  // The specials' pieces, as pieces of an encoding show them and as a
  // piece of that text maps to their ids: fairseq's by default.
  struct Pieces {
    std::string bos = "<s>", eos = "</s>", pad = "<pad>", unk = "<unk>";
    // The mask token comes after the model's pieces: id piece_size +
    // id_offset (XLM-R's <mask>, 250001), even where the model has a piece
    // of its text (as XLMRobertaTokenizer's fairseq_tokens_to_ids and the
    // converters' vocabularies give it); where the vocabulary ends with the
    // pieces, the model's piece of its text, if it has one. Only an added
    // token of this content with id -1 takes that id.
    std::string mask = "<mask>";
  } pieces;
  // The special ids are those of `pieces` in the model (plus the offset),
  // not special_tokens' (DeBERTa-v2's [CLS] [SEP] [PAD] [UNK]); a piece the
  // model lacks is an error.
  bool special_ids_from_model = false;
  // How spaces become tokens. kSentencePiece: as the model's normalizer
  // says (remove_extra_whitespaces drops them at the ends and collapses
  // runs). The others are Hugging Face's fast pipeline for a converted
  // model (tokenizer.json: Precompiled, then Metaspace, which starts a word
  // at every space and gives a word of only a space the token "▁"); the
  // model must then keep spaces (remove_extra_whitespaces off), hold "▁",
  // and have no normal piece with a "▁" past its first byte (the pipeline
  // never makes one).
  enum class Spaces {
    kSentencePiece,
    // Precompiled alone: each space of a run but the last before a word is
    // a "▁" token, and each space at the end.
    kMetaspace,
    // Runs of spaces collapsed to one first (Replace " {2,}"): spaces at
    // the end are one "▁" token.
    kMetaspaceCollapsed,
  };
  Spaces spaces = Spaces::kSentencePiece;
  // Where set, a text is normalized by it (the tokenizers library's
  // Precompiled, one grapheme cluster at a time) before sentencepiece sees
  // it, whose model then has no map of its own: a tokenizer.json's
  // pipeline, where sentencepiece's longest match would differ.
  std::shared_ptr<const PrecompiledGraphemes> graphemes;
  // Where the model is Unigram (XLM-R's), it is read as the fast class
  // transformers converts it into reads it (FastClassModel): its own map
  // taken out and applied as `graphemes` (which must then be unset), its
  // spaces as the converter's (XLMRobertaConverter's, or with
  // CamembertTokenizer's ids CamembertConverter's, which are the same). A BPE model's fast class is
  // another tokenizer (the tokenizers library's BPE); such a model stays as sentencepiece reads it.
  bool fast_class = false;
  // Where set, sentencepiece splits no text: after the normalization above
  // and the model's whitespace flags (a "\u2581" first, spaces as "\u2581"),
  // each word (from a "\u2581" to the next) is split by this model, the
  // tokenizers library's Unigram, whose ids are the encoding's (special_tokens
  // must then be those ids; the pieces' and id_offset serve the rest). For a
  // tokenizer.json's Unigram, and a Unigram model read as the fast class
  // (fast_class) in XLM-R's layout, whose vocabulary is then made as
  // transformers' XLMRobertaConverter makes it (with CamembertTokenizer's
  // ids, as CamembertConverter makes it).
  std::shared_ptr<const UnigramModel> unigram;
  // Windows over 64 KiB are first read in pieces for a character the
  // vocabulary does not know, and encoded only to 1 KiB past one (an
  // unknown run costs sentencepiece time quadratic in its length within one
  // window). Off: encoded whole, as the tests' whole-text references are.
  bool scan_long_windows = true;
  // Matched in a text before it is encoded (added_tokens.h); each piece
  // between them is encoded with the dummy prefix ("▁" first). An id of -1
  // is resolved as XLMRobertaTokenizer resolves a token: one of `pieces`'
  // specials has its special id, a piece of the model its id plus the
  // offset (`pieces.mask`: see there); a token left without an id, or whose
  // id the vocabulary (vocab_size) does not hold, is dropped. A given id
  // outside the vocabulary is an error.
  std::vector<AddedToken> added_tokens;
};

// A vocabulary transformers' converters make of a sentencepiece Unigram
// model whose first pieces are <unk> <s> </s>: the entries `first`, then the
// model's pieces past those three, each `offset` past its id in the model,
// then <mask> where the vocabulary has room for it (even where the model has
// a piece <mask>: the tokenizers library keeps a repeated piece's last id).
// <pad> is 1 and <unk> 3 in every layout; an entry's id is its index.
struct UnigramConverterLayout {
  struct Entry {
    const char* piece;
    // The model's piece whose score the entry takes (its <s> 1, its </s>
    // 2), or -1: then `score`.
    int model_piece;
    double score;
  };
  const char* name;  // whose layout, for messages: "XLM-R's", "CamemBERT's"
  std::vector<Entry> first;
  int32_t offset;
  SpecialTokens ids;  // <s> and </s> (and <pad> 1, <unk> 3)
};
// XLMRobertaConverter's: fairseq's <s> <pad> </s> <unk> scored 0; offset 1,
// <s> 0, </s> 2 (XLMRobertaTokenizer's ids).
const UnigramConverterLayout& XlmrConverterLayout();
// CamembertConverter's: <s>NOTUSED <pad> </s>NOTUSED <unk> scored 0,
// <unk>NOTUSED -100, then the model's <s> and </s> with their scores;
// offset 4, <s> 5, </s> 6 (CamembertTokenizer's ids).
const UnigramConverterLayout& CamembertConverterLayout();

// The special tokens XLMRobertaTokenizer (transformers' class for a
// sentencepiece.bpe.model) matches in a text, their ids the model's (-1):
// <s> <pad> </s> <unk>, and <mask>, which comes after the model's pieces and
// takes the whitespace before it.
std::vector<AddedToken> XlmrClassSpecials();

// CamembertTokenizer's: <s>NOTUSED (0), </s>NOTUSED (2) and <unk>NOTUSED (4),
// then XlmrClassSpecials' (the model's <s> and </s>, fairseq's <pad> 1 and
// <unk> 3 by the options' ids).
std::vector<AddedToken> CamembertClassSpecials();

// Loads a sentencepiece .model file. A missing, unreadable or corrupt file is
// an error naming the file; ids that do not fit `vocab_size` are rejected here.
StatusOr<std::unique_ptr<Tokenizer>> CreateSentencePieceTokenizer(
    const std::string& model_path, const SentencePieceOptions& options);

// The same from a serialized ModelProto held in memory (the bytes of a .model
// file); `source` names it in error messages.
StatusOr<std::unique_ptr<Tokenizer>> CreateSentencePieceTokenizerFromProto(
    std::string_view serialized_model, const SentencePieceOptions& options,
    const std::string& source = "in-memory sentencepiece model");

}  // namespace encoderd

// Hugging Face's tokenizer.json (the `tokenizers` library's file, which many
// model folders ship alone, without vocab.txt or vocab.json + merges.txt).
// Two of its pipelines are read, each into the tokenizer that reproduces it:
//  - BERT's: model WordPiece ("##" prefix, [UNK]), normalizer BertNormalizer
//    (clean_text and handle_chinese_chars on; strip_accents null or equal to
//    lowercase), pre-tokenizer BertPreTokenizer, post-processor
//    BertProcessing or TemplateProcessing "[CLS] $A [SEP]" / "[CLS] $A [SEP]
//    $B:1 [SEP]:1" -> WordPiece (engine/text/wordpiece_tokenizer.h) with the
//    tokenizers library's rules (BertRules::kTokenizers);
//  - RoBERTa's: model BPE (no dropout, prefix, suffix, byte fallback or
//    ignore_merges), no normalizer, pre-tokenizer ByteLevel with its regex,
//    post-processor RobertaProcessing or TemplateProcessing "<s> $A </s>" /
//    "<s> $A </s> </s> $B </s>" -> byte-level BPE
//    (engine/text/byte_bpe_tokenizer.h), add_prefix_space from the
//    pre-tokenizer;
//  - XLM-R's, as transformers' XLMRobertaConverter writes it: model Unigram
//    with fairseq's <s> <pad> </s> <unk> first, normalizer Precompiled (and
//    space handling), pre-tokenizer Metaspace, RoBERTa's template -> the
//    sentencepiece model it was converted from
//    (engine/text/sentencepiece_tokenizer.h), fairseq's id offset 1; or the
//    same pipeline as CamembertConverter writes it (<s>NOTUSED <pad>
//    </s>NOTUSED <unk> <unk>NOTUSED first, then the model's <s> </s> and
//    other pieces), the model's ids 4 on.
// Anything else (other model types or layouts, normalizers or templates) is
// refused with the setting named (UNIMPLEMENTED), rather than tokenized
// differently from Hugging Face; a damaged file is INVALID_ARGUMENT.
// added_tokens are matched in a text as the library matches them
// (added_tokens.h): BERT's and RoBERTa's as ResolveAddedTokens takes them
// (model.vocab's special tokens, and others, past the vocabulary too, that
// encoderd matches as the library does); XLM-R's only model.vocab's special
// tokens. A single_word one, a normalized one under a normalizer, and all of
// them where the pre-tokenizer puts a prefix before each piece (ByteLevel's
// add_prefix_space, Metaspace's "first") are tokenized as text where they
// are model.vocab's special tokens, and refused otherwise.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "engine/text/text_pair.h"
#include "engine/text/tokenizer.h"

namespace encoderd {

// What transformers' fast tokenizer class sets over the file (from
// tokenizer_config.json and the class's defaults).
struct HfJsonOverrides {
  // BertTokenizerFast and its kin rebuild BERT's normalizer from their
  // do_lower_case, strip_accents (unset: following lower_case) and
  // tokenize_chinese_chars: with lower_case set, these replace the file's.
  std::optional<bool> lower_case;
  std::optional<bool> strip_accents;
  bool handle_chinese_chars = true;
  // RobertaTokenizerFast rebuilds the ByteLevel pre-tokenizer from its
  // add_prefix_space.
  std::optional<bool> add_prefix_space;
  // The model's token embedding rows, which an added token past the
  // vocabulary must fit (0: any id).
  int64_t added_id_limit = 0;
};

struct HfJsonTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
  // The pair template the file's post-processor writes.
  PairTemplate pairs = PairTemplate::kBert;
};

StatusOr<HfJsonTokenizer> CreateTokenizerFromHfJson(const std::string& path,
                                                    const HfJsonOverrides& overrides = {});

// The same from the file's contents; `source` names it in error messages.
StatusOr<HfJsonTokenizer> CreateTokenizerFromHfJsonData(std::string_view json,
                                                        const std::string& source,
                                                        const HfJsonOverrides& overrides = {});

}  // namespace encoderd

// One function per model family: finds the family's tensors in a checkpoint,
// moves them to canonical names (model_spec.h) and infers from their shapes
// what the shapes can tell. Each sets, in `config`: vocab_size, hidden_size,
// num_layers, intermediate_size, max_positions, type_vocab_size, num_labels,
// embedding_norm and final_norm; everything else (heads, eps, activations,
// position rule) comes from config.json or the model card. Errors name the
// checkpoint file and the key.
#pragma once

#include "core/status.h"
#include "core/tensor.h"
#include "engine/model/model_card.h"
#include "engine/model/model_spec.h"
#include "engine/model/weight_mapper.h"

namespace encoderd {

// The Hugging Face families' mappers read a classification head only where
// `sequence_head` (ArchitecturesServeASequenceHead) says the checkpoint's
// classifier is one.
//
// Hugging Face BertModel / BertForSequenceClassification (keys with or
// without "bert."; LayerNorm weight/bias or gamma/beta). The head is
// pooler.dense + classifier, present when "classifier.weight" is.
Status MapBertWeights(WeightMapper& mapper, bool sequence_head, EncoderConfig* config);
// DistilBertModel (or DistilBertForSequenceClassification, "distilbert."
// prefix + pre_classifier/classifier): no token types, q/k/v as q_lin/k_lin/v_lin.
Status MapDistilbertWeights(WeightMapper& mapper, bool sequence_head, EncoderConfig* config);
// ElectraModel / ElectraForPreTraining / ElectraForSequenceClassification
// ("electra." prefix, classifier.dense + classifier.out_proj): BERT's layers;
// embeddings of embedding_size with embeddings_project to the hidden size
// when the two differ. The discriminator's prediction head is not read.
Status MapElectraWeights(WeightMapper& mapper, bool sequence_head, EncoderConfig* config);
// MPNetModel / MPNetForSequenceClassification ("mpnet." prefix,
// classifier.dense + classifier.out_proj): embeddings without token types,
// attention.attn.{q,k,v,o}, attention.LayerNorm, BERT's feed-forward names,
// and encoder.relative_attention_bias [32, heads]. transformers buckets
// relative positions into 32 whatever relative_attention_num_buckets says
// (it reads only the table's first 32 rows); a table of other than 32 rows
// is refused.
Status MapMpnetWeights(WeightMapper& mapper, bool sequence_head, EncoderConfig* config);
// DebertaV2Model / DebertaV2ForSequenceClassification (DeBERTa-v2 and -v3;
// "deberta." prefix, pooler.dense + classifier): word embeddings, position
// and token-type tables where the checkpoint has them, their LayerNorm,
// attention.self.{query,key,value}_proj, BERT's other layer names, and
// encoder.rel_embeddings [2 x span, H] (attention_span) with the LayerNorm
// encoder.LayerNorm when it has one (relative_norm). Refused: embed_proj,
// the convolution beside the first layer, separate position projections.
// config.json decides the rest (model_directory.cc).
Status MapDebertaWeights(WeightMapper& mapper, bool sequence_head, EncoderConfig* config);

// Hugging Face RobertaModel / XLMRobertaModel / CamembertModel /
// Data2VecTextModel and their *ForSequenceClassification (keys with or
// without "roberta.", data2vec-text's "data2vec_text."). The head is
// classifier.dense + classifier.out_proj.
Status MapRobertaWeights(WeightMapper& mapper, bool sequence_head, EncoderConfig* config);

// Hugging Face RobertaPreLayerNormModel and its *ForSequenceClassification
// (keys with or without "roberta_prelayernorm."): RoBERTa's embeddings,
// pre-norm layers (attention.LayerNorm before the attention,
// intermediate.LayerNorm before the feed-forward) and a LayerNorm after the
// last layer; sets final_norm (norm_first is the family's, set with
// config.json's values). RoBERTa's head.
Status MapRobertaPreLayerNormWeights(WeightMapper& mapper, bool sequence_head,
                                     EncoderConfig* config);

// torchtext.models.RobertaModel ("encoder.transformer.*", optional
// RobertaClassificationHead "head.*"), with the nn.TransformerEncoderLayer
// names of torchtext >= 0.12 or the older "attention.input_projection" ones.
// With config->norm_first (normalize_before) torchtext applies
// embedding_layer_norm to the encoder output instead of the embeddings, so it
// becomes final_norm.
Status MapTorchtextRobertaWeights(WeightMapper& mapper, EncoderConfig* config);

// fairseq's RobertaModel (RoBERTa, XLM-R; the "model" entry of its
// checkpoint): "encoder.sentence_encoder.*", or "decoder.sentence_encoder.*"
// as fairseq 0.9 and before saved it; q, k and v as q_proj/k_proj/v_proj or,
// from fairseq 0.8 and before, stacked in in_proj_weight; the embeddings'
// LayerNorm as layernorm_embedding or emb_layer_norm (either optional: the
// pre-norm architectures have none). A final "layer_norm" is there only for
// encoder_normalize_before, so it makes the layers pre-norm
// (config->norm_first, which a card saying otherwise contradicts). The head
// is classification_heads.<head>.{dense, out_proj}, or with `head` empty the
// checkpoint's only one (more than one is then an error naming them);
// lm_head and the version buffer are not read.
Status MapFairseqRobertaWeights(WeightMapper& mapper, const std::string& head,
                                EncoderConfig* config);

// nn.Embedding + nn.TransformerEncoder under the card's key prefixes.
Status MapTransformerEncoderWeights(WeightMapper& mapper, const WeightPrefixes& prefixes,
                                    EncoderConfig* config);

}  // namespace encoderd

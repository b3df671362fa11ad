// Access to the model fixtures written by tests/fixtures/fx_models.py.
#pragma once

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "tests/unit/checkpoint_test_util.h"  // ReadTensorDump

namespace encoderd::testing {

// The fixture models this build can load: TorchScript archives need LibTorch
// (builds without it, e.g. the sanitizer builds, check their clear error in
// checkpoint_reader_test.cc instead).
inline const std::vector<std::string>& FixtureModelNames() {
  static const std::vector<std::string> names = {
      "hf_bert_legacy",
      "hf_bert_gamma_beta",
      "hf_roberta_safetensors",
      "hf_xlmr_zip",
      "hf_bert_cross_encoder",
      "hf_xlmr_regression",
      "hf_camembert_zip",
      "hf_data2vec_text",
      "hf_roberta_prelayernorm",
      "hf_roberta_prelayernorm_base",
      "hf_st_mean_normalize",
      "hf_st_cls_subfolder",
      "hf_st_dense",
      "hf_st54_max_dense",
      "hf_distilbert_classifier",
      "hf_distilbert_base",
      "hf_electra_classifier",
      "hf_mpnet_classifier",
      "hf_mpnet_base",
      "hf_st_mpnet",
      "hf_deberta_classifier",
      "hf_deberta_base",
      "hf_deberta_absolute",
      "torchtext_xlmr_legacy",
      "torchtext_xlmr_fairseq",
      "fairseq_xlmr_legacy",
      "fairseq_xlmr_base",
      "fairseq_xlmr_zip",
      "fairseq_xlmr_prenorm",
      "generic_prenorm_relu",
      "generic_postnorm_gelu",
#ifdef ENCODERD_WITH_TORCH
      "torchscript_encoder",
#endif
  };
  return names;
}

inline std::string ModelsDir() { return std::string(ENCODERD_FIXTURES_DIR) + "/models"; }

inline std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline nlohmann::json ReadJsonFile(const std::string& path) {
  return nlohmann::json::parse(ReadTextFile(path));
}

}  // namespace encoderd::testing

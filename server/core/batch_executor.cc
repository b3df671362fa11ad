#include "server/core/batch_executor.h"

#include <chrono>
#include <exception>
#include <functional>
#include <string>

namespace encoderd::server {
namespace {

StatusOr<std::vector<std::vector<float>>> RunGuarded(BatchEngine* engine, const PackedBatch& batch,
                                                     const std::vector<OutputSpec>& specs,
                                                     const std::function<bool()>& stop) {
  try {
    return engine->Run(batch, specs, stop);
  } catch (const std::exception& e) {
    return Internal(std::string("engine failure: ") + e.what());
  } catch (...) {
    return Internal("engine failure (unknown exception)");
  }
}

void FailAll(const BatchPlan& plan, const Status& status) {
  for (const BatchSlice& slice : plan.slices) slice.request->Fail(status);
}

// Whether no request of the batch waits for it any more: each one failed
// (cancelled, past its deadline, the server shut down, or another of its
// batches failed), so nothing the batch computes would be delivered.
bool EveryRequestGone(const BatchPlan& plan) {
  for (const BatchSlice& slice : plan.slices)
    if (!slice.request->finished()) return false;
  return true;
}

}  // namespace

Status ExecuteBatch(const BatchPlan& plan, const PackingRule& rule, BatchEngine* engine,
                    BatchSample* sample) {
  BatchSample unused;
  if (!sample) sample = &unused;
  *sample = BatchSample{};
  sample->ok = false;
  const Clock::time_point start = Clock::now();
  PackedBatchBuilder builder(rule.position_rule, rule.pad_token_id);
  std::vector<OutputSpec> specs;
  for (const BatchSlice& slice : plan.slices) {
    for (int32_t i = slice.begin; i < slice.end; ++i) {
      Status added = builder.Add(slice.request->sequence(i), slice.request->token_types(i),
                                 {slice.request->id(), i}, slice.request->spec().pool_start);
      if (!added.ok()) {
        FailAll(plan, added);
        return added;
      }
      specs.push_back(slice.request->spec());
    }
  }
  const PackedBatch batch = builder.Build();
  auto outputs = RunGuarded(engine, batch, specs, [&plan] { return EveryRequestGone(plan); });
  if (outputs.ok() && outputs->size() != specs.size())
    outputs = Internal("engine returned " + std::to_string(outputs->size()) + " results for " +
                       std::to_string(specs.size()) + " sequences");
  const int64_t inference_us =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
  sample->sequences = batch.num_sequences();
  sample->tokens = batch.num_tokens();
  sample->padded_tokens = batch.padded_tokens();
  sample->inference_us = inference_us;
  if (!outputs.ok()) {
    sample->abandoned = outputs.status().code() == StatusCode::kCancelled && EveryRequestGone(plan);
    FailAll(plan, outputs.status());
    return outputs.status();
  }
  sample->ok = true;
  // Timing first: the last Complete() wakes the handler, which reads it.
  for (const BatchSlice& slice : plan.slices) slice.request->AddBatch(start, inference_us);
  size_t k = 0;
  for (const BatchSlice& slice : plan.slices)
    for (int32_t i = slice.begin; i < slice.end; ++i)
      slice.request->Complete(i, std::move((*outputs)[k++]));
  return Status::Ok();
}

}  // namespace encoderd::server

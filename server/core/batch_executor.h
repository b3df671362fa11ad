// Runs one planned batch on a BatchEngine and delivers the results to the
// requests it came from. A failed batch fails every request in it with the
// same status; exceptions from the engine are caught here. The engine is told
// to stop once every request of the batch is gone (each one cancelled, past
// its deadline or failed): no one would read what it computes.
#pragma once

#include "engine/model/model_spec.h"
#include "server/core/batch_engine.h"
#include "server/core/batch_policy.h"
#include "server/metrics/serving_metrics.h"

namespace encoderd::server {

struct PackingRule {
  PositionRule position_rule = PositionRule::kFromZero;
  int32_t pad_token_id = 0;
};

// Called on an executor thread. Returns the engine's status (already delivered
// to the requests) for logging. When `sample` is not null it receives the
// batch's size, padding and engine time for metrics.
Status ExecuteBatch(const BatchPlan& plan, const PackingRule& rule, BatchEngine* engine,
                    BatchSample* sample = nullptr);

}  // namespace encoderd::server

// LoadRunner: one bounded load run (closed or open loop) against a channel.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "loadtest/load_options.h"
#include "loadtest/run_stats.h"
#include "loadtest/workload.h"

namespace encoderd::loadtest {

// Runs warm-up then the measured phase, waits for every call to finish (each
// has a deadline, so this is bounded) and returns the counted calls' stats.
// open_rate is the offered rate for LoadMode::kOpen (ignored when closed).
RunStats RunLoad(std::shared_ptr<grpc::Channel> channel, const LoadOptions& options,
                 const Workload& workload, double open_rate);

}  // namespace encoderd::loadtest

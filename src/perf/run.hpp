// The two sides of an rdmakit-perf run. The client drives: for each size it sends Begin, waits for Ready,
// measures, sends End and waits for the server's Verdict (its data check). The server follows.
#pragma once

#include <functional>
#include <memory>

#include "perf/params.hpp"
#include "perf/report.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit::perf {

// Called after each size, so a sweep prints as it goes.
using RowSink = std::function<void(const RunInfo&, const Row&)>;

Result<Report> run_client(const Params& params, std::shared_ptr<Context> context, const RowSink& on_row = {});
// Serves one client that connects to `listener`, then returns.
Result<void> run_server(const Params& params, std::shared_ptr<Context> context, Listener& listener);

}  // namespace rdmakit::perf

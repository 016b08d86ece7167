// rdmakit-perf: perftest-style bandwidth and latency tests over any rdmakit transport.
//
//   rdmakit-perf write_bw                    server: listens on 127.0.0.1:18515, serves one client
//   rdmakit-perf write_bw 127.0.0.1 -a       client: sweeps sizes, prints a table (--json / --csv)
//
// All the measuring lives in src/perf (reused by the tests); this file parses, opens, prints.
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "perf/params.hpp"
#include "perf/run.hpp"
#include "perf/session.hpp"

namespace {

using namespace rdmakit;

int fail(const char* what, const Error& error) {
  std::fprintf(stderr, "rdmakit-perf: %s: %s\n", what, error.describe().c_str());
  return 1;
}

int serve(const perf::Params& params, std::shared_ptr<Context> context) {
  std::string address = perf::endpoint(params.listen_host, params.port, context->capabilities());
  auto listener = context->listen(address);
  if (!listener) return fail("listen", listener.error());
  std::fprintf(stderr, "rdmakit-perf: %s server on %s (%s transport), waiting for a client\n",
               std::string(perf::to_string(params.test)).c_str(), (*listener)->address().c_str(),
               std::string(context->transport()).c_str());
  if (auto ok = perf::run_server(params, context, **listener); !ok) return fail("server", ok.error());
  return 0;
}

int drive(const perf::Params& params, std::shared_ptr<Context> context) {
  bool header_done = false;
  auto print_row = [&](const perf::RunInfo& info, const perf::Row& row) {
    if (params.format != perf::OutputFormat::Table) return;
    if (!header_done) std::fputs(perf::table_header(info, perf::is_bandwidth(params.test)).c_str(), stdout);
    header_done = true;
    std::fputs(perf::table_row(row).c_str(), stdout);
    std::fflush(stdout);
  };
  auto report = perf::run_client(params, std::move(context), print_row);
  if (!report) return fail("client", report.error());
  if (params.format == perf::OutputFormat::Json) std::fputs(perf::to_json(*report).c_str(), stdout);
  if (params.format == perf::OutputFormat::Csv) std::fputs(perf::to_csv(*report).c_str(), stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  auto params = perf::parse_args(args);
  if (!params) {
    std::fprintf(stderr, "rdmakit-perf: %s\n%s", params.error().message().c_str(), perf::usage().c_str());
    return 2;
  }
  if (params->help) return std::fputs(perf::usage().c_str(), stdout), 0;
  auto context = perf::open_context(*params);
  if (!context) return fail("open", context.error());
  return params->server.empty() ? serve(*params, *context) : drive(*params, *context);
}

#include "ckpt/options.hpp"

#include <algorithm>
#include <thread>

#include "ckpt/manifest.hpp"

namespace rdmakit::ckpt::detail {
namespace {

struct CkptConfig {
  std::uint32_t keep = 0;
  std::size_t chunk_bytes = 0;
  std::uint32_t io_depth = 0;
  std::optional<std::uint32_t> copy_threads;  // unset: min(4, cores)
  bool direct_io = true;
  std::uint32_t replica_timeout_ms = 0;
  bool shared_group = false;
};

using options::option;
using C = CkptConfig;
using O = EngineOptions;

std::vector<options::Spec<C, O>> specs() {
  return {
      option("ckpt_keep", "3",
             "checkpoints: committed checkpoints kept (>= 1); older ones are deleted after a commit",
             "an integer", &C::keep, &O::keep),
      option("ckpt_chunk_bytes", "4194304",
             "checkpoints: write and checksum unit (a multiple of 4096, up to 1 GiB)", "an integer",
             &C::chunk_bytes, &O::chunk_bytes),
      option("ckpt_io_depth", "4", "checkpoints: writes in flight (1..256)", "an integer", &C::io_depth,
             &O::io_depth),
      option("ckpt_copy_threads", nullptr,
             "checkpoints: threads splitting the snapshot copy; unset = min(4, cores)", "an integer",
             &C::copy_threads, &O::copy_threads),
      option("ckpt_direct_io", "yes",
             "checkpoints: write with O_DIRECT (falls back to buffered I/O, with a warning, "
             "where refused)",
             "yes or no", &C::direct_io, &O::direct_io),
      option("ckpt_replica_timeout_ms", "10000",
             "checkpoints: how long Engine::create waits for the replica server (connect, proof, hello)",
             "an integer", &C::replica_timeout_ms, &O::replica_timeout_ms),
      option("ckpt_shared_group", "no",
             "checkpoints: create directories 0750 and files 0640 (group-readable) instead of 0700 / 0600",
             "yes or no", &C::shared_group, &O::shared_group),
  };
}

Result<void> check(C& c, const options::SetOptions&) {
  auto bad = [](const char* name, const std::string& why) {
    return std::unexpected(options::bad_option(name, why));
  };
  if (c.keep == 0) return bad("ckpt_keep", "EngineOptions::keep must be at least 1");
  if (c.chunk_bytes == 0 || c.chunk_bytes % kIoAlignment != 0 || c.chunk_bytes > kMaxChunkBytes)
    return bad("ckpt_chunk_bytes", "EngineOptions::chunk_bytes must be a multiple of 4096 up to 1 GiB, got " +
                                       std::to_string(c.chunk_bytes));
  if (c.io_depth == 0 || c.io_depth > 256)
    return bad("ckpt_io_depth", "EngineOptions::io_depth must be 1..256");
  if (c.replica_timeout_ms == 0) return bad("ckpt_replica_timeout_ms", "must be at least 1");
  if (c.copy_threads && *c.copy_threads == 0) return bad("ckpt_copy_threads", "must be at least 1 when set");
  return {};
}

const options::OptionTable<C, O>& table() {
  static const options::OptionTable<C, O> table("ckpt", specs(), check);
  return table;
}

}  // namespace

Result<EngineOptions> resolve_engine_options(EngineOptions given) {
  auto config = table().resolve(given);
  if (!config) return std::unexpected(config.error());
  given.keep = config->keep;
  given.chunk_bytes = config->chunk_bytes;
  given.io_depth = config->io_depth;
  given.copy_threads =
      config->copy_threads.value_or(std::min(4u, std::max(1u, std::thread::hardware_concurrency())));
  given.direct_io = config->direct_io;
  given.replica_timeout_ms = config->replica_timeout_ms;
  given.shared_group = config->shared_group;
  return given;
}

const options::Table& ckpt_option_table() { return table(); }

}  // namespace rdmakit::ckpt::detail

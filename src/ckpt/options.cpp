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
  return given;
}

const options::Table& ckpt_option_table() { return table(); }

}  // namespace rdmakit::ckpt::detail

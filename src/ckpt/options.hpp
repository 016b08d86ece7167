// The checkpoint engine's tunables as a table of the one options system (core/option_table.hpp):
// EngineOptions set in code > RDMAKIT_CKPT_<NAME> > default, listed by `rdmakit-info --config`.
#pragma once

#include "core/option_table.hpp"
#include "rdmakit/ckpt/engine.hpp"

namespace rdmakit::ckpt::detail {

// `given` with every tunable filled in (keep, chunk_bytes, io_depth, copy_threads, direct_io), or an error
// naming the option.
Result<EngineOptions> resolve_engine_options(EngineOptions given);
const options::Table& ckpt_option_table();

}  // namespace rdmakit::ckpt::detail

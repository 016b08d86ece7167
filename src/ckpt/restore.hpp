// Reading a checkpoint back: every chunk is checked against the manifest's checksum as it arrives.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "ckpt/io.hpp"
#include "rdmakit/ckpt/store.hpp"

namespace rdmakit::ckpt::detail {

using Progress = std::function<void(std::uint64_t done, std::uint64_t total)>;
// Called (on the reading thread) for each chunk whose checksum matched, while later reads are in flight.
using Verified = std::function<void(std::uint64_t offset, std::uint64_t size)>;

// Reads every data file of `manifest` (at `path`) with io_uring and checks every chunk. With `dest`, the
// manifest must have one file and `dest` must hold round_up(its size, 4096) bytes: the file lands there.
// Without, chunks stream through scratch buffers. The error names the file and the chunk. `verified`
// (with `dest` only) lets the caller use each chunk as soon as it is checked: the engine's restore copies
// it into the application's buffers then, overlapped with the reads of the next chunks.
// `only` (without `dest`): the files to read, by index; empty: every file.
Result<void> read_verified(const std::string& path, const Manifest& manifest, unsigned char* dest,
                           const Progress& progress, const Verified& verified = {},
                           const std::vector<std::uint32_t>& only = {});

}  // namespace rdmakit::ckpt::detail

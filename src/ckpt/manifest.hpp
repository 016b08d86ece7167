// The manifest's text form, and the checks that make a manifest read from disk safe to act on.
//
// Pure functions over plain data (no I/O), so hostile manifests are unit-tested directly. The text is
// line-based and readable (`rdmakit-ckpt show`), and ends with a checksum line over every byte before it,
// so a torn or truncated manifest is detected before any field is trusted.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "rdmakit/ckpt/store.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::ckpt::detail {

inline constexpr std::uint64_t kMaxManifestBytes = 64ull << 20;
inline constexpr std::uint64_t kMaxChunkBytes = 1ull << 30;
inline constexpr std::uint64_t kIoAlignment = 4096;  // O_DIRECT alignment of offsets, lengths and buffers

std::string encode_manifest(const Manifest& manifest);
// Parses and checks: the checksum line, every field's syntax, file names that stay inside the directory,
// tensors inside their files, chunks covering each file exactly once in order. The error says what is wrong.
Result<Manifest> decode_manifest(std::string_view text);
// The structural checks alone (decode_manifest runs them; the engine runs them on what it writes).
Result<void> check_manifest(const Manifest& manifest);

// "a b%" -> "a%20b%25": names are one token on a manifest line.
std::string escape_name(std::string_view name);
Result<std::string> unescape_name(std::string_view text);

}  // namespace rdmakit::ckpt::detail

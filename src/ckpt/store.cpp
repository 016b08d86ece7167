// list / read / verify / describe / export of checkpoints on disk (rdmakit/ckpt/store.hpp).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "ckpt/checksum.hpp"
#include "ckpt/manifest.hpp"
#include "ckpt/persist.hpp"
#include "ckpt/restore.hpp"

namespace rdmakit::ckpt {
namespace detail {
namespace {

constexpr unsigned kReadDepth = 4;

std::string tensors_in(const Manifest& m, const ChunkEntry& chunk) {
  std::string names;
  for (const auto& t : m.tensors) {
    if (t.file != chunk.file || t.offset >= chunk.offset + chunk.size || t.offset + t.size <= chunk.offset)
      continue;
    names += (names.empty() ? "" : ", ") + t.name;
  }
  return names.empty() ? "none" : names;
}

// The manifest's chunks of one file, as reads. O_DIRECT only when every chunk is block-aligned (a hostile
// manifest with odd chunk sizes is read through the page cache rather than overrunning a buffer).
std::vector<std::size_t> chunks_of(const Manifest& m, std::uint32_t file) {
  std::vector<std::size_t> indices;
  for (std::size_t i = 0; i < m.chunks.size(); ++i)
    if (m.chunks[i].file == file) indices.push_back(i);
  return indices;
}

bool all_aligned(const Manifest& m, const std::vector<std::size_t>& indices) {
  for (auto i : indices)
    if (m.chunks[i].offset % kIoAlignment != 0) return false;
  return true;
}

struct FileRead {
  const std::string& path;
  const Manifest& m;
  std::uint32_t file;
  unsigned char* dest;
  AlignedBuffer* scratch;
  std::uint64_t slot_bytes;
  const Progress& progress;
  const Verified& verified;
  std::uint64_t& done;
  std::uint64_t total;
};

// The chunks `indices` of one file, all read from `holder` (this checkpoint's directory, or for
// incremental references the older checkpoint that holds them).
Result<void> read_chunks(Ring& ring, const FileRead& r, const std::vector<std::size_t>& indices,
                         const std::string& holder) {
  const auto& entry = r.m.files[r.file];
  bool direct = false;
  auto fd = open_file(holder + "/" + entry.name, O_RDONLY, all_aligned(r.m, indices), direct);
  if (!fd) return std::unexpected(fd.error());
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0) return fail_errno("ckpt: stat of " + entry.name, errno);
  if (static_cast<std::uint64_t>(st.st_size) != entry.size)
    return fail(Errc::ProtocolError, "ckpt: " + holder + ": " + entry.name + " has " +
                                         std::to_string(st.st_size) + " bytes, the manifest says " +
                                         std::to_string(entry.size) + " (torn or truncated)");
  std::vector<IoChunk> io;
  for (auto i : indices) {
    const auto& c = r.m.chunks[i];
    io.push_back(IoChunk{c.offset, direct ? round_up(c.size, kIoAlignment) : c.size, c.size});
  }
  std::vector<unsigned char*> where(io.size());
  Pipeline steps{
      .buffer =
          [&](std::size_t k, unsigned slot) {
            where[k] = r.dest ? r.dest + io[k].offset : r.scratch->data() + slot * r.slot_bytes;
            return where[k];
          },
      .before = {},
      .after = [&](std::size_t k) -> Result<void> {
        const auto& c = r.m.chunks[indices[k]];
        // The file named is the one that holds the bad bytes: for an incremental reference,
        // the older checkpoint's (repairing or deleting the referencing one changes nothing).
        if (checksum64(where[k], c.size) != c.checksum)
          return fail(
              Errc::ProtocolError,
              "ckpt: " + holder + ": checksum mismatch in " + entry.name + " chunk " +
                  std::to_string(indices[k]) + " (offset " + std::to_string(c.offset) + ", " +
                  std::to_string(c.size) + " bytes; tensors " + tensors_in(r.m, c) +
                  (holder == r.path ? std::string() : "; referenced by " + r.path + ", held by " + holder) +
                  ")");
        if (r.dest && r.verified) r.verified(c.offset, c.size);
        r.done += c.size;
        if (r.progress) r.progress(r.done, r.total);
        return {};
      }};
  return run_pipeline(ring, false, fd->get(), io, steps, holder + "/" + entry.name);
}

// A chunk's holder: a plain checkpoint name next to this one (never a path from the manifest).
std::string holder_of(const std::string& path, const ChunkEntry& c) {
  if (!c.source_step) return path;
  auto slash = path.find_last_of('/');
  std::string parent = slash == std::string::npos ? "." : path.substr(0, slash);
  return parent + "/" + checkpoint_name(*c.source_step);
}

Result<void> read_file(Ring& ring, const FileRead& r) {
  // Grouped by holder, each group in file order: one open and one pipeline per holder.
  std::map<std::string, std::vector<std::size_t>> by_holder;
  for (auto i : chunks_of(r.m, r.file)) by_holder[holder_of(r.path, r.m.chunks[i])].push_back(i);
  for (const auto& [holder, indices] : by_holder)
    if (auto ok = read_chunks(ring, r, indices, holder); !ok) return ok;
  return {};
}

}  // namespace

Result<void> read_verified(const std::string& path, const Manifest& m, unsigned char* dest,
                           const Progress& progress, const Verified& verified,
                           const std::vector<std::uint32_t>& only) {
  if (dest && (m.files.size() != 1 || !only.empty()))
    return fail(Errc::InvalidArgument, "ckpt: loading needs a one-file checkpoint");
  std::vector<std::uint32_t> files = only;
  if (files.empty())
    for (std::uint32_t file = 0; file < m.files.size(); ++file) files.push_back(file);
  auto ring = Ring::create(kReadDepth);
  if (!ring) return std::unexpected(ring.error());
  std::uint64_t slot_bytes = round_up(m.chunk_bytes, kIoAlignment);
  AlignedBuffer scratch;
  if (!dest) {
    auto buffer = AlignedBuffer::allocate(slot_bytes * kReadDepth);
    if (!buffer) return std::unexpected(buffer.error());
    scratch = std::move(*buffer);
  }
  std::uint64_t total = 0, done = 0;
  for (auto file : files) total += m.files.at(file).size;
  for (auto file : files) {
    FileRead r{path, m, file, dest, &scratch, slot_bytes, progress, verified, done, total};
    if (auto ok = read_file(*ring, r); !ok) return ok;
  }
  return {};
}

}  // namespace detail

Result<Manifest> read_manifest(const std::string& checkpoint_path) {
  auto text =
      detail::read_whole_file(checkpoint_path + "/" + detail::kManifestName, detail::kMaxManifestBytes);
  if (!text) return std::unexpected(text.error());
  auto manifest = detail::decode_manifest(*text);
  if (!manifest) return fail(manifest.error().code(), checkpoint_path + ": " + manifest.error().message());
  return manifest;
}

Result<std::vector<CheckpointInfo>> list_checkpoints(const std::string& directory) {
  auto found = detail::committed_checkpoints(directory);
  if (!found) return std::unexpected(found.error());
  std::vector<CheckpointInfo> infos;
  for (const auto& [step, name] : *found) {
    CheckpointInfo info{.path = directory + "/" + name, .step = step};
    auto manifest = read_manifest(info.path);
    if (!manifest)
      info.problem = manifest.error().message();
    else if (manifest->step != step)
      info.problem = "the manifest says step " + std::to_string(manifest->step);
    else
      info.manifest = std::move(*manifest);
    infos.push_back(std::move(info));
  }
  return infos;
}

Result<Manifest> verify_checkpoint(const std::string& checkpoint_path,
                                   const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  auto manifest = read_manifest(checkpoint_path);
  if (!manifest) return manifest;
  if (auto ok = detail::read_verified(checkpoint_path, *manifest, nullptr, progress); !ok)
    return std::unexpected(ok.error());
  return manifest;
}

Result<NodeVerification> verify_node_checkpoint(
    const std::string& checkpoint_path, const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  auto manifest = read_manifest(checkpoint_path);
  if (!manifest) return std::unexpected(manifest.error());
  NodeVerification found{.manifest = std::move(*manifest)};
  const auto& files = found.manifest.files;
  auto here = [&](const std::string& name) {
    struct stat st {};
    return ::stat((checkpoint_path + "/" + name).c_str(), &st) == 0;
  };
  for (std::uint32_t file = 0; file < files.size(); ++file) {
    // A multi-rank checkpoint's file `r` is rank r's data file, written beside its shard manifest
    // (src/ckpt/group.cpp): both absent means the shard was never in this directory.
    bool shard_file = files.size() > 1 && files[file].name == detail::data_file_name(file);
    if (shard_file && !here(files[file].name) && !here(detail::shard_manifest_name(file)))
      found.elsewhere.push_back(file);
    else
      found.verified.push_back(file);
  }
  if (found.verified.empty())
    return fail(Errc::NotFound, "ckpt: " + checkpoint_path + " holds none of the checkpoint's " +
                                    std::to_string(files.size()) + " data files");
  if (auto ok = detail::read_verified(checkpoint_path, found.manifest, nullptr, progress, {}, found.verified);
      !ok)
    return std::unexpected(ok.error());
  return found;
}

namespace {
// A name as a terminal may show it: control bytes (ESC, newline, ...), DEL and backslash as \xNN, so a
// name cannot forge lines of the listing or drive the terminal.
std::string printable(std::string_view name) {
  std::string out;
  for (unsigned char c : name) {
    if (c < 0x20 || c == 0x7f || c == '\\') {
      char hex[5];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}
}  // namespace

std::string describe_manifest(const Manifest& m) {
  std::string text = "step " + std::to_string(m.step) + "\ntime_ns " + std::to_string(m.time_ns) + "\nrank " +
                     std::to_string(m.rank) + " of " + std::to_string(m.world_size) + "\nchunk_bytes " +
                     std::to_string(m.chunk_bytes) + "\n";
  for (const auto& f : m.files)
    text += "file " + printable(f.name) + " " + std::to_string(f.size) + " bytes\n";
  for (const auto& t : m.tensors) {
    std::string shape;
    for (auto d : t.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    text += "tensor " + printable(t.name) + " " + std::string(to_string(t.dtype)) + " [" + shape + "] file " +
            std::to_string(t.file) + " offset " + std::to_string(t.offset) + " size " +
            std::to_string(t.size) + "\n";
  }
  text += std::to_string(m.chunks.size()) + " chunks\n";
  return text;
}

}  // namespace rdmakit::ckpt

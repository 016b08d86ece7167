#include "ckpt/manifest.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <set>
#include <vector>

#include "ckpt/checksum.hpp"

namespace rdmakit::ckpt::detail {
namespace {

constexpr std::string_view kMagic = "rdmakit-ckpt-manifest";

bool plain_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-' || c == '/' || c == ':';
}

std::string hex64(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(value));
  return text;
}

template <typename Int>
bool parse_int(std::string_view text, Int& out, int base = 10) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out, base);
  return ec == std::errc() && end == text.data() + text.size();
}

std::vector<std::string_view> split(std::string_view line, char separator) {
  std::vector<std::string_view> parts;
  while (true) {
    auto at = line.find(separator);
    parts.push_back(line.substr(0, at));
    if (at == std::string_view::npos) return parts;
    line.remove_prefix(at + 1);
  }
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  if (shape.empty()) return "-";
  std::string text;
  for (auto dim : shape) text += (text.empty() ? "" : "x") + std::to_string(dim);
  return text;
}

bool parse_shape(std::string_view text, std::vector<std::uint64_t>& shape) {
  shape.clear();
  if (text == "-") return true;
  for (auto part : split(text, 'x')) {
    std::uint64_t dim = 0;
    if (!parse_int(part, dim) || shape.size() >= 32) return false;
    shape.push_back(dim);
  }
  return true;
}

std::unexpected<Error> bad(std::size_t line_number, std::string_view what) {
  return fail(Errc::ProtocolError, "manifest line " + std::to_string(line_number) + ": " + std::string(what));
}

// The state of one parse: fields seen so far.
struct Parser {
  Manifest manifest;
  std::set<std::string> header_seen;

  Result<void> header(std::size_t n, std::string_view key, std::string_view value) {
    if (!header_seen.insert(std::string(key)).second) return bad(n, "'" + std::string(key) + "' repeated");
    bool ok = key == "step"          ? parse_int(value, manifest.step)
              : key == "time_ns"     ? parse_int(value, manifest.time_ns)
              : key == "rank"        ? parse_int(value, manifest.rank)
              : key == "world_size"  ? parse_int(value, manifest.world_size)
              : key == "chunk_bytes" ? parse_int(value, manifest.chunk_bytes)
                                     : false;
    if (!ok) return bad(n, "bad '" + std::string(key) + "' value");
    return {};
  }

  Result<void> file(std::size_t n, const std::vector<std::string_view>& f) {
    FileEntry entry;
    if (f.size() != 3 || !parse_int(f[2], entry.size)) return bad(n, "expected 'file NAME SIZE'");
    auto name = unescape_name(f[1]);
    if (!name) return bad(n, name.error().message());
    entry.name = std::move(*name);
    manifest.files.push_back(std::move(entry));
    return {};
  }

  Result<void> tensor(std::size_t n, const std::vector<std::string_view>& f) {
    TensorEntry entry;
    if (f.size() != 7) return bad(n, "expected 'tensor NAME DTYPE SHAPE FILE OFFSET SIZE'");
    auto name = unescape_name(f[1]);
    auto dtype = parse_dtype(f[2]);
    if (!name) return bad(n, name.error().message());
    if (!dtype) return bad(n, "unknown dtype '" + std::string(f[2]) + "'");
    if (!parse_shape(f[3], entry.shape)) return bad(n, "bad shape '" + std::string(f[3]) + "'");
    if (!parse_int(f[4], entry.file) || !parse_int(f[5], entry.offset) || !parse_int(f[6], entry.size))
      return bad(n, "bad tensor file, offset or size");
    entry.name = std::move(*name);
    entry.dtype = *dtype;
    manifest.tensors.push_back(std::move(entry));
    return {};
  }

  Result<void> chunk(std::size_t n, const std::vector<std::string_view>& f) {
    ChunkEntry entry;
    bool ref = manifest.version >= 2 && f.size() == 7 && f[5] == "ref";
    if ((f.size() != 5 && !ref) || !parse_int(f[1], entry.file) || !parse_int(f[2], entry.offset) ||
        !parse_int(f[3], entry.size) || f[4].size() != 16 || !parse_int(f[4], entry.checksum, 16))
      return bad(n, "expected 'chunk FILE OFFSET SIZE CHECKSUM [ref STEP]'");
    if (ref && !parse_int(f[6], entry.source_step.emplace())) return bad(n, "bad chunk reference");
    manifest.chunks.push_back(entry);
    return {};
  }

  Result<void> line(std::size_t n, std::string_view text) {
    auto f = split(text, ' ');
    if (f[0] == "file") return file(n, f);
    if (f[0] == "tensor") return tensor(n, f);
    if (f[0] == "chunk") return chunk(n, f);
    if (f.size() == 2) return header(n, f[0], f[1]);
    return bad(n, "unknown line '" + std::string(text.substr(0, 40)) + "'");
  }
};

// a * b without wrapping, or false.
bool mul_ok(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}

Result<void> check_files(const Manifest& m) {
  std::set<std::string> names;
  for (const auto& file : m.files) {
    if (file.name.empty() || file.name.front() == '.' || file.name.find('/') != std::string::npos ||
        file.name == "MANIFEST")
      return fail(Errc::ProtocolError,
                  "manifest: file name '" + file.name + "' is not a plain data file name");
    if (!names.insert(file.name).second)
      return fail(Errc::ProtocolError, "manifest: file '" + file.name + "' repeated");
  }
  return {};
}

Result<void> check_tensors(const Manifest& m) {
  // Names are unique per file: a multi-rank checkpoint holds one file per rank, and ranks name their
  // buffers alike.
  std::set<std::pair<std::uint32_t, std::string>> names;
  for (const auto& t : m.tensors) {
    std::string where = "manifest: tensor '" + t.name + "': ";
    if (t.name.empty() || !names.emplace(t.file, t.name).second)
      return fail(Errc::ProtocolError, where + "empty or repeated name");
    if (t.file >= m.files.size()) return fail(Errc::ProtocolError, where + "file index out of range");
    if (t.offset > m.files[t.file].size || t.size > m.files[t.file].size - t.offset)
      return fail(Errc::ProtocolError, where + "extends past the end of its file");
    std::uint64_t elements = 1;
    for (auto dim : t.shape)
      if (!mul_ok(elements, dim, elements)) return fail(Errc::ProtocolError, where + "shape overflows");
    std::uint64_t bytes = 0;
    if (!t.shape.empty() && (!mul_ok(elements, dtype_size(t.dtype), bytes) || bytes != t.size))
      return fail(Errc::ProtocolError, where + "shape and dtype do not match its size");
  }
  return {};
}

// Chunks must tile every file from offset 0 to its size, in file order, none longer than chunk_bytes.
Result<void> check_chunks(const Manifest& m) {
  std::vector<std::uint64_t> covered(m.files.size(), 0);
  std::uint32_t previous_file = 0;
  for (std::size_t i = 0; i < m.chunks.size(); ++i) {
    const auto& c = m.chunks[i];
    std::string where = "manifest: chunk " + std::to_string(i) + ": ";
    if (c.file >= m.files.size() || c.file < previous_file)
      return fail(Errc::ProtocolError, where + "bad file index");
    previous_file = c.file;
    if (c.offset != covered[c.file])
      return fail(Errc::ProtocolError, where + "does not start where the previous ended");
    if (c.size == 0 || c.size > m.chunk_bytes || c.size > m.files[c.file].size - c.offset)
      return fail(Errc::ProtocolError, where + "bad size");
    // References point to older checkpoints only: no cycle, and retention can reason newest first.
    if (c.source_step && *c.source_step >= m.step)
      return fail(Errc::ProtocolError, where + "references step " + std::to_string(*c.source_step) +
                                           ", not older than this checkpoint");
    covered[c.file] += c.size;
  }
  for (std::size_t f = 0; f < m.files.size(); ++f)
    if (covered[f] != m.files[f].size)
      return fail(Errc::ProtocolError, "manifest: chunks do not cover file '" + m.files[f].name + "'");
  return {};
}

}  // namespace

std::string escape_name(std::string_view name) {
  std::string out;
  for (unsigned char c : name) {
    if (plain_name_char(static_cast<char>(c))) {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%%%02x", c);
      out += hex;
    }
  }
  return out;
}

Result<std::string> unescape_name(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    unsigned value = 0;
    if (text[i] != '%') {
      if (!plain_name_char(text[i])) return fail(Errc::ProtocolError, "bad character in a name");
      out += text[i];
    } else if (i + 2 < text.size() && parse_int(text.substr(i + 1, 2), value, 16)) {
      out += static_cast<char>(value);
      i += 2;
    } else {
      return fail(Errc::ProtocolError, "bad %-escape in a name");
    }
  }
  if (out.empty()) return fail(Errc::ProtocolError, "empty name");
  return out;
}

std::string encode_manifest(const Manifest& m) {
  // Version 2 only when a chunk references an earlier checkpoint: readers of version 1 refuse it clearly.
  bool refs = std::any_of(m.chunks.begin(), m.chunks.end(), [](const auto& c) { return c.source_step; });
  std::string text = std::string(kMagic) + " " + (refs ? "2" : "1") + "\n";
  text += "step " + std::to_string(m.step) + "\n";
  text += "time_ns " + std::to_string(m.time_ns) + "\n";
  text += "rank " + std::to_string(m.rank) + "\n";
  text += "world_size " + std::to_string(m.world_size) + "\n";
  text += "chunk_bytes " + std::to_string(m.chunk_bytes) + "\n";
  for (const auto& f : m.files) text += "file " + escape_name(f.name) + " " + std::to_string(f.size) + "\n";
  for (const auto& t : m.tensors)
    text += "tensor " + escape_name(t.name) + " " + std::string(to_string(t.dtype)) + " " +
            shape_text(t.shape) + " " + std::to_string(t.file) + " " + std::to_string(t.offset) + " " +
            std::to_string(t.size) + "\n";
  for (const auto& c : m.chunks)
    text += "chunk " + std::to_string(c.file) + " " + std::to_string(c.offset) + " " +
            std::to_string(c.size) + " " + hex64(c.checksum) +
            (c.source_step ? " ref " + std::to_string(*c.source_step) : "") + "\n";
  text += "checksum " + hex64(checksum64(text.data(), text.size())) + "\n";
  return text;
}

Result<void> check_manifest(const Manifest& m) {
  if (m.world_size == 0 || m.rank >= m.world_size)
    return fail(Errc::ProtocolError, "manifest: rank " + std::to_string(m.rank) + " outside world size " +
                                         std::to_string(m.world_size));
  if (m.chunk_bytes == 0 || m.chunk_bytes % kIoAlignment != 0 || m.chunk_bytes > kMaxChunkBytes)
    return fail(Errc::ProtocolError, "manifest: bad chunk_bytes " + std::to_string(m.chunk_bytes));
  if (auto ok = check_files(m); !ok) return ok;
  if (auto ok = check_tensors(m); !ok) return ok;
  return check_chunks(m);
}

Result<Manifest> decode_manifest(std::string_view text) {
  if (text.size() > kMaxManifestBytes) return fail(Errc::ProtocolError, "manifest: larger than the limit");
  // The checksum line covers every byte before it; nothing is parsed before it matches.
  if (text.empty() || text.back() != '\n')
    return fail(Errc::ProtocolError, "manifest: truncated (no final newline)");
  auto last = text.rfind('\n', text.size() - 2);
  auto body = last == std::string_view::npos ? std::string_view{} : text.substr(0, last + 1);
  auto tail = text.substr(body.size(), text.size() - body.size() - 1);
  std::uint64_t expected = 0;
  if (!tail.starts_with("checksum ") || tail.size() != 9 + 16 || !parse_int(tail.substr(9), expected, 16))
    return fail(Errc::ProtocolError, "manifest: truncated (no checksum line)");
  if (checksum64(body.data(), body.size()) != expected)
    return fail(Errc::ProtocolError, "manifest: checksum mismatch (torn or corrupted)");

  auto lines = split(body.substr(0, body.size() - 1), '\n');
  Parser parser;
  auto magic = split(lines[0], ' ');
  if (magic.size() != 2 || magic[0] != kMagic || !parse_int(magic[1], parser.manifest.version))
    return fail(Errc::ProtocolError, "manifest: not an rdmakit checkpoint manifest");
  if (parser.manifest.version != 1 && parser.manifest.version != 2)
    return fail(Errc::NotSupported, "manifest: version " + std::to_string(parser.manifest.version) +
                                        " (this build reads 1 and 2)");
  for (std::size_t i = 1; i < lines.size(); ++i)
    if (auto ok = parser.line(i + 1, lines[i]); !ok) return std::unexpected(ok.error());
  for (auto key : {"step", "time_ns", "rank", "world_size", "chunk_bytes"})
    if (!parser.header_seen.contains(key))
      return fail(Errc::ProtocolError, std::string("manifest: no '") + key + "'");
  if (auto ok = check_manifest(parser.manifest); !ok) return std::unexpected(ok.error());
  return std::move(parser.manifest);
}

}  // namespace rdmakit::ckpt::detail

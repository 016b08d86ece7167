// export_npy: one tensor of a verified checkpoint as a numpy .npy file (format version 1.0).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <memory>
#include <new>
#include <vector>

#include "ckpt/io.hpp"
#include "ckpt/persist.hpp"
#include "rdmakit/ckpt/store.hpp"

namespace rdmakit::ckpt {
namespace {

// numpy's type strings; bf16 has none, so it is exported as raw 16-bit words ('<u2').
std::string npy_descr(DType dtype) {
  switch (dtype) {
    case DType::U8:
      return "|u1";
    case DType::I8:
      return "|i1";
    case DType::U16:
      return "<u2";
    case DType::I16:
      return "<i2";
    case DType::U32:
      return "<u4";
    case DType::I32:
      return "<i4";
    case DType::U64:
      return "<u8";
    case DType::I64:
      return "<i8";
    case DType::F16:
      return "<f2";
    case DType::BF16:
      return "<u2";
    case DType::F32:
      return "<f4";
    case DType::F64:
      return "<f8";
  }
  return "|u1";
}

// Magic, version, little-endian header length, then a Python dict literal padded with spaces so that
// the data starts on a 64-byte boundary, ending in '\n'.
std::string npy_header(const TensorEntry& t) {
  std::string shape;
  if (t.shape.empty()) {
    shape = std::to_string(t.size / dtype_size(t.dtype)) + ",";
  } else {
    for (auto d : t.shape) shape += std::to_string(d) + ", ";
    if (t.shape.size() > 1)
      shape.resize(shape.size() - 2);
    else
      shape.pop_back();
  }
  std::string dict =
      "{'descr': '" + npy_descr(t.dtype) + "', 'fortran_order': False, 'shape': (" + shape + "), }";
  std::size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string header = "\x93NUMPY";
  header += '\x01';
  header += '\x00';
  header += static_cast<char>(dict.size() & 0xff);
  header += static_cast<char>((dict.size() >> 8) & 0xff);
  return header + dict;
}

Result<void> write_all(int fd, const void* data, std::size_t size, const std::string& path) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno("ckpt: writing " + path, errno);
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return {};
}

// `size` bytes at `offset` of `path` into `out`.
Result<void> read_range(const std::string& path, std::uint64_t offset, std::size_t size, unsigned char* out) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail_errno("ckpt: opening " + path, errno);
  std::size_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd.get(), out + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno("ckpt: reading " + path, errno);
    if (n == 0) return fail(Errc::ProtocolError, "ckpt: " + path + " ends early");
    done += static_cast<std::size_t>(n);
  }
  return {};
}

// The tensor's bytes, chunk by chunk, from each chunk's holder (an incremental checkpoint's chunk may live
// in an older checkpoint) to `out` after the header, through one bounded buffer: a tensor larger than the
// memory this process may have exports all the same, and a buffer that cannot be had is an error.
Result<void> copy_tensor(const std::string& checkpoint_path, const Manifest& m, const TensorEntry& t, int out,
                         std::uint64_t out_offset, const std::string& output_file) {
  constexpr std::size_t kPiece = 4u << 20;
  std::unique_ptr<unsigned char[]> buffer(new (std::nothrow) unsigned char[kPiece]);
  if (!buffer) return fail(Errc::ResourceExhausted, "ckpt: no memory for an export buffer");
  auto parent = std::filesystem::path(checkpoint_path).parent_path().string();
  for (const auto& c : m.chunks) {
    std::uint64_t begin = std::max(c.offset, t.offset), end = std::min(c.offset + c.size, t.offset + t.size);
    if (c.file != t.file || begin >= end) continue;
    auto holder = c.source_step ? parent + "/" + detail::checkpoint_name(*c.source_step) : checkpoint_path;
    for (std::uint64_t at = begin; at < end; at += kPiece) {
      auto size = static_cast<std::size_t>(std::min<std::uint64_t>(kPiece, end - at));
      if (auto ok = read_range(holder + "/" + m.files[t.file].name, at, size, buffer.get()); !ok) return ok;
      if (::lseek(out, static_cast<off_t>(out_offset + (at - t.offset)), SEEK_SET) < 0)
        return fail_errno("ckpt: seeking in " + output_file, errno);
      if (auto ok = write_all(out, buffer.get(), size, output_file); !ok) return ok;
    }
  }
  return {};
}

}  // namespace

Result<void> export_npy(const std::string& checkpoint_path, const std::string& tensor_name,
                        const std::string& output_file) {
  auto manifest = verify_checkpoint(checkpoint_path);
  if (!manifest) return std::unexpected(manifest.error());
  const TensorEntry* tensor = nullptr;
  for (const auto& t : manifest->tensors)
    if (t.name == tensor_name) tensor = &t;
  if (!tensor) return fail(Errc::NotFound, "ckpt: no tensor '" + tensor_name + "' in " + checkpoint_path);
  if (tensor->size % dtype_size(tensor->dtype) != 0)
    return fail(Errc::InvalidArgument,
                "ckpt: tensor '" + tensor_name + "' is not a whole number of elements");
  Fd out(::open(output_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!out) return fail_errno("ckpt: creating " + output_file, errno);
  auto header = npy_header(*tensor);
  if (auto ok = write_all(out.get(), header.data(), header.size(), output_file); !ok) return ok;
  return copy_tensor(checkpoint_path, *manifest, *tensor, out.get(), header.size(), output_file);
}

}  // namespace rdmakit::ckpt

#include "xfer/engine/record.hpp"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <memory>

#include "bootstrap/auth.hpp"

namespace rdmakit::xfer::detail {
namespace {

constexpr std::uint32_t kMagic = 0x31535852;  // "RXS1"
// A file segment's body: the same fields, then u32 flags. Its own magic, so an engine from before file
// segments refuses the record ("bad magic") instead of taking the file for memory at the descriptor.
constexpr std::uint32_t kFileMagic = 0x33535852;  // "RXS3"
constexpr std::uint32_t kFlagWritable = 1;
constexpr std::uint32_t kFlagLocalPath = 2;  // then: the path, its device and inode
constexpr std::size_t kMaxString = 4096;
constexpr std::size_t kMaxRails = 64;

class Writer {
 public:
  void u32(std::uint32_t v) { raw(&v, sizeof v); }
  void u64(std::uint64_t v) { raw(&v, sizeof v); }
  void str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  void raw(const void* data, std::size_t size) {
    const auto* p = static_cast<const std::byte*>(data);
    out.insert(out.end(), p, p + size);
  }
  std::vector<std::byte> out;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  bool raw(void* data, std::size_t size) {
    if (in_.size() - pos_ < size) return false;
    std::memcpy(data, in_.data() + pos_, size);
    pos_ += size;
    return true;
  }
  bool u32(std::uint32_t& v) { return raw(&v, sizeof v); }
  bool u64(std::uint64_t& v) { return raw(&v, sizeof v); }
  bool str(std::string& s) {
    std::uint32_t size = 0;
    if (!u32(size) || size > kMaxString || in_.size() - pos_ < size) return false;
    s.assign(reinterpret_cast<const char*>(in_.data() + pos_), size);
    pos_ += size;
    return true;
  }
  std::span<const std::byte> take(std::size_t size) {
    if (in_.size() - pos_ < size) return {};
    auto out = in_.subspan(pos_, size);
    pos_ += size;
    return out;
  }
  bool at_end() const { return pos_ == in_.size(); }

 private:
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
};

Result<RailEntry> decode_rail(Reader& reader) {
  RailEntry rail;
  if (!reader.str(rail.transport) || !reader.str(rail.address)) {
    return fail(Errc::ProtocolError, "segment record: truncated rail");
  }
  auto bytes = reader.take(RemoteRegion::kSerializedSize);
  if (bytes.empty()) return fail(Errc::ProtocolError, "segment record: truncated descriptor");
  auto region = RemoteRegion::deserialize(bytes);
  if (!region) return fail(Errc::ProtocolError, "segment record: " + region.error().message());
  rail.region = *region;
  return rail;
}

// The sealed record: magic, a fresh 96-bit IV, the encrypted body, the 128-bit GCM tag.
constexpr std::uint32_t kSealedMagic = 0x32535852;  // "RXS2"
constexpr std::size_t kIvSize = 12;
constexpr std::size_t kTagSize = 16;
constexpr std::size_t kMaxSealed = 1u << 20;
constexpr std::string_view kSealLabel = "rdmakit-xfer-record/v1";

using CipherContext = std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)>;

// The AES key: an HMAC of the service secret, so the secret itself keys nothing but HMACs, and the
// record key is worth nothing to the other services that share the secret.
bootstrap::auth::Mac record_key(std::string_view secret) {
  return bootstrap::auth::mac(secret, {kSealLabel, "record key"});
}

// Starts an AES-256-GCM context over `name` as associated data; encrypting or decrypting.
CipherContext start_gcm(std::string_view secret, const std::uint8_t* iv, std::string_view name,
                        bool encrypt) {
  CipherContext ctx(EVP_CIPHER_CTX_new(), &EVP_CIPHER_CTX_free);
  auto key = record_key(secret);
  int ignored = 0;
  bool ok = ctx && (encrypt ? EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.data(), iv)
                            : EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.data(), iv)) == 1;
  auto aad = [&](std::string_view part) {
    auto* p = reinterpret_cast<const unsigned char*>(part.data());
    auto n = static_cast<int>(part.size());
    return (encrypt ? EVP_EncryptUpdate(ctx.get(), nullptr, &ignored, p, n)
                    : EVP_DecryptUpdate(ctx.get(), nullptr, &ignored, p, n)) == 1;
  };
  // The label is fixed, so label + name names one segment unambiguously.
  ok = ok && aad(kSealLabel) && aad(name);
  if (!ok) ctx.reset();
  return ctx;
}

}  // namespace

Result<std::vector<std::byte>> seal(const SegmentRecord& record, std::string_view name,
                                    std::string_view secret) {
  auto body = encode(record);
  std::vector<std::byte> out(4 + kIvSize + body.size() + kTagSize);
  std::memcpy(out.data(), &kSealedMagic, 4);
  auto* iv = reinterpret_cast<unsigned char*>(out.data() + 4);
  if (RAND_bytes(iv, kIvSize) != 1) return fail(Errc::SystemError, "segment record: RAND_bytes failed");
  auto ctx = start_gcm(secret, iv, name, true);
  auto* cipher = iv + kIvSize;
  int written = 0, final_bytes = 0;
  if (!ctx ||
      EVP_EncryptUpdate(ctx.get(), cipher, &written, reinterpret_cast<const unsigned char*>(body.data()),
                        static_cast<int>(body.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), cipher + written, &final_bytes) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagSize, cipher + body.size()) != 1)
    return fail(Errc::SystemError, "segment record: AES-GCM sealing failed");
  return out;
}

Result<SegmentRecord> open_sealed(std::span<const std::byte> bytes, std::string_view name,
                                  std::string_view secret) {
  std::uint32_t magic = 0;
  if (bytes.size() < 4 + kIvSize + kTagSize || bytes.size() > kMaxSealed ||
      (std::memcpy(&magic, bytes.data(), 4), magic != kSealedMagic))
    return fail(Errc::ProtocolError, "not a sealed segment record (bad magic or size)");
  const auto* iv = reinterpret_cast<const unsigned char*>(bytes.data() + 4);
  const auto* cipher = iv + kIvSize;
  const std::size_t size = bytes.size() - 4 - kIvSize - kTagSize;
  std::vector<std::byte> body(size);
  std::array<unsigned char, kTagSize> tag{};
  std::memcpy(tag.data(), cipher + size, kTagSize);
  auto ctx = start_gcm(secret, iv, name, false);
  int written = 0, final_bytes = 0;
  bool ok = ctx &&
            EVP_DecryptUpdate(ctx.get(), reinterpret_cast<unsigned char*>(body.data()), &written, cipher,
                              static_cast<int>(size)) == 1 &&
            EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagSize, tag.data()) == 1 &&
            EVP_DecryptFinal_ex(ctx.get(), reinterpret_cast<unsigned char*>(body.data()) + written,
                                &final_bytes) == 1;
  if (!ok)
    return fail(Errc::ConnectionRefused,
                "the segment record does not verify: not published under this name by a holder of this "
                "job's secret (RDMAKIT_JOB_SECRET; without one, the same user on loopback); refused");
  return decode(body);
}

std::string segment_key(std::string_view name) { return "xfer/segment/" + std::string(name); }

std::vector<std::byte> encode(const SegmentRecord& record) {
  Writer w;
  w.u32(record.file ? kFileMagic : kMagic);
  w.str(record.owner);
  w.str(record.host);
  w.u64(record.length);
  w.u32(static_cast<std::uint32_t>(record.rails.size()));
  for (const auto& rail : record.rails) {
    w.str(rail.transport);
    w.str(rail.address);
    auto bytes = rail.region.serialize();
    w.raw(bytes.data(), bytes.size());
  }
  if (record.file) {
    const bool local = !record.path.empty();
    w.u32((record.writable ? kFlagWritable : 0) | (local ? kFlagLocalPath : 0));
    if (local) {
      w.str(record.path);
      w.u64(record.device);
      w.u64(record.inode);
    }
  }
  return std::move(w.out);
}

Result<SegmentRecord> decode(std::span<const std::byte> bytes) {
  Reader r(bytes);
  std::uint32_t magic = 0, rails = 0;
  SegmentRecord record;
  if (!r.u32(magic) || (magic != kMagic && magic != kFileMagic))
    return fail(Errc::ProtocolError, "segment record: bad magic");
  record.file = magic == kFileMagic;
  if (!r.str(record.owner) || !r.str(record.host) || !r.u64(record.length) || !r.u32(rails)) {
    return fail(Errc::ProtocolError, "segment record: truncated header");
  }
  if (rails == 0 || rails > kMaxRails) {
    return fail(Errc::ProtocolError, "segment record: " + std::to_string(rails) + " rails");
  }
  for (std::uint32_t i = 0; i < rails; ++i) {
    auto rail = decode_rail(r);
    if (!rail) return std::unexpected(rail.error());
    // A file segment's descriptor names no memory (the file is served by messages), so it has no length.
    if (!record.file && rail->region.length < record.length) {
      return fail(Errc::ProtocolError, "segment record: a descriptor shorter than the segment");
    }
    record.rails.push_back(std::move(*rail));
  }
  if (record.file) {
    std::uint32_t flags = 0;
    if (!r.u32(flags)) return fail(Errc::ProtocolError, "segment record: truncated flags");
    if ((flags & ~(kFlagWritable | kFlagLocalPath)) != 0)
      return fail(Errc::ProtocolError, "segment record: unknown flags " + std::to_string(flags));
    record.writable = (flags & kFlagWritable) != 0;
    if ((flags & kFlagLocalPath) != 0) {
      if (!r.str(record.path) || !r.u64(record.device) || !r.u64(record.inode))
        return fail(Errc::ProtocolError, "segment record: truncated file path");
      if (record.path.empty() || record.path.front() != '/' || record.path.find('\0') != std::string::npos)
        return fail(Errc::ProtocolError, "segment record: a file path that is not absolute");
    }
  }
  if (!r.at_end()) return fail(Errc::ProtocolError, "segment record: trailing bytes");
  return record;
}

Result<std::string> engine_secret(std::string_view listen_address) {
  auto colon = listen_address.rfind(':');
  auto host = colon == std::string_view::npos ? listen_address : listen_address.substr(0, colon);
  return bootstrap::auth::service_secret(host, "the transfer engine (records and listeners)");
}

std::string host_id() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat ns {};
  std::uint64_t netns = ::stat("/proc/self/ns/net", &ns) == 0 ? ns.st_ino : 0;
  return boot + "/net:" + std::to_string(netns);
}

std::string_view boot_of(std::string_view host) { return host.substr(0, host.find("/net:")); }

std::vector<const RailEntry*> rails_of(const SegmentRecord& record, std::string_view transport) {
  std::vector<const RailEntry*> out;
  for (const auto& rail : record.rails) {
    if (rail.transport == transport) out.push_back(&rail);
  }
  return out;
}

Result<std::string> choose_transport(std::span<const OfferedTransport> local, std::string_view local_host,
                                     const SegmentRecord& record, std::string_view forced) {
  auto offered_by_owner = [&](const OfferedTransport& t) { return !rails_of(record, t.name).empty(); };
  if (!forced.empty()) {
    auto it = std::ranges::find(local, forced, &OfferedTransport::name);
    if (it != local.end() && offered_by_owner(*it)) return std::string(forced);
    return fail(Errc::NotSupported, "transport '" + std::string(forced) +
                                        "' is not offered by both this engine "
                                        "and '" +
                                        record.owner + "'");
  }
  const bool same_host = local_host == record.host;
  // Lower is better; -1: cannot reach the owner.
  auto preference = [&](const OfferedTransport& t) {
    if (!offered_by_owner(t) || (t.same_host_only && !same_host)) return -1;
    return t.same_host_only ? 0 : t.kernel_bypass ? 1 : 2;
  };
  const OfferedTransport* best = nullptr;
  for (const OfferedTransport& t : local) {
    int rank = preference(t);
    if (rank >= 0 && (!best || rank < preference(*best))) best = &t;
  }
  if (best) return best->name;
  return fail(
      Errc::NotSupported,
      "no transport in common with '" + record.owner + "'" +
          (same_host ? "" : " (another host: a same-host-only transport such as shm cannot reach it)"));
}

}  // namespace rdmakit::xfer::detail

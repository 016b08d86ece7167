// libFuzzer target: tcp frame headers as the target receives them (wire.hpp), and for the requests that pass,
// the registration table's key, bounds and rights check that decides whether the target touches memory.
// A request the table accepts is carried out on the registered buffer (a memset standing for the payload
// landing there), so AddressSanitizer catches any range the checks let through that is not inside it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>

#include "core/registration_table.hpp"
#include "transport/tcp/wire.hpp"

namespace {

using rdmakit::Access;
using rdmakit::RegistrationTable;
using rdmakit::Status;
using rdmakit::tcp::FrameHeader;
using rdmakit::tcp::FrameType;

constexpr std::size_t kRegion = 4096;

struct Target {
  std::unique_ptr<std::uint8_t[]> memory{new std::uint8_t[kRegion]};
  RegistrationTable table;
  std::uint32_t key =
      table
          .add(reinterpret_cast<std::uint64_t>(memory.get()), kRegion,
               Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead | Access::RemoteAtomic)
          .value()
          .rkey;
};

Access needed(FrameType type) {
  switch (type) {
    case FrameType::Write:
    case FrameType::WriteImm:
      return Access::RemoteWrite;
    case FrameType::Read:
      return Access::RemoteRead;
    default:
      return Access::RemoteAtomic;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Target target;
  auto base = reinterpret_cast<std::uint64_t>(target.memory.get());
  // A stream of headers, as they follow each other on a connection (payloads not included).
  for (std::size_t at = 0; at + sizeof(FrameHeader) <= size; at += sizeof(FrameHeader)) {
    auto header = rdmakit::tcp::decode_frame_header(std::as_bytes(std::span(data + at, sizeof(FrameHeader))));
    if (!header) continue;
    if (!rdmakit::tcp::is_request(header->type) || header->type == FrameType::Send ||
        header->type == FrameType::SendImm)
      continue;
    bool atomic = header->type == FrameType::CompareSwap || header->type == FrameType::FetchAdd;
    std::uint64_t addr = header->addr;
    // Make some addresses land near the region, so the bounds checks are exercised and not only the key.
    if (header->rkey == 0) addr = base + (addr % (2 * kRegion));
    std::uint32_t rkey = header->rkey <= 1 ? target.key : header->rkey;
    std::uint64_t length = atomic ? 8 : header->length;
    if (atomic && addr % 8 != 0) continue;  // refused before the table is asked (responder.cpp)
    RegistrationTable::Pin pin;
    if (target.table.check_remote(rkey, addr, length, needed(header->type), &pin) != Status::Success)
      continue;
    if (!pin) std::abort();
    std::memset(reinterpret_cast<void*>(addr), 0x5a, length);  // out of the region: ASan reports it
  }
  return 0;
}

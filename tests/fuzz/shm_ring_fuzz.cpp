// libFuzzer target: the records a peer writes into a shared link segment (receive completions and atomic
// requests). Whatever the bytes, decoding must not crash, a decoded completion must carry our own id and
// a known status and opcode, and an atomic request is accepted only with a known opcode and alignment.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "transport/shm/records.hpp"

using namespace rdmakit;
using namespace rdmakit::shm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < sizeof(RecvDone) + 8) return 0;
  RecvDone done;
  std::memcpy(&done, data, sizeof(done));
  std::uint64_t capacity;
  std::memcpy(&capacity, data + sizeof(done), 8);
  PostedReceive posted{.id = 0xabcdef, .capacity = capacity};
  if (auto completion = decode_recv_done(done, posted, 3)) {
    if (completion->id != posted.id) __builtin_trap();
    if (completion->status > Status::GeneralError) __builtin_trap();
    if (completion->opcode != Opcode::Recv && completion->opcode != Opcode::RecvWriteImm) __builtin_trap();
    if (completion->opcode == Opcode::Recv && completion->bytes > capacity) __builtin_trap();
  }
  // The rest: the fields of an atomic request (laid out as AtomicCall), put into a shared slot.
  AtomicCall written{};
  std::size_t rest = size - sizeof(done) - 8;
  std::memcpy(&written, data + sizeof(done) + 8, std::min(rest, sizeof(written)));
  AtomicRequest request{};
  request.rkey = written.rkey;
  request.opcode = written.opcode;
  request.addr = written.addr;
  request.compare_add = written.compare_add;
  request.swap = written.swap;
  AtomicCall call = snapshot(request);
  if (validate_atomic(call) == Status::Success) {
    if (call.addr % 8 != 0) __builtin_trap();
    if (call.opcode != static_cast<std::uint64_t>(Opcode::FetchAdd) &&
        call.opcode != static_cast<std::uint64_t>(Opcode::CompareSwap))
      __builtin_trap();
  }
  return 0;
}

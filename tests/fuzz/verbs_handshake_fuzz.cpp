// The verbs handshake's rdma_cm private data: Hello::decode on whatever the peer (or a stranger on the
// fabric) puts there, then negotiate() both ways. An accepted Hello re-encodes to bytes that decode to it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "transport/verbs/handshake.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using rdmakit::verbs_impl::Hello;
  auto peer = Hello::decode(std::as_bytes(std::span(data, size)));
  if (!peer) return 0;
  auto again = Hello::decode(peer->encode());
  if (!again || again->encode() != peer->encode()) std::abort();
  Hello local;
  local.gid[15] = 1;
  local.qpn = 7;
  local.max_rd_atomic = 16;
  (void)rdmakit::verbs_impl::negotiate(local, *peer);
  (void)rdmakit::verbs_impl::negotiate(*peer, local);
  return 0;
}

// Prints the size and alignment of every public struct users hold by value (abi/librdmakit.layout, checked by
// tests/abi/check_abi.sh). A change of either is an ABI break: a program built against the old headers
// passes or receives objects of the old size (docs/abi.md). A struct added to the public headers is added
// here; the abi test fails on a public struct of the installed headers missing from this list.
#include <cstdio>

#include "rdmakit/bootstrap.hpp"
#include "rdmakit/ckpt/engine.hpp"
#include "rdmakit/ckpt/serve.hpp"
#include "rdmakit/ckpt/store.hpp"
#include "rdmakit/coll/communicator.hpp"
#include "rdmakit/fault.hpp"
#include "rdmakit/rdmakit.hpp"
#include "rdmakit/verbs.hpp"
#include "rdmakit/xfer/broadcast.hpp"
#include "rdmakit/xfer/engine.hpp"
#include "rdmakit/xfer/metadata.hpp"

namespace {

template <typename T>
void row(const char* name) {
  std::printf("%s %zu %zu\n", name, sizeof(T), alignof(T));
}

}  // namespace

#define RDMAKIT_ROW(type) row<rdmakit::type>(#type)

int main() {
  RDMAKIT_ROW(Capabilities);
  RDMAKIT_ROW(Completion);
  RDMAKIT_ROW(Config);
  RDMAKIT_ROW(CapabilityInfo);
  RDMAKIT_ROW(ConnectOptions);
  RDMAKIT_ROW(ConnectionStats);
  RDMAKIT_ROW(Error);
  RDMAKIT_ROW(OptionInfo);
  RDMAKIT_ROW(Options);
  RDMAKIT_ROW(PeerInfo);
  RDMAKIT_ROW(RemoteAddress);
  RDMAKIT_ROW(RemoteRegion);
  RDMAKIT_ROW(Segment);
  RDMAKIT_ROW(TransportCounter);
  RDMAKIT_ROW(TransportInfo);
  RDMAKIT_ROW(WorkRequest);
  RDMAKIT_ROW(bootstrap::LaunchInfo);
  RDMAKIT_ROW(bootstrap::StoreOptions);
  RDMAKIT_ROW(ckpt::Buffer);
  RDMAKIT_ROW(ckpt::CheckpointInfo);
  RDMAKIT_ROW(ckpt::ChunkEntry);
  RDMAKIT_ROW(ckpt::EngineOptions);
  RDMAKIT_ROW(ckpt::FileEntry);
  RDMAKIT_ROW(ckpt::Manifest);
  RDMAKIT_ROW(ckpt::NodeVerification);
  RDMAKIT_ROW(ckpt::PersistReport);
  RDMAKIT_ROW(ckpt::ReplicaInfo);
  RDMAKIT_ROW(ckpt::ServeOptions);
  RDMAKIT_ROW(ckpt::TensorEntry);
  RDMAKIT_ROW(coll::CommOptions);
  RDMAKIT_ROW(coll::Work);
  RDMAKIT_ROW(fault::Rule);
  RDMAKIT_ROW(verbs::DeviceInfo);
  RDMAKIT_ROW(verbs::GidInfo);
  RDMAKIT_ROW(verbs::PortInfo);
  RDMAKIT_ROW(verbs::RegistrationCacheStats);
  RDMAKIT_ROW(xfer::BroadcastOptions);
  RDMAKIT_ROW(xfer::BroadcastResult);
  RDMAKIT_ROW(xfer::EngineOptions);
  RDMAKIT_ROW(xfer::EngineStats);
  RDMAKIT_ROW(xfer::FileSegmentOptions);
  RDMAKIT_ROW(xfer::BatchPaths);
  RDMAKIT_ROW(xfer::MetadataOptions);
  RDMAKIT_ROW(xfer::Notification);
  RDMAKIT_ROW(xfer::Request);
  RDMAKIT_ROW(xfer::SegmentHandle);
  RDMAKIT_ROW(xfer::SegmentInfo);
  return 0;
}

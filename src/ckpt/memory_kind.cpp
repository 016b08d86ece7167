#include "ckpt/memory_kind.hpp"

#include <map>

#include "cuda/runtime.hpp"

namespace rdmakit::ckpt::detail {
namespace {

namespace cuda = ::rdmakit::detail::cuda;

class HostMover final : public Mover {
 public:
  HostMover(KindSpans spans, CopyPool& pool) : spans_(std::move(spans)), pool_(pool) {}

  Result<void> start(unsigned char* staging, std::uint64_t total, bool to_staging,
                     const Selection& only) override {
    // A subset restore copies a filtered list (an allocation, once per restore); snapshots copy them all.
    std::vector<Span> subset;
    if (!to_staging && !only.empty()) subset = selected_spans(spans_, only);
    const auto& spans = !to_staging && !only.empty() ? subset : spans_.spans;
    if (spans.empty()) return {};
    std::size_t parts = total < (1u << 20) ? 1 : pool_.threads();
    pool_.run(parts, [&](std::size_t part) { copy_part(spans, staging, total, part, parts, to_staging); });
    return {};
  }
  Result<void> finish() override { return {}; }

 private:
  KindSpans spans_;
  CopyPool& pool_;
};

std::string memory_type_name(int type) {
  switch (type) {
    case cuda::kUnregistered:
      return "unregistered host memory";
    case cuda::kHost:
      return "pinned host memory";
    case cuda::kDevice:
      return "device memory";
    case cuda::kManaged:
      return "managed memory";
  }
  return "memory of unknown type " + std::to_string(type);
}

class CudaMover final : public Mover {
 public:
  CudaMover(const cuda::Runtime& rt, KindSpans spans) : rt_(rt), spans_(std::move(spans)) {}

  ~CudaMover() override {
    for (auto& [device, stream] : streams_) {
      rt_.stream_synchronize(stream);  // nothing may still be writing into staging
      rt_.stream_destroy(stream);
    }
    if (pinned_) rt_.host_unregister(pinned_);
  }

  // Finds each buffer's device, makes one non-blocking stream per device, pins staging.
  Result<void> prepare(unsigned char* staging, std::size_t staging_size) {
    for (std::size_t i = 0; i < spans_.spans.size(); ++i) {
      auto where = "ckpt: buffer '" + spans_.names[i] + "' (MemoryKind::Cuda): ";
      cuda::PointerAttributes attributes{};
      if (auto e = rt_.pointer_get_attributes(&attributes, spans_.spans[i].app); e != cuda::kSuccess)
        return fail(Errc::InvalidArgument, where + rt_.describe("cudaPointerGetAttributes", e));
      if (attributes.type != cuda::kDevice && attributes.type != cuda::kManaged)
        return fail(Errc::InvalidArgument, where + "the CUDA runtime says it is " +
                                               memory_type_name(attributes.type) +
                                               ", not device memory (use MemoryKind::Host for host memory)");
      devices_.push_back(attributes.device);
      if (!streams_.contains(attributes.device))
        if (auto ok = create_stream(attributes.device); !ok) return ok;
    }
    if (auto e = rt_.host_register(staging, staging_size, cuda::kHostRegisterDefault); e != cuda::kSuccess)
      return fail(Errc::ResourceExhausted,
                  "ckpt: pinning " + std::to_string(staging_size) +
                      " bytes of staging for CUDA copies: " + rt_.describe("cudaHostRegister", e));
    pinned_ = staging;
    return {};
  }

  Result<void> start(unsigned char* staging, std::uint64_t, bool to_staging, const Selection& only) override {
    for (std::size_t i = 0; i < spans_.spans.size(); ++i) {
      if (!to_staging && !selected(only, spans_.indices[i])) continue;  // a subset restore leaves it be
      const auto& s = spans_.spans[i];
      unsigned char* host = staging + s.offset;
      auto e = to_staging ? rt_.memcpy_async(host, s.app, s.size, cuda::kDeviceToHost, streams_[devices_[i]])
                          : rt_.memcpy_async(s.app, host, s.size, cuda::kHostToDevice, streams_[devices_[i]]);
      if (e != cuda::kSuccess) {
        (void)finish();  // what was queued must land (or fail) before staging is reused
        return fail(Errc::TransportFailure, "ckpt: copying buffer '" + spans_.names[i] + "' " +
                                                (to_staging ? "from the GPU" : "to the GPU") + ": " +
                                                rt_.describe("cudaMemcpyAsync", e));
      }
    }
    return {};
  }

  Result<void> finish() override {
    Result<void> result;
    for (auto& [device, stream] : streams_)
      if (auto e = rt_.stream_synchronize(stream); e != cuda::kSuccess && result)
        result =
            fail(Errc::TransportFailure, "ckpt: copying CUDA buffers of device " + std::to_string(device) +
                                             ": " + rt_.describe("cudaStreamSynchronize", e));
    return result;
  }

 private:
  // Streams belong to the device current when they are created: switch to `device` for that, then back,
  // so the application's thread keeps its current device.
  Result<void> create_stream(int device) {
    int current = 0;
    if (auto e = rt_.get_device(&current); e != cuda::kSuccess)
      return fail(Errc::Unavailable, "ckpt: " + rt_.describe("cudaGetDevice", e));
    if (auto e = rt_.set_device(device); e != cuda::kSuccess)
      return fail(Errc::Unavailable, "ckpt: " + rt_.describe("cudaSetDevice", e));
    cuda::Stream stream = nullptr;
    auto created = rt_.stream_create_with_flags(&stream, cuda::kStreamNonBlocking);
    rt_.set_device(current);
    if (created != cuda::kSuccess)
      return fail(Errc::Unavailable, "ckpt: " + rt_.describe("cudaStreamCreateWithFlags", created));
    streams_.emplace(device, stream);
    return {};
  }

  const cuda::Runtime& rt_;
  KindSpans spans_;
  std::vector<int> devices_;             // per span
  std::map<int, cuda::Stream> streams_;  // per device
  void* pinned_ = nullptr;
};

}  // namespace

std::vector<Span> selected_spans(const KindSpans& kind, const Selection& only) {
  std::vector<Span> out;
  for (std::size_t i = 0; i < kind.spans.size(); ++i)
    if (selected(only, kind.indices[i])) out.push_back(kind.spans[i]);
  return out;
}

std::unique_ptr<Mover> make_host_mover(KindSpans spans, CopyPool& pool) {
  return std::make_unique<HostMover>(std::move(spans), pool);
}

Result<std::unique_ptr<Mover>> make_cuda_mover(KindSpans spans, const std::string& runtime_library,
                                               unsigned char* staging, std::size_t staging_size) {
  auto rt = cuda::Runtime::get(runtime_library);
  if (!rt) {
    std::string names;
    for (const auto& n : spans.names) names += (names.empty() ? "'" : ", '") + n + "'";
    std::string why = rt.error().message();
    if (why.starts_with("cuda: ")) why.erase(0, 6);
    return fail(rt.error().code(), "ckpt: buffer " + names + " (MemoryKind::Cuda): " + why);
  }
  auto mover = std::make_unique<CudaMover>(**rt, std::move(spans));
  if (auto ok = mover->prepare(staging, staging_size); !ok) return std::unexpected(ok.error());
  return std::unique_ptr<Mover>(std::move(mover));
}

}  // namespace rdmakit::ckpt::detail

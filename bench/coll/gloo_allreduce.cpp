// Gloo's allreduce (Debian libgloo-dev, tcp transport, ring algorithm) timed exactly as rdmakit-coll-perf
// times rdmakit's. Ranks come from mpirun's environment; they meet through a FileStore directory
// (argv[4]). Built by bench/coll/run.sh.
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  int rank = std::atoi(std::getenv("OMPI_COMM_WORLD_RANK"));
  int n = std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE"));
  std::size_t min_bytes = std::strtoull(argv[1], nullptr, 10),
              max_bytes = std::strtoull(argv[2], nullptr, 10);
  std::size_t factor = std::strtoull(argv[3], nullptr, 10);
  gloo::transport::tcp::attr attr;
  attr.hostname = argc > 5 ? argv[5] : "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(argv[4]);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, n);
  context->connectFullMesh(store, device);
  auto allreduce = [&](float* send, float* recv, std::size_t count) {
    gloo::AllreduceOptions opts(context);
    opts.setInput(send, count);
    opts.setOutput(recv, count);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    gloo::allreduce(opts);
  };
  for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    std::size_t count = bytes / 4;
    std::vector<float> send(count), recv(count);
    for (std::size_t i = 0; i < count; ++i)
      send[i] = static_cast<float>((static_cast<std::size_t>(rank) + i) % 7);
    allreduce(send.data(), recv.data(), count);
    long wrong = 0;
    for (std::size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += static_cast<float>((static_cast<std::size_t>(r) + i) % 7);
      wrong += recv[i] != want;
    }
    int iters = static_cast<int>(std::clamp<std::size_t>((std::size_t{1} << 28) / bytes, 3, 200));
    for (int w = 0; w < 2; ++w) allreduce(send.data(), recv.data(), count);
    auto start = std::chrono::steady_clock::now();
    for (int it = 0; it < iters; ++it) allreduce(send.data(), recv.data(), count);
    double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / iters;
    // Maximum over ranks, through gloo itself (outside the timed loop).
    std::vector<float> t{static_cast<float>(us)}, worst(1);
    gloo::AllreduceOptions opts(context);
    opts.setInput(t.data(), 1);
    opts.setOutput(worst.data(), 1);
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<float>));
    gloo::allreduce(opts);
    if (rank == 0) {
      double algbw = static_cast<double>(bytes) / worst[0] / 1e3;
      std::printf(
          "{\"op\":\"allreduce\",\"impl\":\"gloo\",\"ranks\":%d,\"bytes\":%zu,\"iters\":%d,\"time_us\":%.2f,"
          "\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f,\"wrong\":%ld}\n",
          n, bytes, iters, static_cast<double>(worst[0]), algbw, algbw * 2.0 * (n - 1) / n, wrong);
      std::fflush(stdout);
    }
  }
  return 0;
}

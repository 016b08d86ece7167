// Open MPI's MPI_Allreduce timed exactly as rdmakit-coll-perf times rdmakit's: f32 sum, out-of-place,
// the same sizes, warm-up and iteration counts, average per op, maximum over ranks, nccl-tests' busbw.
// Built by bench/coll/run.sh with mpicxx.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  std::size_t min_bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 4096;
  std::size_t max_bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1 << 24;
  std::size_t factor = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 4;
  for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    std::size_t count = bytes / 4;
    std::vector<float> send(count), recv(count);
    for (std::size_t i = 0; i < count; ++i)
      send[i] = static_cast<float>((static_cast<std::size_t>(rank) + i) % 7);
    MPI_Allreduce(send.data(), recv.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long wrong = 0;
    for (std::size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += static_cast<float>((static_cast<std::size_t>(r) + i) % 7);
      wrong += recv[i] != want;
    }
    int iters = static_cast<int>(std::clamp<std::size_t>((std::size_t{1} << 28) / bytes, 3, 200));
    for (int w = 0; w < 2; ++w)
      MPI_Allreduce(send.data(), recv.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int it = 0; it < iters; ++it)
      MPI_Allreduce(send.data(), recv.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double us = (MPI_Wtime() - start) * 1e6 / iters, worst = 0;
    MPI_Reduce(&us, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      double algbw = static_cast<double>(bytes) / worst / 1e3;
      std::printf(
          "{\"op\":\"allreduce\",\"impl\":\"openmpi\",\"ranks\":%d,\"bytes\":%zu,\"iters\":%d,\"time_us\":%."
          "2f,"
          "\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f,\"wrong\":%ld}\n",
          n, bytes, iters, worst, algbw, algbw * 2.0 * (n - 1) / n, wrong);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}

// rdmakit-coll-perf: collective benchmarks in the spirit of nccl-tests. Launched with mpirun, srun or a
// torchrun-style environment, every rank runs it:
//   mpirun -np 4 rdmakit-coll-perf -b 4K -e 256M -f 4 [-o allreduce] [-d f32] [-r sum] [-n iters] [-w warmup]
// For each size it checks the result of a first run against a reference (every element), then times
// `iters` runs after `warmup` and prints, on rank 0: size, count, time per op (average over iterations,
// maximum over ranks), algorithm bandwidth (bytes / time) and bus bandwidth with nccl-tests' factors:
// allreduce 2(n-1)/n; allgather, reduce_scatter, all_to_all (n-1)/n; broadcast, reduce 1.
// -J prints one JSON object per size instead of the table.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "rdmakit/coll/communicator.hpp"

namespace {

using namespace rdmakit::coll;
using Clock = std::chrono::steady_clock;

struct Args {
  std::size_t min_bytes = 8, max_bytes = 64 << 20, factor = 2;
  std::string op = "allreduce";
  DataType type = DataType::F32;
  ReduceOp reduce = ReduceOp::Sum;
  int iters = 0, warmup = 2;  // iters 0: chosen by size
  bool check = true, json = false, in_place = false;
};

std::size_t parse_size(const char* text) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  std::size_t unit = 1;
  if (end && (*end == 'K' || *end == 'k')) unit = 1 << 10;
  if (end && (*end == 'M' || *end == 'm')) unit = 1 << 20;
  if (end && (*end == 'G' || *end == 'g')) unit = 1 << 30;
  // 0 (refused by parse()) for what no size is: a cast of a negative, NaN or huge double is undefined.
  double bytes = v * static_cast<double>(unit);
  if (!(bytes >= 1 && bytes <= static_cast<double>(std::size_t{1} << 40))) return 0;
  return static_cast<std::size_t>(bytes);
}

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (k == "-b")
      a.min_bytes = parse_size(v), ++i;
    else if (k == "-e")
      a.max_bytes = parse_size(v), ++i;
    else if (k == "-f")
      a.factor = std::max<std::size_t>(2, std::strtoul(v, nullptr, 10)), ++i;
    else if (k == "-n")
      a.iters = std::atoi(v), ++i;
    else if (k == "-w")
      a.warmup = std::atoi(v), ++i;
    else if (k == "-o")
      a.op = v, ++i;
    else if (k == "-c")
      a.check = std::atoi(v) != 0, ++i;
    else if (k == "-i")
      a.in_place = true;
    else if (k == "-J")
      a.json = true;
    else if (k == "-d") {
      std::string t = v;
      ++i;
      const std::pair<const char*, DataType> types[] = {
          {"f32", DataType::F32}, {"f64", DataType::F64}, {"f16", DataType::F16}, {"bf16", DataType::BF16},
          {"i32", DataType::I32}, {"i64", DataType::I64}, {"u8", DataType::U8}};
      bool found = false;
      for (auto& [name, type] : types)
        if (t == name) a.type = type, found = true;
      if (!found) return false;
    } else if (k == "-r") {
      std::string r = v;
      ++i;
      a.reduce = r == "prod"  ? ReduceOp::Prod
                 : r == "min" ? ReduceOp::Min
                 : r == "max" ? ReduceOp::Max
                 : r == "avg" ? ReduceOp::Avg
                              : ReduceOp::Sum;
    } else {
      return false;
    }
  }
  return a.min_bytes > 0 && a.max_bytes >= a.min_bytes;
}

// Input values are small integers, so sums are exact in f32 at any world size the tool runs.
float input(int rank, std::size_t i) { return static_cast<float>((static_cast<std::size_t>(rank) + i) % 7); }

struct Case {
  std::size_t count;  // elements per rank as the collective takes them
  std::size_t send_elems, recv_elems;
  double bus_factor;
};

Case shape(const std::string& op, std::size_t bytes, int n) {
  std::size_t e = 4, elems = std::max<std::size_t>(1, bytes / e), un = static_cast<std::size_t>(n);
  double ring = static_cast<double>(n - 1) / n;
  if (op == "allreduce") return {elems, elems, elems, 2 * ring};
  if (op == "broadcast" || op == "reduce") return {elems, elems, elems, 1};
  // nccl-tests sizes these by the whole buffer: count per rank = bytes / n.
  std::size_t per = std::max<std::size_t>(1, elems / un);
  if (op == "allgather") return {per, per, per * un, ring};
  if (op == "reduce_scatter") return {per, per * un, per, ring};
  return {per, per * un, per * un, ring};  // all_to_all
}

rdmakit::Result<void> run(Communicator& c, const std::string& op, const float* send, float* recv,
                          std::size_t count) {
  if (op == "allreduce") return c.allreduce(send, recv, count, DataType::F32, ReduceOp::Sum);
  if (op == "broadcast") return c.broadcast(send, recv, count, DataType::F32, 0);
  if (op == "reduce") return c.reduce(send, recv, count, DataType::F32, ReduceOp::Sum, 0);
  if (op == "allgather") return c.allgather(send, recv, count, DataType::F32);
  if (op == "reduce_scatter") return c.reduce_scatter(send, recv, count, DataType::F32, ReduceOp::Sum);
  return c.all_to_all(send, recv, count, DataType::F32);
}

// Wrong elements of the result on this rank.
std::size_t verify(const std::string& op, int rank, int n, const std::vector<float>& recv,
                   std::size_t count) {
  std::size_t wrong = 0;
  auto sum = [&](std::size_t i) {
    float s = 0;
    for (int r = 0; r < n; ++r) s += input(r, i);
    return s;
  };
  for (std::size_t i = 0; i < recv.size(); ++i) {
    float want;
    if (op == "allreduce")
      want = sum(i);
    else if (op == "reduce") {
      if (rank != 0) return 0;
      want = sum(i);
    } else if (op == "broadcast")
      want = input(0, i);
    else if (op == "allgather")
      want = input(static_cast<int>(i / count), i % count);
    else if (op == "reduce_scatter")
      want = sum(static_cast<std::size_t>(rank) * count + i);
    else
      want = input(static_cast<int>(i / count), static_cast<std::size_t>(rank) * count + i % count);
    wrong += recv[i] != want;
  }
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, a)) {
    std::fprintf(stderr,
                 "usage: %s [-b min] [-e max] [-f factor] [-n iters] [-w warmup] [-c 0|1] [-i] [-J]\n"
                 "          [-o allreduce|broadcast|reduce|allgather|reduce_scatter|all_to_all]\n",
                 argv[0]);
    return 2;
  }
  auto comm = Communicator::from_environment();
  if (!comm) {
    std::fprintf(stderr, "rdmakit-coll-perf: %s\n", comm.error().describe().c_str());
    return 2;
  }
  Communicator& c = **comm;
  int n = c.size();
  if (c.rank() == 0 && !a.json)
    std::printf(
        "# rdmakit-coll-perf %s ranks %d transports %s (f32, sum, %s)\n#%12s %12s %12s %10s %10s %8s\n",
        a.op.c_str(), n, c.transports().c_str(), a.in_place ? "in-place" : "out-of-place", "size(B)", "count",
        "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong  algorithm");
  int failures = 0;
  for (std::size_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= a.factor) {
    Case k = shape(a.op, bytes, n);
    std::vector<float> send(k.send_elems), recv(std::max(k.recv_elems, k.send_elems));
    for (std::size_t i = 0; i < send.size(); ++i) send[i] = input(c.rank(), i);
    float* out = a.in_place && (a.op == "allreduce" || a.op == "broadcast") ? send.data() : recv.data();
    if (auto ok = run(c, a.op, send.data(), out, k.count); !ok) {
      std::fprintf(stderr, "rank %d: %s\n", c.rank(), ok.error().describe().c_str());
      return 1;
    }
    std::vector<float> result(out, out + k.recv_elems);
    std::int64_t wrong = a.check ? static_cast<std::int64_t>(verify(a.op, c.rank(), n, result, k.count)) : 0;
    c.allreduce(&wrong, &wrong, 1, DataType::I64, ReduceOp::Sum);
    if (a.in_place)
      for (std::size_t i = 0; i < send.size(); ++i) send[i] = input(c.rank(), i);
    int iters = a.iters > 0
                    ? a.iters
                    : static_cast<int>(std::clamp<std::size_t>((std::size_t{1} << 28) / bytes, 3, 200));
    for (int w = 0; w < a.warmup; ++w) (void)run(c, a.op, send.data(), out, k.count);
    c.barrier();
    auto start = Clock::now();
    for (int it = 0; it < iters; ++it)
      if (auto ok = run(c, a.op, send.data(), out, k.count); !ok) {
        std::fprintf(stderr, "rank %d: %s\n", c.rank(), ok.error().describe().c_str());
        return 1;
      }
    double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iters;
    c.allreduce(&us, &us, 1, DataType::F64, ReduceOp::Max);
    double size = static_cast<double>(std::max(k.send_elems, k.recv_elems) * 4);
    double algbw = size / us / 1e3, busbw = algbw * k.bus_factor;
    failures += wrong > 0;
    // What allreduce ran (the bytes it moved: the f32 buffer).
    std::string algorithm = a.op == "allreduce" ? c.allreduce_algorithm(k.count * 4) : "-";
    if (c.rank() == 0) {
      if (a.json)
        std::printf(
            "{\"op\":\"%s\",\"ranks\":%d,\"transports\":\"%s\",\"algorithm\":\"%s\",\"bytes\":%.0f,"
            "\"iters\":%d,\"time_us\":%.2f,\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f,\"wrong\":%lld}\n",
            a.op.c_str(), n, c.transports().c_str(), algorithm.c_str(), size, iters, us, algbw, busbw,
            static_cast<long long>(wrong));
      else
        std::printf(" %12.0f %12zu %12.2f %10.3f %10.3f %8lld  %s\n", size, k.count, us, algbw, busbw,
                    static_cast<long long>(wrong), algorithm.c_str());
      std::fflush(stdout);
    }
  }
  return failures > 0 ? 1 : 0;
}

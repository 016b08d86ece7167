// Helpers of the collective tests: threads as ranks (each with its own contexts) over an in-memory store,
// typed buffers filled with small integers (exact in every type, so any reduction order gives the same
// bits), and the reference results computed here.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "coll/reduce.hpp"
#include "rdmakit/coll/communicator.hpp"

namespace rdmakit::coll::testing {

inline void encode(DataType t, double v, std::byte* out) {
  auto put = [&](auto x) { std::memcpy(out, &x, sizeof(x)); };
  switch (t) {
    case DataType::F32:
      return put(static_cast<float>(v));
    case DataType::F64:
      return put(v);
    case DataType::F16:
      return put(static_cast<std::uint16_t>(detail::float_to_half(static_cast<float>(v))));
    case DataType::BF16:
      return put(static_cast<std::uint16_t>(detail::float_to_bf16(static_cast<float>(v))));
    case DataType::I32:
      return put(static_cast<std::int32_t>(v));
    case DataType::I64:
      return put(static_cast<std::int64_t>(v));
    case DataType::U8:
      return put(static_cast<std::uint8_t>(v));
    case DataType::I8:
      return put(static_cast<std::int8_t>(v));
  }
}

inline double decode(DataType t, const std::byte* in) {
  auto get = [&](auto x) {
    std::memcpy(&x, in, sizeof(x));
    return x;
  };
  switch (t) {
    case DataType::F32:
      return get(float{});
    case DataType::F64:
      return get(double{});
    case DataType::F16:
      return detail::half_to_float(get(std::uint16_t{}));
    case DataType::BF16:
      return detail::bf16_to_float(get(std::uint16_t{}));
    case DataType::I32:
      return get(std::int32_t{});
    case DataType::I64:
      return static_cast<double>(get(std::int64_t{}));
    case DataType::U8:
      return get(std::uint8_t{});
    case DataType::I8:
      return get(std::int8_t{});
  }
  return 0;
}

// Rank r's value at element i for operator op: small, non-negative, and with products that stay small.
inline double value(ReduceOp op, int rank, std::size_t i) {
  std::size_t r = static_cast<std::size_t>(rank);
  if (op == ReduceOp::Prod) return (r + i) % 4 == 0 ? 2 : 1;
  if (op == ReduceOp::Min || op == ReduceOp::Max) return static_cast<double>((r * 7 + i * 3) % 11);
  return static_cast<double>((r + i) % 5);
}

inline std::vector<std::byte> fill(DataType t, ReduceOp op, int rank, std::size_t count,
                                   std::size_t offset = 0) {
  std::vector<std::byte> out(count * size_of(t));
  for (std::size_t i = 0; i < count; ++i) encode(t, value(op, rank, offset + i), out.data() + i * size_of(t));
  return out;
}

// The expected bits of element i reduced over ranks 0..n-1, as the type computes an average.
inline double expected(DataType t, ReduceOp op, int n, std::size_t i) {
  double acc = value(op, 0, i);
  for (int r = 1; r < n; ++r) {
    double v = value(op, r, i);
    acc = op == ReduceOp::Prod  ? acc * v
          : op == ReduceOp::Min ? std::min(acc, v)
          : op == ReduceOp::Max ? std::max(acc, v)
                                : acc + v;
  }
  if (op != ReduceOp::Avg) return acc;
  std::byte bits[8];
  switch (t) {
    case DataType::F64:
      return acc / n;
    case DataType::I32:
    case DataType::I64:
    case DataType::U8:
    case DataType::I8:
      return std::trunc(acc / n);
    default:
      encode(t, static_cast<float>(acc) / static_cast<float>(n), bits);
      return decode(t, bits);
  }
}

// Checks `count` elements of `data` against the reduction of elements offset.. over n ranks.
inline void check_reduced(DataType t, ReduceOp op, int n, const std::byte* data, std::size_t count,
                          std::size_t offset, const std::string& what) {
  for (std::size_t i = 0; i < count; ++i) {
    double got = decode(t, data + i * size_of(t)), want = expected(t, op, n, offset + i);
    if (got != want) {
      ADD_FAILURE() << what << " " << to_string(t) << " " << to_string(op) << " n=" << n << " element " << i
                    << ": got " << got << ", expected " << want;
      return;
    }
  }
}

// Runs body(comm) on n threads, each a rank with its own communicator made with options_of(rank), over
// one in-memory store.
inline void run_ranks(int n, const std::function<CommOptions(int)>& options_of,
                      const std::function<void(Communicator&)>& body) {
  auto store = bootstrap::make_memory_store();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      auto comm = Communicator::create(store, r, n, options_of(r));
      ASSERT_TRUE(comm.has_value()) << "rank " << r << ": " << comm.error().describe();
      body(**comm);
    });
  for (auto& t : threads) t.join();
}

// The same options on every rank.
inline void run_ranks(int n, const CommOptions& options, const std::function<void(Communicator&)>& body) {
  run_ranks(
      n, [&](int) { return options; }, body);
}

inline CommOptions small_chunks(std::string local_transport, Algorithm algorithm = Algorithm::Auto) {
  // 64-byte chunks and 2 slots: every message of a few dozen elements takes the multi-chunk, credit-bound
  // path.
  return CommOptions{.network_transport = "tcp",
                     .local_transport = std::move(local_transport),
                     .timeout = std::chrono::milliseconds(30000),
                     .bootstrap_timeout = std::chrono::milliseconds(30000),
                     .chunk_bytes = 64,
                     .slots = 2,
                     .algorithm = algorithm};
}

}  // namespace rdmakit::coll::testing

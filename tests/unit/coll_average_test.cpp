// Avg over 16-bit floats: the result is the correctly rounded mean of the ranks' values, for every
// element, whatever the algorithm (the sum travels in f32 and each element is rounded once, at the end).
// The values have 8 (bf16) or 11 (f16) significant bits and exponents in [-8, 2], so their sum over a few
// ranks is exact in f32 and in double, and the reference below is exact arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "coll_harness.hpp"

namespace rdmakit::coll::testing {
namespace {

std::uint16_t bits_of(DataType t, float v) {
  return static_cast<std::uint16_t>(t == DataType::BF16 ? detail::float_to_bf16(v)
                                                        : detail::float_to_half(v));
}
double value_of(DataType t, std::uint16_t bits) {
  return t == DataType::BF16 ? detail::bf16_to_float(bits) : detail::half_to_float(bits);
}

// Rank r's element i: a sign, an exponent in [-8, 2] and a mantissa, from a fixed hash.
std::uint16_t sample(DataType t, int rank, std::size_t i) {
  std::uint64_t h = (static_cast<std::uint64_t>(rank) * 0x9e3779b97f4a7c15ull) ^ (i * 0xbf58476d1ce4e5b9ull);
  h ^= h >> 31;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 29;
  double mantissa = 1.0 + static_cast<double>(h % 4096) / 4096.0;
  int exponent = static_cast<int>((h >> 12) % 11) - 8;
  double v = std::ldexp(mantissa, exponent) * ((h >> 20) & 1 ? -1.0 : 1.0);
  return bits_of(t, static_cast<float>(v));
}

std::vector<std::uint16_t> samples(DataType t, int rank, std::size_t count) {
  std::vector<std::uint16_t> out(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = sample(t, rank, i);
  return out;
}

// True when `got` is the 16-bit float nearest to sum / n (ties to even): no neighbour is nearer. Every
// product and difference here is exact in double.
bool correctly_rounded(DataType t, std::uint16_t got, double sum, int n) {
  double error = std::abs(n * value_of(t, got) - sum);
  bool zero = (got & 0x7fff) == 0;
  for (std::uint16_t other : {static_cast<std::uint16_t>(zero ? 0x0001 : got - 1),
                              static_cast<std::uint16_t>(zero ? 0x8001 : got + 1)}) {
    double other_error = std::abs(n * value_of(t, other) - sum);
    if (other_error < error || (other_error == error && (got & 1) != 0)) return false;
  }
  return true;
}

// Checks out[i] (element first + i) against the mean over n ranks; reports the share that is off.
void check_means(DataType t, int n, const std::uint16_t* out, std::size_t count, std::size_t first,
                 const std::string& what) {
  std::size_t wrong = 0, example = 0;
  for (std::size_t i = 0; i < count; ++i) {
    double sum = 0;
    for (int r = 0; r < n; ++r) sum += value_of(t, sample(t, r, first + i));
    if (!correctly_rounded(t, out[i], sum, n) && wrong++ == 0) example = i;
  }
  EXPECT_EQ(wrong, 0u) << what << " " << to_string(t) << " n=" << n << ": " << wrong << " of " << count
                       << " elements are not the correctly rounded mean, e.g. element " << first + example;
}

class CollAverage : public ::testing::TestWithParam<int> {};

TEST_P(CollAverage, AllreduceGivesTheCorrectlyRoundedMeanOfEveryElement) {
  const int n = GetParam();
  for (Algorithm algorithm : {Algorithm::Ring, Algorithm::RecursiveDoubling, Algorithm::HalvingDoubling})
    run_ranks(n, small_chunks("tcp", algorithm), [&](Communicator& comm) {
      for (DataType t : {DataType::BF16, DataType::F16}) {
        std::size_t count = 3001;
        auto data = samples(t, comm.rank(), count);
        ASSERT_TRUE(comm.allreduce(data.data(), data.data(), count, t, ReduceOp::Avg).has_value());
        check_means(t, n, data.data(), count, 0, "allreduce/" + std::string(to_string(algorithm)));
      }
    });
}

TEST_P(CollAverage, ReduceAndReduceScatterGiveTheCorrectlyRoundedMean) {
  const int n = GetParam();
  run_ranks(n, small_chunks("tcp"), [&](Communicator& comm) {
    for (DataType t : {DataType::BF16, DataType::F16}) {
      std::size_t count = 1001;
      auto send = samples(t, comm.rank(), count * static_cast<std::size_t>(n));
      std::vector<std::uint16_t> out(count * static_cast<std::size_t>(n));
      ASSERT_TRUE(comm.reduce(send.data(), out.data(), count * n, t, ReduceOp::Avg, n - 1).has_value());
      if (comm.rank() == n - 1) check_means(t, n, out.data(), count * n, 0, "reduce");
      ASSERT_TRUE(comm.reduce_scatter(send.data(), out.data(), count, t, ReduceOp::Avg).has_value());
      check_means(t, n, out.data(), count, count * static_cast<std::size_t>(comm.rank()), "reduce_scatter");
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollAverage, ::testing::Values(2, 3, 5, 6));

}  // namespace
}  // namespace rdmakit::coll::testing

// The bitwise operators and the i8 type (issue 24, item 3: what gloo has and rdmakit lacked), against a
// reference computed here, over shm (the shared-memory path) and tcp (the staged algorithms), with 3
// ranks and 64-byte chunks (multi-chunk), for allreduce, reduce and reduce_scatter; and a bitwise
// operator on a float type is an error before any data moves, leaving the communicator usable.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "coll_harness.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit::coll::testing {
namespace {

class CollBitwise : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto probe = Context::open(Options{.transport = GetParam()});
    if (!probe) GTEST_SKIP() << GetParam() << " transport unavailable: " << probe.error().describe();
  }
};

// Rank r's bits at element i: different per rank and element, all 8 bits used.
std::int64_t bits(int rank, std::size_t i) {
  return static_cast<std::int64_t>((0x5a ^ (rank * 37 + static_cast<int>(i) * 11)) & 0xff);
}

std::int64_t reference(ReduceOp op, int n, std::size_t i) {
  std::int64_t acc = bits(0, i);
  for (int r = 1; r < n; ++r)
    acc = op == ReduceOp::BAnd  ? (acc & bits(r, i))
          : op == ReduceOp::BOr ? (acc | bits(r, i))
                                : (acc ^ bits(r, i));
  return acc;
}

template <typename T>
void check_type(Communicator& comm, DataType type) {
  constexpr std::size_t count = 41;
  int n = comm.size();
  for (ReduceOp op : {ReduceOp::BAnd, ReduceOp::BOr, ReduceOp::BXor}) {
    std::vector<T> data(count), scattered(count * static_cast<std::size_t>(n)), part(count);
    for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<T>(bits(comm.rank(), i));
    for (std::size_t i = 0; i < scattered.size(); ++i) scattered[i] = static_cast<T>(bits(comm.rank(), i));
    std::vector<T> reduced(count);
    ASSERT_TRUE(comm.reduce(data.data(), reduced.data(), count, type, op, 1).has_value());
    ASSERT_TRUE(comm.allreduce(data.data(), data.data(), count, type, op).has_value());
    ASSERT_TRUE(comm.reduce_scatter(scattered.data(), part.data(), count, type, op).has_value());
    for (std::size_t i = 0; i < count; ++i) {
      ASSERT_EQ(data[i], static_cast<T>(reference(op, n, i)))
          << to_string(type) << " " << to_string(op) << " " << i;
      if (comm.rank() == 1) {
        ASSERT_EQ(reduced[i], static_cast<T>(reference(op, n, i)));
      }
      std::size_t global = static_cast<std::size_t>(comm.rank()) * count + i;
      ASSERT_EQ(part[i], static_cast<T>(reference(op, n, global))) << "reduce_scatter " << to_string(op);
    }
  }
}

TEST_P(CollBitwise, EveryIntegerTypeAndBitwiseOperator) {
  run_ranks(3, small_chunks(GetParam()), [](Communicator& comm) {
    check_type<std::int8_t>(comm, DataType::I8);
    check_type<std::uint8_t>(comm, DataType::U8);
    check_type<std::int32_t>(comm, DataType::I32);
    check_type<std::int64_t>(comm, DataType::I64);
  });
}

TEST_P(CollBitwise, I8ArithmeticIsSignedAndWraps) {
  run_ranks(3, small_chunks(GetParam()), [](Communicator& comm) {
    std::vector<std::int8_t> data{-100, -1, 5, 127, -128};
    std::vector<std::int8_t> sum(data.size()), min(data.size()), avg(data.size());
    ASSERT_TRUE(
        comm.allreduce(data.data(), sum.data(), data.size(), DataType::I8, ReduceOp::Sum).has_value());
    ASSERT_TRUE(
        comm.allreduce(data.data(), min.data(), data.size(), DataType::I8, ReduceOp::Min).has_value());
    ASSERT_TRUE(
        comm.allreduce(data.data(), avg.data(), data.size(), DataType::I8, ReduceOp::Avg).has_value());
    EXPECT_EQ(sum, (std::vector<std::int8_t>{-44, -3, 15, 125, -128}));  // -300 and 381 wrap mod 256
    EXPECT_EQ(min, data);
    EXPECT_EQ(avg[1], -1);  // -3 / 3
    EXPECT_EQ(avg[2], 5);
  });
}

TEST_P(CollBitwise, ABitwiseOperatorOnAFloatTypeIsAnErrorAndHarmless) {
  run_ranks(2, small_chunks(GetParam()), [](Communicator& comm) {
    std::vector<float> data(4, 1.0f);
    auto refused = comm.allreduce(data.data(), data.data(), data.size(), DataType::F32, ReduceOp::BXor);
    ASSERT_FALSE(refused.has_value());
    EXPECT_EQ(refused.error().code(), Errc::InvalidArgument);
    EXPECT_NE(refused.error().message().find("bxor takes an integer type"), std::string::npos)
        << refused.error().message();
    ASSERT_TRUE(
        comm.allreduce(data.data(), data.data(), data.size(), DataType::F32, ReduceOp::Sum).has_value());
    EXPECT_EQ(data[0], 2.0f);
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, CollBitwise, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace rdmakit::coll::testing

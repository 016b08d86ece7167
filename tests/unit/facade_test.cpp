// The public classes that a transport implements are facades (issue 25; docs/architecture.md, "The seam"):
// no state and no hook in the installed headers, and no way for code outside the library to derive from them.
// Compile-time checks of what C++ can see from the public headers alone; the script test package_facades
// (tests/package/check_facades.sh) reads the headers for what it cannot (a virtual function other than the
// destructor, a mutex, a container).
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <memory>
#include <type_traits>

#include "rdmakit/rdmakit.hpp"

namespace rdmakit {
namespace {

// No data members: the only storage is the vtable pointer of the virtual destructor (and, for Context, the
// enable_shared_from_this base that users rely on). A member added to a facade changes these sizes.
static_assert(sizeof(Connection) == sizeof(void*));
static_assert(sizeof(CompletionQueue) == sizeof(void*));
static_assert(sizeof(Listener) == sizeof(void*));
static_assert(sizeof(Context) == sizeof(void*) + sizeof(std::enable_shared_from_this<Context>));

// Nothing outside the library constructs one, so nothing outside derives from one: every Connection is the
// library's provider, which the library's definitions rely on when they downcast.
static_assert(!std::is_default_constructible_v<Connection>);
static_assert(!std::is_default_constructible_v<CompletionQueue>);
static_assert(!std::is_default_constructible_v<Listener>);
static_assert(!std::is_default_constructible_v<Context>);
static_assert(!std::is_copy_constructible_v<Connection> && !std::is_copy_constructible_v<CompletionQueue>);
static_assert(!std::is_constructible_v<MemoryRegion, void*, std::size_t, Access, std::uint32_t, std::uint32_t,
                                       std::uint64_t, std::uint64_t>);

// Deleting through the public type is still right (the destructor is the one virtual function).
static_assert(std::has_virtual_destructor_v<Connection> && std::has_virtual_destructor_v<CompletionQueue> &&
              std::has_virtual_destructor_v<Listener> && std::has_virtual_destructor_v<Context> &&
              std::has_virtual_destructor_v<MemoryRegion>);

// The facades' calls go through to the transport: a tcp context's public calls reach its provider.
TEST(Facade, PublicCallsReachTheTransport) {
  Options options;
  options.transport = "tcp";
  auto context = Context::open(options);
  ASSERT_TRUE(context) << context.error().message();
  EXPECT_EQ((*context)->transport(), "tcp");
  auto cq = (*context)->create_cq(4);
  ASSERT_TRUE(cq) << cq.error().message();
  std::array<Completion, 1> out;
  EXPECT_EQ((*cq)->poll(out), 0u);
  auto waited = (*cq)->wait(out, std::chrono::milliseconds(1));
  ASSERT_TRUE(waited);
  EXPECT_EQ(*waited, 0u);
  EXPECT_EQ((*cq)->wait_for(12345, std::chrono::milliseconds(1)).error().code(), Errc::Timeout);
}

}  // namespace
}  // namespace rdmakit

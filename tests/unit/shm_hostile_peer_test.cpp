// A hostile peer of the shm transport, in this process: it speaks the handshake by hand (raw socket,
// its own segments) and then does what an honest rdmakit never does: maps what it was given writable,
// forges registration slots and atomic requests, sends descriptors that can shrink. Whatever it does, the
// context it talks to must not crash, and must not read, write or add to memory it did not open to it.
// (Written against the internal headers so that it also builds against the code before the fix, where
// the Hello had a single arena: `requires` picks the fields.)
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "rdmakit/rdmakit.hpp"
#include "support/test_support.hpp"
#include "transport/shm/handshake.hpp"
#include "transport/shm/layout.hpp"
#include "transport/shm/segment.hpp"
#include "transport/shm/socket.hpp"

using namespace std::chrono_literals;
using namespace rdmakit;
using shm::Hello;
using shm::Mapping;
using shm::UniqueFd;

namespace {

constexpr std::size_t kArena = 1 << 20;
constexpr std::uint64_t kEpoch = 0x1234;

// How the hostile peer's descriptors are made.
struct Flaws {
  bool unsealed_link = false;   // a plain memfd: it could be shrunk under the target's mapping
  bool unsealed_arena = false;  // the same for the (writable) arena
  bool short_control = false;   // a control segment smaller than the layout
  bool pipe_doorbell = false;   // a pipe where an eventfd belongs
};

UniqueFd plain_memfd(std::size_t size) {
  UniqueFd fd(::memfd_create("hostile-unsealed", MFD_CLOEXEC));
  EXPECT_EQ(::ftruncate(fd.get(), static_cast<off_t>(size)), 0);
  return fd;
}

UniqueFd sealed_memfd(std::size_t size) { return std::move(shm::create_memfd("hostile", size).value()); }

Mapping map_rw(int fd, std::size_t size) { return std::move(shm::map_shared(fd, size, true).value()); }

// What the target sent back: its hello and its descriptors.
struct Received {
  Hello hello{};
  std::vector<UniqueFd> fds;
};

Received receive_raw(int socket) {
  Received got;
  iovec iov{&got.hello, sizeof(got.hello)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  EXPECT_EQ(::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC), static_cast<ssize_t>(sizeof(Hello)));
  for (cmsghdr* h = CMSG_FIRSTHDR(&msg); h; h = CMSG_NXTHDR(&msg, h)) {
    std::size_t n = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < n; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
      got.fds.emplace_back(fd);
    }
  }
  return got;
}

// The shared arenas the target's hello describes: {base, size, descriptor index, writable}.
struct ArenaRange {
  std::uint64_t base, size;
  std::size_t fd;
  bool writable;
};
template <typename H>  // a template, so that only the branch of the Hello we build against is compiled
std::vector<ArenaRange> arenas_of(const H& hello) {
  if constexpr (requires { hello.rw_arena_base; })
    return {{hello.rw_arena_base, hello.rw_arena_size, 1, true},
            {hello.ro_arena_base, hello.ro_arena_size, 2, false}};
  else
    return {{hello.arena_base, hello.arena_size, 1, true}};
}
std::size_t doorbell_index() { return shm::kHelloFds - 1; }
bool inside(const ArenaRange& a, const void* p) {
  auto addr = reinterpret_cast<std::uint64_t>(p);
  return addr >= a.base && addr - a.base < a.size;
}

// One hostile peer connected to `target`'s listener, its handshake done by hand.
class HostilePeer {
 public:
  HostilePeer(Context& target, Flaws flaws = {}) {
    listener_ =
        target.listen("shm:rdmakit-hostile-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++))
            .value();
    accepted_ = std::async(std::launch::async, [this] { return listener_->accept(5s); });
    socket_ = std::move(shm::connect_unix(listener_->address().substr(4)).value());
    build(flaws);
    send_hello();
  }

  // The target's answer: its connection, or why it refused ours.
  Result<std::shared_ptr<Connection>> accepted() { return accepted_.get(); }
  Received receive() { return receive_raw(socket_.get()); }
  shm::ControlSegment& control() { return *control_.as<shm::ControlSegment>(); }
  shm::LinkSegment& link() { return *link_.as<shm::LinkSegment>(); }
  int arena_fd() const { return arena_fd_.get(); }
  std::byte* arena() const { return arena_.data(); }

 private:
  void build(const Flaws& flaws) {
    control_fd_ = flaws.short_control ? sealed_memfd(4096) : sealed_memfd(sizeof(shm::ControlSegment));
    control_ = map_rw(control_fd_.get(), flaws.short_control ? 4096 : sizeof(shm::ControlSegment));
    if (!flaws.short_control) {
      control().magic = shm::kControlMagic;
      control().version = shm::kVersion;
      control().slots = shm::kSlots;
      control().pid = ::getpid();
      control().epoch = kEpoch;
    }
    arena_fd_ = flaws.unsealed_arena ? plain_memfd(kArena) : sealed_memfd(kArena);
    arena_ = map_rw(arena_fd_.get(), kArena);
    ro_arena_fd_ = sealed_memfd(kArena);
    if (flaws.pipe_doorbell) {
      int p[2];
      ASSERT_EQ(::pipe(p), 0);
      doorbell_ = UniqueFd(p[1]);
      ::close(p[0]);
    } else {
      doorbell_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    }
    link_fd_ =
        flaws.unsealed_link ? plain_memfd(sizeof(shm::LinkSegment)) : sealed_memfd(sizeof(shm::LinkSegment));
    link_ = map_rw(link_fd_.get(), sizeof(shm::LinkSegment));
    link().magic = shm::kLinkMagic;
    link().version = shm::kVersion;
  }

  void send_hello() {
    Hello hello{.magic = shm::kControlMagic, .version = shm::kVersion, .role = 0, .epoch = kEpoch, .id = 7};
    std::vector<int> fds{control_fd_.get(), arena_fd_.get()};
    describe_arenas(hello, fds);
    hello.control_size = sizeof(shm::ControlSegment);
    hello.link_size = sizeof(shm::LinkSegment);
    std::strcpy(hello.name, "hostile");
    fds.push_back(doorbell_.get());
    fds.push_back(link_fd_.get());
    ASSERT_TRUE(shm::send_message(socket_.get(), std::as_bytes(std::span(&hello, 1)), fds).has_value());
  }

  template <typename H>
  void describe_arenas(H& hello, std::vector<int>& fds) {
    auto base = reinterpret_cast<std::uint64_t>(arena_.data());
    if constexpr (requires { hello.rw_arena_base; }) {
      hello.rw_arena_base = base;
      hello.rw_arena_size = kArena;
      hello.ro_arena_base = base + (std::uint64_t{1} << 39);
      hello.ro_arena_size = kArena;
      fds.push_back(ro_arena_fd_.get());
    } else {
      hello.arena_base = base;
      hello.arena_size = kArena;
    }
  }

  static inline std::atomic<int> counter_{0};
  std::shared_ptr<Listener> listener_;
  std::future<Result<std::shared_ptr<Connection>>> accepted_;
  UniqueFd socket_;
  UniqueFd control_fd_, arena_fd_, ro_arena_fd_, doorbell_, link_fd_;
  Mapping control_, arena_, link_;
};

std::shared_ptr<Context> open_shm() { return Context::open(Options{.transport = "shm"}).value(); }

// Forges an atomic request into the target's inbound slot and waits for the target's answer.
Status forge_atomic(HostilePeer& peer, int doorbell, std::uint32_t rkey, std::uint64_t addr) {
  shm::AtomicRequest& request = peer.link().into[1].atomic;  // [1]: into the accepting side, the target
  request.rkey = rkey;
  request.opcode = static_cast<std::uint64_t>(Opcode::FetchAdd);
  request.addr = addr;
  request.compare_add = 0x1000;
  request.swap = 0;
  request.state.store(shm::kAtomicRequested, std::memory_order_release);
  eventfd_write(doorbell, 1);
  auto deadline = std::chrono::steady_clock::now() + 3s;
  while (request.state.load(std::memory_order_acquire) != shm::kAtomicDone) {
    if (std::chrono::steady_clock::now() > deadline) return Status::TransportRetryExceeded;
    std::this_thread::sleep_for(1ms);
  }
  auto status = static_cast<Status>(request.status);
  request.state.store(shm::kAtomicIdle, std::memory_order_release);
  return status;
}

}  // namespace

TEST(ShmHostilePeer, ControlSegmentCannotBeMadeWritable) {
  auto target = open_shm();
  HostilePeer peer(*target);
  Received got = peer.receive();
  auto connection = peer.accepted();
  ASSERT_TRUE(connection.has_value()) << connection.error().describe();
  int control = got.fds[0].get();
  errno = 0;
  void* writable =
      ::mmap(nullptr, sizeof(shm::ControlSegment), PROT_READ | PROT_WRITE, MAP_SHARED, control, 0);
  EXPECT_EQ(writable, MAP_FAILED) << "a peer mapped the control segment writable";
  EXPECT_EQ(errno, EPERM);
  if (writable != MAP_FAILED) ::munmap(writable, sizeof(shm::ControlSegment));
  // Nor can a read-only mapping be upgraded, nor the file written.
  void* readable = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, control, 0);
  ASSERT_NE(readable, MAP_FAILED);
  EXPECT_NE(::mprotect(readable, 4096, PROT_READ | PROT_WRITE), 0);
  ::munmap(readable, 4096);
  char byte = 1;
  EXPECT_LT(::pwrite(control, &byte, 1, 0), 0);
}

// The peer rewrites the target's registration slot (if it can map the table writable) so that a key of a
// LocalWrite-only region covers an unregistered word with every right, then asks for a fetch-and-add
// there. The target checks its own private table: RemoteAccess, memory unchanged.
TEST(ShmHostilePeer, ForgedAtomicRequestsAreRefused) {
  auto target = open_shm();
  alignas(8) static std::uint64_t secret = 42;  // never registered
  alignas(8) static std::uint64_t local_only[4] = {7, 7, 7, 7};
  auto region = target->register_memory(local_only, sizeof(local_only), Access::LocalWrite).value();
  HostilePeer peer(*target);
  Received got = peer.receive();
  auto connection = peer.accepted();  // kept: a closed connection serves nothing
  ASSERT_TRUE(connection.has_value()) << connection.error().describe();
  std::uint32_t key = region->rkey();
  void* table =
      ::mmap(nullptr, sizeof(shm::ControlSegment), PROT_READ | PROT_WRITE, MAP_SHARED, got.fds[0].get(), 0);
  if (table != MAP_FAILED) {  // only before the fix: forge the slot
    auto& slot = static_cast<shm::ControlSegment*>(table)->slot[key & (shm::kSlots - 1)];
    slot.access.store(static_cast<std::uint32_t>(Access::All));
    slot.addr.store(reinterpret_cast<std::uint64_t>(&secret));
    slot.length.store(8);
  }
  int doorbell = got.fds[doorbell_index()].get();
  EXPECT_EQ(forge_atomic(peer, doorbell, key, reinterpret_cast<std::uint64_t>(&secret)),
            Status::RemoteAccess);
  EXPECT_EQ(secret, 42u);
  EXPECT_EQ(forge_atomic(peer, doorbell, key, reinterpret_cast<std::uint64_t>(&local_only[0])),
            Status::RemoteAccess);
  EXPECT_EQ(local_only[0], 7u);
  EXPECT_EQ(forge_atomic(peer, doorbell, key + 1, reinterpret_cast<std::uint64_t>(&local_only[1])),
            Status::RemoteAccess);
  EXPECT_EQ(local_only[1], 7u);
  if (table != MAP_FAILED) ::munmap(table, sizeof(shm::ControlSegment));
}

// What a peer can map is what was registered for remote access, with the rights registered: memory with
// no remote right is in no shared arena, RemoteRead-only memory only in one it cannot map writable.
TEST(ShmHostilePeer, PeersMapOnlyWhatIsOpenToThem) {
  auto target = open_shm();
  auto local = target->allocate(4096, Access::LocalWrite).value();
  auto readable = target->allocate(4096, Access::LocalWrite | Access::RemoteRead).value();
  auto writable = target->allocate(4096, Access::All).value();
  HostilePeer peer(*target);
  Received got = peer.receive();
  auto connection = peer.accepted();  // kept: a closed connection serves nothing
  ASSERT_TRUE(connection.has_value()) << connection.error().describe();
  bool writable_reachable = false;
  for (const ArenaRange& arena : arenas_of(got.hello)) {
    EXPECT_FALSE(inside(arena, local->data())) << "LocalWrite-only memory lies in a shared arena";
    if (inside(arena, readable->data())) {
      EXPECT_FALSE(arena.writable) << "RemoteRead-only memory lies in the writable arena";
      errno = 0;
      void* w = ::mmap(nullptr, arena.size, PROT_READ | PROT_WRITE, MAP_SHARED, got.fds[arena.fd].get(), 0);
      EXPECT_EQ(w, MAP_FAILED) << "the read-only arena could be mapped writable";
      if (w != MAP_FAILED) ::munmap(w, arena.size);
    }
    writable_reachable |= arena.writable && inside(arena, writable->data());
  }
  EXPECT_TRUE(writable_reachable) << "the fast path (remote-writable allocate() memory) is gone";
  // And what we hand out cannot be shrunk under our own mappings (or anyone else's).
  for (std::size_t i = 0; i < got.fds.size(); ++i) {
    if (i == doorbell_index()) continue;
    EXPECT_NE(::ftruncate(got.fds[i].get(), 0), 0) << "descriptor " << i << " could be truncated";
  }
}

// A descriptor the peer could shrink after the handshake would kill us with SIGBUS on the next access:
// it is refused, with a message naming the seal.
TEST(ShmHostilePeer, UnsealedLinkSegmentIsRefused) {
  auto target = open_shm();
  HostilePeer peer(*target, Flaws{.unsealed_link = true});
  auto connection = peer.accepted();
  ASSERT_FALSE(connection.has_value()) << "an unsealed link segment was accepted";
  EXPECT_NE(connection.error().message().find("F_SEAL_SHRINK"), std::string::npos)
      << connection.error().message();
}

TEST(ShmHostilePeer, UnsealedArenaIsRefusedAndCannotCrashUs) {
  auto target = open_shm();
  HostilePeer peer(*target, Flaws{.unsealed_arena = true});
  auto connection = peer.accepted();
  if (connection) {
    // Before the fix: the peer publishes a key for its arena, shrinks it, and lets the target write there.
    auto& slot = peer.control().slot[5];
    slot.addr.store(reinterpret_cast<std::uint64_t>(peer.arena()));
    slot.length.store(kArena);
    slot.access.store(static_cast<std::uint32_t>(Access::All));
    slot.key.store((1u << shm::kSlotBits) | 5);
    ASSERT_EQ(::ftruncate(peer.arena_fd(), 0), 0);
    auto buffer = target->allocate(4096, Access::LocalWrite).value();
    auto id = (*connection)
                  ->write(buffer->slice(0, 64), RemoteAddress{reinterpret_cast<std::uint64_t>(peer.arena()),
                                                              (1u << shm::kSlotBits) | 5});
    if (id) (void)(*connection)->wait(*id, 1s);
    ADD_FAILURE() << "an unsealed arena was accepted";
    return;
  }
  EXPECT_NE(connection.error().message().find("F_SEAL_SHRINK"), std::string::npos)
      << connection.error().message();
}

TEST(ShmHostilePeer, WrongSizesAndDescriptorKindsAreRefused) {
  auto target = open_shm();
  {
    HostilePeer peer(*target, Flaws{.short_control = true});
    auto connection = peer.accepted();
    ASSERT_FALSE(connection.has_value());
    EXPECT_NE(connection.error().message().find("control segment"), std::string::npos)
        << connection.error().message();
  }
  {
    HostilePeer peer(*target, Flaws{.pipe_doorbell = true});
    auto connection = peer.accepted();
    ASSERT_FALSE(connection.has_value()) << "a pipe was taken for a doorbell";
    EXPECT_NE(connection.error().message().find("eventfd"), std::string::npos)
        << connection.error().message();
  }
}

// The fault-injecting transport: Context::open({.transport = "fault:tcp"}) wraps any transport and, on
// command from a test, fails, delays or drops operations and connections, so that error paths run
// without hardware. The semantics stay RDMA's:
//  * Fail: the matched operation completes with Rule::status once every operation posted before it on
//    its connection has completed; the connection then moves to the error state, like a verbs QP:
//    operations behind it complete Flushed, later posts fail with Errc::ConnectionBroken (sticky).
//    The operation never reaches the peer (a failed WRITE leaves the target's bytes untouched).
//  * Delay: the matched operation is carried out, but its completion (and, to keep the connection's
//    order, every completion behind it) is held back by Rule::delay.
//  * Drop: the matched operation vanishes on the wire; like a silent peer, it fails with
//    TransportRetryExceeded after Config::timeout and the connection moves to the error state.
//  * Disconnect: the underlying connection is closed when the matched operation is posted, so the
//    operations in flight and the matched one complete Flushed and the connection is broken; the peer
//    sees its connection vanish.
// Rules with `connect` set match connect() instead (accept() is never injected): Fail refuses it
// (Errc::ConnectionRefused), Delay holds it back, Drop makes it time out after Config::connect_timeout
// (Errc::Timeout), Disconnect hands out a connection that is already broken.
// Receives (post_recv) are never injected; they follow the connection's state. A WRITE with immediate
// or SEND that fails, drops or disconnects never reaches the peer, so it consumes no receive there.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "rdmakit/completion.hpp"
#include "rdmakit/error.hpp"
#include "rdmakit/export.hpp"

namespace rdmakit {
class Context;
namespace detail {
class FaultRuleBook;  // src/transport/fault/rule_book.hpp
}
}  // namespace rdmakit

namespace rdmakit::fault {

struct Rule {
  enum class Action : std::uint8_t { Fail, Delay, Drop, Disconnect };
  Action action = Action::Fail;
  std::optional<Opcode> opcode{};             // match only this operation (any send-side op when empty)
  std::optional<std::uint32_t> connection{};  // match only this Connection::number()
  bool connect = false;                       // match connect() instead of operations
  Status status = Status::GeneralError;       // Fail: the status the operation completes with
  std::chrono::milliseconds delay{};          // Delay: how long
  std::uint32_t skip = 0;                     // let this many matching operations pass first
  std::uint32_t count = 1;                    // fire this many times; 0 = on every match
};

RDMAKIT_API std::string_view to_string(Rule::Action action) noexcept;

// The rules of one fault context. Thread-safe. Rules are tried in the order they were added; the first
// one that fires decides. The rule book itself (and how the transport consults it) is the library's own.
class RDMAKIT_API Injector {
 public:
  Injector();
  ~Injector();
  Injector(const Injector&) = delete;
  Injector& operator=(const Injector&) = delete;

  // InvalidArgument for a rule that cannot mean anything (Fail with Success, Delay of 0, a receive opcode).
  Result<void> add(Rule rule);
  // Removes every rule; injections already made keep their effect.
  void clear();
  // How many injections rules have made so far.
  std::uint64_t injected() const;

 private:
  friend class detail::FaultRuleBook;
  std::unique_ptr<detail::FaultRuleBook> book_;
};

// The injector of a fault context; nullptr for a context of another transport.
RDMAKIT_API Injector* injector(Context& context) noexcept;

}  // namespace rdmakit::fault

// Socket plumbing for the tcp transport: addresses, listening, connecting and the handshake, all with
// deadlines so that nothing blocks forever.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "core/fd.hpp"
#include "core/net.hpp"
#include "rdmakit/connection.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::tcp {

using net::Deadline;

// Addresses are net::parse_host_port()'s forms; without a host, loopback. Port 0 asks for any free port.
Result<Fd> listen_on(std::string_view address);
// The address a listening socket is bound to, as "host:port".
Result<std::string> local_address(int fd);
Result<std::string> peer_address(int fd);
Result<Fd> connect_to(std::string_view address, Deadline deadline);
// The connecting side's handshake: sends our hello, then reads the listener's (a listener says nothing
// about itself before it has a valid hello; listener.cpp). Returns who is at the other end.
Result<PeerInfo> handshake(int fd, const PeerInfo& self, Deadline deadline);

// Socket options of a data connection: non-blocking, no Nagle delay.
Result<void> make_data_socket(int fd);

}  // namespace rdmakit::tcp

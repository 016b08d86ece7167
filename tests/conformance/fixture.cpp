#include "conformance/fixture.hpp"

#include <cstdlib>
#include <cstring>

namespace rdmakit::conformance {

void Conformance::SetUp() {}

Options Conformance::options(bool server) const {
  Options o;
  o.transport = GetParam();
  o.timeout = 3000ms;
  o.rnr_timeout = 300ms;
  o.name = server ? "conformance-server" : "conformance-client";
  if (server) {
    if (const char* device = std::getenv("RDMAKIT_CONFORMANCE_SERVER_DEVICE")) o.set("device", device);
    if (const char* listen = std::getenv("RDMAKIT_CONFORMANCE_LISTEN")) o.listen_address = listen;
  }
  return o;
}

std::shared_ptr<Context> Conformance::open_context(bool server, const Options& extra) {
  Options o = options(server);
  if (extra.timeout) o.timeout = extra.timeout;
  if (extra.rnr_timeout) o.rnr_timeout = extra.rnr_timeout;
  if (extra.wait_mode) o.wait_mode = extra.wait_mode;
  if (extra.send_queue_depth) o.send_queue_depth = extra.send_queue_depth;
  if (extra.recv_queue_depth) o.recv_queue_depth = extra.recv_queue_depth;
  if (extra.cq_depth) o.cq_depth = extra.cq_depth;
  if (extra.gpu_path) o.gpu_path = extra.gpu_path;
  for (const auto& [name, value] : extra.named) o.set(name, value);
  auto context = Context::open(o);
  if (!context) {
    ADD_FAILURE() << "cannot open transport " << GetParam() << ": " << context.error().describe();
    return nullptr;
  }
  return *context;
}

void Conformance::connect_pair(Endpoint& client, Endpoint& server, const ConnectOptions& client_options,
                               const ConnectOptions& server_options) {
  if (!server.context) server.context = open_context(true);
  if (!client.context) client.context = open_context(false);
  ASSERT_TRUE(server.context && client.context);
  auto listener = RDMAKIT_ASSERT_OK(server.context->listen());
  std::shared_ptr<Connection> accepted;
  std::string accept_error;
  std::thread acceptor([&] {
    auto c = listener->accept(std::chrono::duration_cast<std::chrono::milliseconds>(kWait), server_options);
    if (c)
      accepted = *c;
    else
      accept_error = c.error().describe();
  });
  auto connected = client.context->connect(listener->address(), client_options);
  acceptor.join();
  ASSERT_TRUE(connected.has_value()) << connected.error().describe();
  ASSERT_TRUE(accepted) << accept_error;
  client.connection = *connected;
  server.connection = accepted;
}

std::shared_ptr<MemoryRegion> Conformance::region(Context& context, std::size_t size, Access access) {
  if (region_count_++ % 2 == 0) {
    auto allocated = context.allocate(size, access);
    EXPECT_TRUE(allocated.has_value()) << allocated.error().describe();
    return allocated ? *allocated : nullptr;
  }
  caller_memory_.push_back(std::make_unique<std::byte[]>(size));
  std::memset(caller_memory_.back().get(), 0, size);
  auto registered = context.register_memory(caller_memory_.back().get(), size, access);
  EXPECT_TRUE(registered.has_value()) << registered.error().describe();
  return registered ? *registered : nullptr;
}

Completion Conformance::wait(Connection& connection, std::uint64_t id) {
  auto done = connection.wait(id, kWait);
  EXPECT_TRUE(done.has_value()) << done.error().describe();
  return done ? *done : Completion{.status = Status::GeneralError};
}

std::vector<std::string> conformance_transports() { return {"tcp", "shm", "fault:tcp", "verbs"}; }

std::string transport_param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name)
    if (c == ':') c = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Transports, Conformance, ::testing::ValuesIn(conformance_transports()),
                         transport_param_name);

}  // namespace rdmakit::conformance

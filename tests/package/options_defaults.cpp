// Every public options and config struct can be filled by a designated initializer that names one field:
// check_package.sh compiles this file against the installed headers with -Wall -Wextra -Werror, where
// -Wmissing-field-initializers fails the build on any other field that has no default initializer. Each
// struct appears twice, naming its first and then its last field, so every field is another's "other".
// check_package.sh also fails when a public struct named *Options or *Config is missing here.
#include <chrono>
#include <optional>
#include <rdmakit/bootstrap.hpp>
#include <rdmakit/ckpt/engine.hpp>
#include <rdmakit/ckpt/serve.hpp>
#include <rdmakit/coll/communicator.hpp>
#include <rdmakit/context.hpp>
#include <rdmakit/fault.hpp>
#include <rdmakit/options.hpp>
#include <rdmakit/xfer/broadcast.hpp>
#include <rdmakit/xfer/engine.hpp>
#include <rdmakit/xfer/metadata.hpp>

namespace {

using std::chrono::milliseconds;

template <typename... Structs>
int count(const Structs&...) {
  return static_cast<int>(sizeof...(Structs));
}

}  // namespace

int options_defaults() {
  return count(
      rdmakit::Config{.transport = "tcp"}, rdmakit::Config{.transport_options = {}},
      rdmakit::Options{.transport = "tcp"}, rdmakit::Options{.named = {}},
      rdmakit::ConnectOptions{.send_cq = nullptr}, rdmakit::ConnectOptions{.recv_cq = nullptr},
      rdmakit::Capabilities{.one_sided_without_target_cpu = true},
      rdmakit::Capabilities{.bandwidth_bytes_per_us = 1.0},
      rdmakit::fault::Rule{.action = rdmakit::fault::Rule::Action::Drop}, rdmakit::fault::Rule{.count = 2},
      rdmakit::bootstrap::StoreOptions{.host = "127.0.0.1"},
      rdmakit::bootstrap::StoreOptions{.secret = std::nullopt},
      rdmakit::coll::CommOptions{.network_transport = "tcp"}, rdmakit::coll::CommOptions{.job_secret = ""},
      rdmakit::ckpt::ServeOptions{.listen = ""}, rdmakit::ckpt::ServeOptions{.keep = 1},
      rdmakit::ckpt::EngineOptions{.directory = "/tmp"}, rdmakit::ckpt::EngineOptions{.cuda_runtime = ""},
      rdmakit::xfer::MetadataOptions{.name_space = "ns"},
      rdmakit::xfer::MetadataOptions{.timeout = milliseconds(1)},
      rdmakit::xfer::BroadcastOptions{.session = "s"},
      rdmakit::xfer::BroadcastOptions{.timeout = milliseconds(1)}, rdmakit::xfer::EngineOptions{.name = "e"},
      rdmakit::xfer::EngineOptions{.submit_timeout = milliseconds(1)},
      rdmakit::xfer::FileSegmentOptions{.writable = false},
      rdmakit::xfer::FileSegmentOptions{.sync_writes = false},
      rdmakit::xfer::FileSegmentOptions{.allow_other_writers = false});
}

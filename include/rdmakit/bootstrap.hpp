// Bootstrap: how the ranks of a job learn who they are and find each other.
//
// A launcher (torchrun, Open MPI's mpirun, Slurm's srun) starts the processes and tells each its rank
// through environment variables; detect_launch() reads them. The ranks then meet at a small key-value
// rendezvous store hosted by rank 0 over TCP (open_store()), where each publishes what its peers need
// (addresses, memory descriptors). Values are bytes; get() waits until the key exists or time runs out,
// so a rank that never shows up fails the others with a message naming it instead of hanging them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rdmakit/error.hpp"
#include "rdmakit/export.hpp"

namespace rdmakit::bootstrap {

// Where this process sits in the job.
struct RDMAKIT_API LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // index among the ranks of this host, as the launcher numbers them
  std::string store_host{};  // where rank 0 hosts the rendezvous store
  std::uint16_t store_port = 0;
  std::string launcher{};  // "torchrun", "mpirun", "srun" or "single" (no launcher found)
  std::string job_id{};    // the launcher's job id when it has one (names shared resources)
  int local_size = 0;      // ranks on this host as the launcher says (LOCAL_WORLD_SIZE, ...); 0: not said

  // Whether ranks may run on other hosts than the store's: the launcher says so, or (when it does not)
  // the store address is not a loopback address.
  bool spans_hosts() const noexcept;
};

// Reads a variable; nullopt when unset. Tests pass their own.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

// Reads the launcher's variables, first match wins:
//  * torchrun / torch.distributed: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.
//  * Open MPI: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK.
//  * Slurm: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the store host is the first node of
//    SLURM_JOB_NODELIST (or SLURM_NODELIST), compressed lists like "node[01-04,07]" expanded.
// The store address, for every launcher: option store_addr ("host:port", RDMAKIT_STORE_ADDR, read from the
// process environment by the option table like every RDMAKIT_* setting, never through `env`) if set, else
// MASTER_ADDR and MASTER_PORT if set, else (mpirun: 127.0.0.1, srun: the first node) and a port derived
// from the job id (OMPI_MCA_ess_base_jobid / SLURM_JOB_ID) so that two jobs on one host do not meet: 20000 +
// hash % 12768 (below the kernel's ephemeral port range). No launcher variables at all: a single rank (rank
// 0 of 1). A bootstrap option that does not parse (RDMAKIT_BOOTSTRAP_TIMEOUT_MS=abc) is an error here too.
RDMAKIT_API Result<LaunchInfo> detect_launch();
RDMAKIT_API Result<LaunchInfo> detect_launch(const EnvLookup& env);

// Expands a Slurm host list: "a,b", "node[01-04,07]", "rack[1-2]-n[1-2]" -> every host name in order.
RDMAKIT_API Result<std::vector<std::string>> expand_nodelist(std::string_view list);

// The port a launcher without MASTER_PORT uses for job `job_id`.
RDMAKIT_API std::uint16_t default_store_port(std::string_view job_id) noexcept;

// A key-value store all ranks share. Thread-safe. Keys are write-once: setting a key that is already set
// fails with Errc::InvalidArgument naming the key, so nobody can replace what a rank published.
class RDMAKIT_API Store {
 public:
  virtual ~Store();
  virtual Result<void> set(std::string_view key, std::string_view value) = 0;
  // Waits until `key` is set, then returns its value; Errc::Timeout after `timeout`.
  virtual Result<std::string> get(std::string_view key, std::chrono::milliseconds timeout) = 0;
};

// A store in this process's memory: threads as ranks, tests.
RDMAKIT_API std::shared_ptr<Store> make_memory_store();

struct StoreOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  bool is_server = false;                    // rank 0: host the store (and use it)
  std::chrono::milliseconds timeout{30000};  // clients: retry connecting this long
  // The job secret. nullopt: option job_secret (RDMAKIT_JOB_SECRET), and without one the per-user secret
  // when `host` is loopback (a process of another uid cannot prove it); beyond loopback without a job
  // secret, an error unless option insecure (RDMAKIT_INSECURE=1) is set. Empty: none (loopback or
  // insecure only).
  std::optional<std::string> secret{};
};

// Rank 0 (is_server) listens on host:port and serves the store from a thread for as long as the
// returned object lives; everyone (rank 0 too) gets a client. port 0 with is_server picks a free port,
// reported by bound_port(). Every client proves the job secret before the store answers anything (an
// HMAC over nonces from both sides; the secret never travels), and the server proves it back. The
// server's caps are options: store_max_bytes, store_max_request_bytes, store_max_client_buffer_bytes,
// store_max_clients (RDMAKIT_STORE_MAX_*); a request over a cap fails with an error naming it.
class RDMAKIT_API TcpStore : public Store {
 public:
  static Result<std::shared_ptr<TcpStore>> open(const StoreOptions& options);
  ~TcpStore() override;
  virtual std::uint16_t bound_port() const noexcept = 0;
};

// The store for a detected launch: rank 0 serves, the others connect. Without a job secret, a launch within
// one host binds and reaches the store on 127.0.0.1 only, and clients prove the per-user secret (so a
// process of another uid reads nothing); a launch that spans hosts is an InvalidArgument error naming
// job_secret and insecure, unless option insecure is set (then it is unauthenticated, with a warning).
RDMAKIT_API Result<std::shared_ptr<Store>> open_store(const LaunchInfo& launch,
                                                      std::chrono::milliseconds timeout);

// Reads RDMAKIT_BOOTSTRAP_TIMEOUT_MS (default 60000): how long to wait for a rank that does not show up.
RDMAKIT_API Result<std::chrono::milliseconds> bootstrap_timeout();

}  // namespace rdmakit::bootstrap

#include "cuda/options.hpp"

#include <vector>

namespace rdmakit::detail::cuda {
namespace {

struct CudaOptions {  // nothing is set in code: the loader is the process's
  std::optional<std::string> runtime{};
  std::optional<std::string> driver{};
};

using options::option;
using C = CudaConfig;
using O = CudaOptions;
using Spec = options::Spec<C, O>;

std::vector<Spec> specs() {
  return {
      option("cuda_runtime", "",
             "the CUDA runtime loaded (dlopen) when device memory is met; empty = libcudart.so.13, .12, "
             ".11.0, libcudart.so",
             "a file name or path", &C::runtime, &O::runtime),
      option("cuda_driver", "libcuda.so.1",
             "the CUDA driver loaded beside the runtime (allocation ranges, dmabuf export); also what "
             "MemoryKind::Auto looks for among the libraries already loaded",
             "a file name or path", &C::driver, &O::driver),
  };
}

Result<void> check(C&, const options::SetOptions&) { return {}; }

const options::OptionTable<C, O>& table() {
  static const options::OptionTable<C, O> table("cuda", specs(), check);
  return table;
}

}  // namespace

CudaConfig cuda_options() {
  auto resolved = table().resolve(CudaOptions{});
  return resolved ? *resolved : CudaConfig{.driver = "libcuda.so.1"};
}
const options::Table& cuda_option_table() { return table(); }

}  // namespace rdmakit::detail::cuda

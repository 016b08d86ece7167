// What the transfer engine's binding files share: the Python handle of a metadata store (the engine and the
// broadcast both take one), and the two halves of bind_xfer.
#pragma once

#include <memory>
#include <utility>

#include "common.hpp"
#include "rdmakit/xfer/metadata.hpp"

namespace rdmakit::python {

// A metadata store (rdmakit.xfer.open_metadata). Engines made with it share it, so close() only drops this
// handle: the store lives on (renewing its leases) while an engine uses it.
class PyMetadata {
 public:
  explicit PyMetadata(std::shared_ptr<xfer::MetadataStore> store) : store_(std::move(store)) {}
  ~PyMetadata();
  PyMetadata(const PyMetadata&) = delete;
  PyMetadata& operator=(const PyMetadata&) = delete;
  // The store, or rdmakit.InvalidArgumentError once closed.
  const std::shared_ptr<xfer::MetadataStore>& get() const;
  void close() noexcept;

 private:
  std::shared_ptr<xfer::MetadataStore> store_;
};

// Runs `work` with the GIL released when this thread holds it (destructors run with or without it).
template <typename Work>
void without_gil(Work work) {
  if (PyGILState_Check() == 0) return work();
  py::gil_scoped_release released;
  work();
}

}  // namespace rdmakit::python

// The Python Communicator's C++ side, shared by the collectives' bindings and the checkpoint engine's
// (Checkpointer(communicator=...) holds the communicator while its engine lives).
#pragma once

#include <memory>

#include "common.hpp"
#include "rdmakit/coll/communicator.hpp"

namespace rdmakit::python {

struct PyCommunicator {
  std::shared_ptr<coll::Communicator> comm;
  coll::Communicator& get() const {
    if (!comm) raise(Errc::InvalidArgument, "the communicator is closed");
    return *comm;
  }
};

}  // namespace rdmakit::python

// rdmakit._rdmakit: the extension module behind the `rdmakit` package (python/rdmakit/__init__.py).
#include "common.hpp"
#include "rdmakit/version.hpp"

PYBIND11_MODULE(_rdmakit, m) {
  m.doc() = "rdmakit's C++ core (use the `rdmakit` package, which re-exports it)";
  rdmakit::python::bind_errors(m);
  rdmakit::python::bind_core(m);
  rdmakit::python::bind_connection(m);
  rdmakit::python::bind_coll(m);
  rdmakit::python::bind_ckpt(m);
  rdmakit::python::bind_xfer_metadata(m);
  rdmakit::python::bind_xfer_engine(m);
}

#include "xfer/metadata/backend.hpp"
namespace rdmakit::xfer::metadata {
std::unique_ptr<Backend> make_etcd_backend(const Endpoint&, const MetadataOptions&) { return nullptr; }
}

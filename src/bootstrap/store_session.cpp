#include "bootstrap/store_session.hpp"

#include "bootstrap/options.hpp"
#include "bootstrap/store_wire.hpp"

namespace rdmakit::bootstrap {

Result<StoreLimits> store_limits() {
  auto config = resolve_bootstrap_options();
  if (!config) return std::unexpected(config.error());
  return StoreLimits{config->store_max_bytes, config->store_max_request_bytes,
                     config->store_max_client_buffer_bytes, config->store_max_clients};
}

Result<void> StoreData::set(std::string_view key, std::string_view value) {
  if (values_.contains(key))
    return fail(Errc::InvalidArgument,
                "key '" + std::string(key) + "' is already set (store keys are write-once)");
  if (find(key) != nullptr)
    return fail(Errc::InvalidArgument, "key '" + std::string(key) + "' is a leased key");
  if (auto ok = erase_leased(key); !ok) return ok;  // an expired one not swept yet
  std::uint64_t size = key.size() + value.size();
  if (bytes_ + size > limits_.max_bytes)
    return fail(Errc::ResourceExhausted,
                "the store is full: " + std::to_string(bytes_) + " + " + std::to_string(size) +
                    " bytes would exceed store_max_bytes=" + std::to_string(limits_.max_bytes));
  values_.emplace(std::string(key), std::string(value));
  bytes_ += size;
  return {};
}

const std::string* StoreData::find(std::string_view key) {
  if (auto it = values_.find(key); it != values_.end()) return &it->second;
  auto it = leased_.find(key);
  return it == leased_.end() || it->second.expires <= Clock::now() ? nullptr : &it->second.value;
}

StoreSession::Outcome StoreSession::feed(std::string_view input, StoreData& data, std::string& out) {
  if (state_ == State::Closed) return Outcome::Close;
  in_.append(input);
  Outcome outcome = Outcome::Continue;
  if (state_ == State::Hello) outcome = on_hello(out);
  if (outcome == Outcome::Continue && state_ == State::Proof) outcome = on_proof(out);
  if (outcome == Outcome::Continue && state_ == State::Open) outcome = on_requests(data, out);
  if (outcome == Outcome::Close) state_ = State::Closed;
  return outcome;
}

// Before the proof only the two fixed-size setup messages are legal; more bytes are a broken client.
StoreSession::Outcome StoreSession::on_hello(std::string& out) {
  if (in_.size() < wire::kHelloSize) return Outcome::Continue;
  if (std::string_view(in_).substr(0, 4) != wire::kHelloMagic ||
      in_.size() > wire::kHelloSize + wire::kProofSize) {
    wire::append_error(out, Errc::ProtocolError, "not an rdmakit store client (protocol v2 hello expected)");
    return Outcome::Close;
  }
  if (!refusal_.empty()) {
    wire::append_error(out, Errc::ResourceExhausted, refusal_);
    return Outcome::Close;
  }
  client_nonce_ = in_.substr(4, 32);
  in_.erase(0, wire::kHelloSize);
  wire::append_reply(out, wire::kOk, auth::bytes(nonce_));
  state_ = State::Proof;
  return Outcome::Continue;
}

StoreSession::Outcome StoreSession::on_proof(std::string& out) {
  if (in_.size() < wire::kProofSize) return Outcome::Continue;
  auto expected = auth::mac(secret_, {wire::kMacLabel, "client", client_nonce_, auth::bytes(nonce_)});
  auto received = std::span(reinterpret_cast<const std::uint8_t*>(in_.data()), wire::kProofSize);
  if (!auth::verify(expected, received)) {
    wire::append_error(out, Errc::ConnectionRefused,
                       "authentication failed: the client does not know the job secret (RDMAKIT_JOB_SECRET)");
    return Outcome::Close;
  }
  in_.erase(0, wire::kProofSize);
  auto proof = auth::mac(secret_, {wire::kMacLabel, "server", client_nonce_, auth::bytes(nonce_)});
  wire::append_reply(out, wire::kOk,
                     std::string_view(reinterpret_cast<const char*>(proof.data()), proof.size()));
  state_ = State::Open;
  return Outcome::Continue;
}

StoreSession::Outcome StoreSession::on_requests(StoreData& data, std::string& out) {
  std::size_t consumed = 0;
  Outcome outcome = Outcome::Continue;
  for (;;) {
    if (out.size() > data.limits().max_client_buffer_bytes) {
      outcome = Outcome::Overflow;
      break;
    }
    wire::Request request;
    std::string error;
    auto decoded = wire::decode_request(std::string_view(in_).substr(consumed),
                                        data.limits().max_request_bytes, request, error);
    if (decoded == wire::Decode::NeedMore) break;
    if (decoded == wire::Decode::Bad) {
      wire::append_error(out, Errc::ResourceExhausted, error);
      outcome = Outcome::Close;  // the body that follows cannot be skipped reliably
      break;
    }
    consumed += request.size;
    serve_request(request, data, out);
  }
  in_.erase(0, consumed);
  return outcome;
}

void StoreSession::serve_request(const wire::Request& request, StoreData& data, std::string& out) {
  if (request.op >= wire::kPut) {
    serve_leased(request, data, out);
  } else if (request.op == wire::kSet) {
    if (auto ok = data.set(request.key, request.value); ok)
      wire::append_reply(out, wire::kOk, {});
    else
      wire::append_error(out, ok.error().code(), ok.error().message());
  } else if (const std::string* value = data.find(request.key)) {
    wire::append_reply(out, wire::kOk, *value);
  } else {
    wire::append_reply(out, wire::kNotFound, {});
  }
}

}  // namespace rdmakit::bootstrap

// The collectives of the backend. Each checks its arguments at the call (an error there is raised by the
// torch.distributed call itself), then queues the communication on the group's worker. Tensors are kept
// alive by the queued task until it ran.
#include "process_group.hpp"

#include <algorithm>
#include <cstring>

#include "tensor_util.hpp"

namespace rdmakit::torch_backend {

namespace {

using coll::Communicator;
using coll::DataType;

int64_t root_of(int64_t root, int size, std::string_view op) {
  TORCH_CHECK(root >= 0 && root < size, "rdmakit ", op, ": root rank ", root, " is outside the group of ",
              size);
  return root;
}

// Every tensor of `list` like `model` (count and dtype): the per-rank pieces of gathers and scatters.
void check_pieces(const std::vector<at::Tensor>& list, const at::Tensor& model, std::size_t expected,
                  std::string_view op) {
  TORCH_CHECK(list.size() == expected, "rdmakit ", op, ": expected a list of ", expected, " tensors, got ",
              list.size());
  for (const auto& t : list) {
    check_tensor(t, op);
    check_same_type(t, model, op);
    TORCH_CHECK(t.numel() == model.numel(), "rdmakit ", op, ": every tensor of the list must have ",
                model.numel(), " elements, got one with ", t.numel());
  }
}

// All-to-all with a different byte count per peer: pads every piece to the largest piece any rank sends
// (agreed with a MAX allreduce), since the communicator's all_to_all moves one count per peer.
// pieces_out[r] / pieces_in[r]: (offset, bytes) of what goes to / comes from rank r.
using Pieces = std::vector<std::pair<std::size_t, std::size_t>>;
void padded_all_to_all(Communicator& comm, const std::byte* send, const Pieces& pieces_out, std::byte* recv,
                       const Pieces& pieces_in) {
  std::int64_t widest = 0;
  for (const auto& piece : pieces_out) widest = std::max<std::int64_t>(widest, piece.second);
  for (const auto& piece : pieces_in) widest = std::max<std::int64_t>(widest, piece.second);
  throw_if_failed(comm.allreduce(&widest, &widest, 1, DataType::I64, coll::ReduceOp::Max),
                  "all_to_all (sizes)");
  if (widest == 0) return;
  const auto slot = static_cast<std::size_t>(widest);
  std::vector<std::byte> out(slot * pieces_out.size()), in(slot * pieces_in.size());
  for (std::size_t r = 0; r < pieces_out.size(); ++r) {
    std::memcpy(out.data() + r * slot, send + pieces_out[r].first, pieces_out[r].second);
  }
  throw_if_failed(comm.all_to_all(out.data(), in.data(), slot, DataType::U8), "all_to_all");
  for (std::size_t r = 0; r < pieces_in.size(); ++r) {
    std::memcpy(recv + pieces_in[r].first, in.data() + r * slot, pieces_in[r].second);
  }
}

// (offset, bytes) of each piece when a tensor's rows are split by `splits` (empty: equally in `size`).
Pieces split_rows(const at::Tensor& tensor, const std::vector<int64_t>& splits, int size,
                  std::string_view side) {
  TORCH_CHECK(tensor.dim() >= 1, "rdmakit alltoall_base: the ", side, " tensor needs at least one dimension");
  const int64_t rows = tensor.size(0);
  const std::size_t row_bytes = rows == 0 ? 0 : tensor.nbytes() / static_cast<std::size_t>(rows);
  std::vector<int64_t> counts = splits;
  if (counts.empty()) {
    TORCH_CHECK(rows % size == 0, "rdmakit alltoall_base: the ", side, " tensor's ", rows,
                " rows do not split equally in ", size);
    counts.assign(static_cast<std::size_t>(size), rows / size);
  }
  TORCH_CHECK(counts.size() == static_cast<std::size_t>(size), "rdmakit alltoall_base: ", side,
              " split sizes have ", counts.size(), " entries for a group of ", size);
  Pieces pieces;
  int64_t offset = 0;
  for (int64_t count : counts) {
    TORCH_CHECK(count >= 0, "rdmakit alltoall_base: negative ", side, " split size ", count);
    pieces.emplace_back(static_cast<std::size_t>(offset) * row_bytes,
                        static_cast<std::size_t>(count) * row_bytes);
    offset += count;
  }
  TORCH_CHECK(offset == rows, "rdmakit alltoall_base: ", side, " split sizes add up to ", offset,
              " rows, the tensor has ", rows);
  return pieces;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmakit::broadcast(std::vector<at::Tensor>& tensors,
                                                              const c10d::BroadcastOptions& opts) {
  check_single(tensors, "broadcast");
  const int root = static_cast<int>(root_of(opts.rootRank, size_, "broadcast"));
  TORCH_CHECK(opts.rootTensor == 0, "rdmakit broadcast: rootTensor must be 0 (one tensor per process)");
  at::Tensor tensor = tensors[0];
  return enqueue(c10d::OpType::BROADCAST, tensors, [tensor, root](Communicator& comm) mutable {
    at::Tensor buffer = staged(tensor);
    if (buffer.nbytes() == 0) return;
    throw_if_failed(comm.broadcast(bytes_of(buffer), bytes_of(buffer), buffer.nbytes(), DataType::U8, root),
                    "broadcast");
    write_back(tensor, buffer);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmakit::allreduce(std::vector<at::Tensor>& tensors,
                                                              const c10d::AllreduceOptions& opts) {
  check_single(tensors, "allreduce");
  const auto type = checked_reduction_type(tensors[0], "allreduce");
  const auto op = checked_reduce_op(opts.reduceOp, "allreduce", tensors[0]);
  at::Tensor tensor = tensors[0];
  const c10d::ReduceOp torch_op = opts.reduceOp;
  return enqueue(c10d::OpType::ALLREDUCE, tensors, [tensor, type, op, torch_op](Communicator& comm) mutable {
    at::Tensor buffer = premultiplied(staged(tensor), torch_op, true);
    if (buffer.numel() == 0) return;
    throw_if_failed(comm.allreduce(buffer.data_ptr(), buffer.data_ptr(), buffer.numel(), type, op),
                    "allreduce");
    write_back(tensor, buffer);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmakit::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "rdmakit allreduce_coalesced: no tensors");
  for (const auto& t : tensors) {
    check_tensor(t, "allreduce_coalesced");
    check_same_type(t, tensors[0], "allreduce_coalesced");
  }
  const auto type = checked_reduction_type(tensors[0], "allreduce_coalesced");
  const auto op = checked_reduce_op(opts.reduceOp, "allreduce_coalesced", tensors[0]);
  const c10d::ReduceOp torch_op = opts.reduceOp;
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, tensors,
                 [tensors, type, op, torch_op](Communicator& comm) mutable {
                   at::Tensor flat = premultiplied(flatten(tensors), torch_op, true);
                   if (flat.numel() == 0) return;
                   throw_if_failed(comm.allreduce(flat.data_ptr(), flat.data_ptr(), flat.numel(), type, op),
                                   "allreduce_coalesced");
                   unflatten(flat, tensors);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmakit::reduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::ReduceOptions& opts) {
  check_single(tensors, "reduce");
  const int root = static_cast<int>(root_of(opts.rootRank, size_, "reduce"));
  const auto type = checked_reduction_type(tensors[0], "reduce");
  const auto op = checked_reduce_op(opts.reduceOp, "reduce", tensors[0]);
  at::Tensor tensor = tensors[0];
  return enqueue(c10d::OpType::REDUCE, tensors, [tensor, type, op, root](Communicator& comm) mutable {
    at::Tensor buffer = staged(tensor);
    if (buffer.numel() == 0) return;
    throw_if_failed(comm.reduce(buffer.data_ptr(), buffer.data_ptr(), buffer.numel(), type, op, root),
                    "reduce");
    write_back(tensor, buffer);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmakit::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                              std::vector<at::Tensor>& inputs,
                                                              const c10d::AllgatherOptions&) {
  check_single(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1, "rdmakit allgather takes one output list, got ", outputs.size());
  check_pieces(outputs[0], inputs[0], static_cast<std::size_t>(size_), "allgather");
  at::Tensor input = inputs[0];
  std::vector<at::Tensor> pieces = outputs[0];
  return enqueue(c10d::OpType::ALLGATHER, pieces, [input, pieces](Communicator& comm) mutable {
    at::Tensor send = staged(input);
    if (send.nbytes() == 0) return;
    at::Tensor gathered = at::empty({static_cast<int64_t>(pieces.size()) * send.numel()}, send.options());
    throw_if_failed(comm.allgather(bytes_of(send), bytes_of(gathered), send.nbytes(), DataType::U8),
                    "allgather");
    unflatten(gathered, pieces);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmakit::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                    const c10d::AllgatherOptions&) {
  check_tensor(output, "_allgather_base");
  check_tensor(input, "_allgather_base");
  check_same_type(output, input, "_allgather_base");
  TORCH_CHECK(output.numel() == input.numel() * size_, "rdmakit _allgather_base: the output has ",
              output.numel(), " elements, expected ", input.numel() * size_,
              " (world size times the input's)");
  return enqueue(c10d::OpType::_ALLGATHER_BASE, {output}, [output, input](Communicator& comm) mutable {
    at::Tensor send = staged(input);
    at::Tensor recv = staged(output);
    if (send.nbytes() == 0) return;
    throw_if_failed(comm.allgather(bytes_of(send), bytes_of(recv), send.nbytes(), DataType::U8),
                    "_allgather_base");
    write_back(output, recv);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmakit::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  TORCH_CHECK(!inputs.empty(), "rdmakit allgather_coalesced: no input tensors");
  for (const auto& t : inputs) {
    check_tensor(t, "allgather_coalesced");
    check_same_type(t, inputs[0], "allgather_coalesced");
  }
  TORCH_CHECK(outputs.size() == static_cast<std::size_t>(size_), "rdmakit allgather_coalesced: expected ",
              size_, " output lists (one per rank), got ", outputs.size());
  for (const auto& list : outputs) {
    TORCH_CHECK(list.size() == inputs.size(), "rdmakit allgather_coalesced: every output list must have ",
                inputs.size(), " tensors, got one with ", list.size());
    for (std::size_t i = 0; i < list.size(); ++i)
      check_pieces({list[i]}, inputs[i], 1, "allgather_coalesced");
  }
  std::vector<at::Tensor> all_outputs;
  for (const auto& list : outputs) all_outputs.insert(all_outputs.end(), list.begin(), list.end());
  return enqueue(
      c10d::OpType::ALLGATHER_COALESCED, all_outputs, [inputs, all_outputs](Communicator& comm) mutable {
        at::Tensor send = flatten(inputs);
        if (send.nbytes() == 0) return;
        at::Tensor gathered = at::empty(
            {static_cast<int64_t>(all_outputs.size() / inputs.size()) * send.numel()}, send.options());
        throw_if_failed(comm.allgather(bytes_of(send), bytes_of(gathered), send.nbytes(), DataType::U8),
                        "allgather_coalesced");
        unflatten(gathered, all_outputs);
      });
}

// gather and scatter move world-size times more than they need to (they run on allgather and broadcast,
// which is what the communicator has); they are there for scripts that call them, not for speed.
c10::intrusive_ptr<c10d::Work> ProcessGroupRdmakit::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::GatherOptions& opts) {
  check_single(inputs, "gather");
  const int root = static_cast<int>(root_of(opts.rootRank, size_, "gather"));
  std::vector<at::Tensor> pieces;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1, "rdmakit gather: the root takes one output list, got ", outputs.size());
    check_pieces(outputs[0], inputs[0], static_cast<std::size_t>(size_), "gather");
    pieces = outputs[0];
  } else {
    TORCH_CHECK(outputs.empty(), "rdmakit gather: only the root passes output tensors");
  }
  at::Tensor input = inputs[0];
  const int size = size_;
  return enqueue(c10d::OpType::GATHER, pieces, [input, pieces, size](Communicator& comm) mutable {
    at::Tensor send = staged(input);
    if (send.nbytes() == 0) return;
    at::Tensor gathered = at::empty({size * send.numel()}, send.options());
    throw_if_failed(comm.allgather(bytes_of(send), bytes_of(gathered), send.nbytes(), DataType::U8),
                    "gather");
    if (!pieces.empty()) unflatten(gathered, pieces);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmakit::scatter(std::vector<at::Tensor>& outputs,
                                                            std::vector<std::vector<at::Tensor>>& inputs,
                                                            const c10d::ScatterOptions& opts) {
  check_single(outputs, "scatter");
  const int root = static_cast<int>(root_of(opts.rootRank, size_, "scatter"));
  std::vector<at::Tensor> pieces;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1, "rdmakit scatter: the root takes one input list, got ", inputs.size());
    check_pieces(inputs[0], outputs[0], static_cast<std::size_t>(size_), "scatter");
    pieces = inputs[0];
  } else {
    TORCH_CHECK(inputs.empty(), "rdmakit scatter: only the root passes input tensors");
  }
  at::Tensor output = outputs[0];
  const int size = size_, rank = rank_;
  return enqueue(
      c10d::OpType::SCATTER, outputs, [output, pieces, size, rank, root](Communicator& comm) mutable {
        at::Tensor all = pieces.empty()
                             ? at::empty({size * output.numel()}, output.options().device(at::kCPU))
                             : flatten(pieces);
        if (all.nbytes() == 0) return;
        throw_if_failed(comm.broadcast(bytes_of(all), bytes_of(all), all.nbytes(), DataType::U8, root),
                        "scatter");
        output.copy_(all.narrow(0, rank * output.numel(), output.numel()).view(output.sizes()));
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmakit::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  check_single(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1, "rdmakit reduce_scatter takes one input list, got ", inputs.size());
  check_pieces(inputs[0], outputs[0], static_cast<std::size_t>(size_), "reduce_scatter");
  const auto type = checked_reduction_type(outputs[0], "reduce_scatter");
  const auto op = checked_reduce_op(opts.reduceOp, "reduce_scatter", outputs[0]);
  at::Tensor output = outputs[0];
  std::vector<at::Tensor> pieces = inputs[0];
  const c10d::ReduceOp torch_op = opts.reduceOp;
  return enqueue(c10d::OpType::REDUCE_SCATTER, outputs,
                 [output, pieces, type, op, torch_op](Communicator& comm) mutable {
                   at::Tensor send = premultiplied(flatten(pieces), torch_op, true);
                   at::Tensor recv = staged(output);
                   if (recv.numel() == 0) return;
                   throw_if_failed(
                       comm.reduce_scatter(send.data_ptr(), recv.data_ptr(), recv.numel(), type, op),
                       "reduce_scatter");
                   write_back(output, recv);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmakit::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  check_tensor(output, "_reduce_scatter_base");
  check_tensor(input, "_reduce_scatter_base");
  check_same_type(output, input, "_reduce_scatter_base");
  TORCH_CHECK(input.numel() == output.numel() * size_, "rdmakit _reduce_scatter_base: the input has ",
              input.numel(), " elements, expected ", output.numel() * size_,
              " (world size times the output's)");
  const auto type = checked_reduction_type(output, "_reduce_scatter_base");
  const auto op = checked_reduce_op(opts.reduceOp, "_reduce_scatter_base", output);
  const c10d::ReduceOp torch_op = opts.reduceOp;
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, {output},
                 [output, input, type, op, torch_op](Communicator& comm) mutable {
                   at::Tensor send = premultiplied(staged(input), torch_op, false);
                   at::Tensor recv = staged(output);
                   if (recv.numel() == 0) return;
                   throw_if_failed(
                       comm.reduce_scatter(send.data_ptr(), recv.data_ptr(), recv.numel(), type, op),
                       "_reduce_scatter_base");
                   write_back(output, recv);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmakit::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                  std::vector<int64_t>& output_splits,
                                                                  std::vector<int64_t>& input_splits,
                                                                  const c10d::AllToAllOptions&) {
  check_tensor(output, "alltoall_base");
  check_tensor(input, "alltoall_base");
  check_same_type(output, input, "alltoall_base");
  Pieces out = split_rows(input, input_splits, size_, "input");
  Pieces in = split_rows(output, output_splits, size_, "output");
  const bool equal = input_splits.empty() && output_splits.empty();
  TORCH_CHECK(!equal || input.numel() == output.numel(),
              "rdmakit alltoall_base: without split sizes the input (", input.numel(),
              " elements) and the output (", output.numel(), ") must be of one size");
  return enqueue(
      c10d::OpType::ALLTOALL_BASE, {output}, [output, input, out, in, equal](Communicator& comm) mutable {
        at::Tensor send = staged(input);
        at::Tensor recv = staged(output);
        if (equal) {
          if (send.nbytes() == 0) return;
          throw_if_failed(
              comm.all_to_all(bytes_of(send), bytes_of(recv), send.nbytes() / out.size(), DataType::U8),
              "alltoall_base");
        } else {
          padded_all_to_all(comm, bytes_of(send), out, bytes_of(recv), in);
        }
        write_back(output, recv);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmakit::alltoall(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllToAllOptions&) {
  const auto size = static_cast<std::size_t>(size_);
  TORCH_CHECK(inputs.size() == size && outputs.size() == size, "rdmakit alltoall: expected ", size,
              " input and output tensors, got ", inputs.size(), " and ", outputs.size());
  for (std::size_t r = 0; r < size; ++r) {
    check_tensor(inputs[r], "alltoall");
    check_tensor(outputs[r], "alltoall");
    check_same_type(inputs[r], inputs[0], "alltoall");
    check_same_type(outputs[r], inputs[0], "alltoall");
  }
  return enqueue(c10d::OpType::ALLTOALL, outputs, [outputs, inputs](Communicator& comm) mutable {
    at::Tensor send = flatten(inputs);
    at::Tensor recv = at::empty({0}, send.options());
    int64_t total = 0;
    for (const auto& t : outputs) total += t.numel();
    recv.resize_({total});
    Pieces out, in;
    const std::size_t element = send.element_size();
    std::size_t offset = 0;
    for (const auto& t : inputs) {
      out.emplace_back(offset * element, t.numel() * element);
      offset += t.numel();
    }
    offset = 0;
    for (const auto& t : outputs) {
      in.emplace_back(offset * element, t.numel() * element);
      offset += t.numel();
    }
    padded_all_to_all(comm, bytes_of(send), out, bytes_of(recv), in);
    unflatten(recv, outputs);
  });
}

}  // namespace rdmakit::torch_backend

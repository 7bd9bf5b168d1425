// mpi_communicator.cc: MpiCommunicator (deterministic collectives over host
// buffers). MpiPeerToPeer: mpi_peer_to_peer.cc.
#include "runtime/comm/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "runtime/comm/mpi_wait.h"

namespace paraplan {
namespace {

// all_reduce and reduce_scatter stage at most this many elements per all-to-all.
constexpr size_t kStagingElements = size_t{1} << 24;

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error code " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

template <typename T>
MPI_Datatype mpi_type_of();
template <>
MPI_Datatype mpi_type_of<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type_of<double>() {
  return MPI_DOUBLE;
}
template <>
MPI_Datatype mpi_type_of<uint16_t>() {  // bf16 bits
  return MPI_UINT16_T;
}

// out[i] = blocks[0][i] op blocks[1][i] op ... op blocks[n-1][i], always in that
// order, so the result depends only on the inputs.
template <typename T>
void reduce_in_rank_order(const T* blocks, size_t members, size_t length, ReduceOp op, T* out) {
  std::copy(blocks, blocks + length, out);
  for (size_t member = 1; member < members; ++member) {
    const T* block = blocks + member * length;
    if (op == ReduceOp::kSum) {
      for (size_t i = 0; i < length; ++i) out[i] += block[i];
    } else {
      for (size_t i = 0; i < length; ++i)  // NaN wins, so a NaN anywhere is seen
        out[i] = (block[i] > out[i] || std::isnan(block[i])) ? block[i] : out[i];
    }
  }
}

// reduce_in_rank_order for bf16 blocks, in fp32: every member's value is
// widened and combined in the same rank order, and the result rounded once to
// bf16, so it is the fp32 rank-order result of the widened inputs, rounded
// once. Tiles on the stack keep the member-major loops and allocate nothing.
void reduce_bfloat16_in_rank_order(const uint16_t* blocks, size_t members, size_t length,
                                   ReduceOp op, uint16_t* out) {
  constexpr size_t kTile = 1024;
  float accumulator[kTile];
  for (size_t begin = 0; begin < length; begin += kTile) {
    const size_t tile = std::min(kTile, length - begin);
    kernels::host_to_float(accumulator, blocks + begin, kernels::DType::kBFloat16, tile);
    for (size_t member = 1; member < members; ++member) {
      const uint16_t* block = blocks + member * length + begin;
      if (op == ReduceOp::kSum) {
        for (size_t i = 0; i < tile; ++i) accumulator[i] += kernels::float_from_bfloat16(block[i]);
      } else {
        for (size_t i = 0; i < tile; ++i) {  // NaN wins, as in reduce_in_rank_order
          const float value = kernels::float_from_bfloat16(block[i]);
          accumulator[i] = (value > accumulator[i] || std::isnan(value)) ? value : accumulator[i];
        }
      }
    }
    kernels::host_from_float(out + begin, accumulator, kernels::DType::kBFloat16, tile);
  }
}

// The reduction of the received blocks of T (float, double, or uint16_t for bf16).
template <typename T>
void reduce_blocks_in_rank_order(const T* blocks, size_t members, size_t length, ReduceOp op,
                                 T* out) {
  if constexpr (std::is_same_v<T, uint16_t>) {
    reduce_bfloat16_in_rank_order(blocks, members, length, op, out);
  } else {
    reduce_in_rank_order(blocks, members, length, op, out);
  }
}

}  // namespace

void throw_mpi_error(const std::string& group, const std::string& operation, int code) {
  throw std::runtime_error("MPI " + operation + " on group '" + group +
                           "' failed: " + mpi_error_text(code));
}

// ---------------------------------------------------------------- MpiCommunicator

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name)
    : comm_(comm), name_(std::move(name)) {
  PARAPLAN_MPI_CHECK(name_, "set_errhandler", MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  PARAPLAN_MPI_CHECK(name_, "comm_rank", MPI_Comm_rank(comm_, &rank_));
  PARAPLAN_MPI_CHECK(name_, "comm_size", MPI_Comm_size(comm_, &size_));
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::world() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    throw std::logic_error(
        "MpiCommunicator::world: MPI is not initialised; create an MpiSession first");
  MPI_Comm world = MPI_COMM_NULL;
  PARAPLAN_MPI_CHECK("world", "comm_dup", MPI_Comm_dup(MPI_COMM_WORLD, &world));
  return std::make_unique<MpiCommunicator>(world, "world");
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split(int color, int key,
                                                        std::string name) const {
  MPI_Comm comm = MPI_COMM_NULL;
  PARAPLAN_MPI_CHECK(
      name_, "comm_split (" + name + " group)",
      MPI_Comm_split(comm_, color == kNotInGroup ? MPI_UNDEFINED : color, key, &comm));
  if (comm == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiCommunicator>(comm, std::move(name));
}

std::vector<int> MpiCommunicator::world_ranks() const {
  MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  PARAPLAN_MPI_CHECK(name_, "comm_group", MPI_Comm_group(comm_, &mine));
  PARAPLAN_MPI_CHECK(name_, "comm_group (world)", MPI_Comm_group(MPI_COMM_WORLD, &world));
  std::vector<int> ranks(static_cast<size_t>(size_)), world_ranks(ranks.size());
  for (int i = 0; i < size_; ++i) ranks[static_cast<size_t>(i)] = i;
  const int status =
      MPI_Group_translate_ranks(mine, size_, ranks.data(), world, world_ranks.data());
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  PARAPLAN_MPI_CHECK(name_, "group_translate_ranks", status);
  return world_ranks;
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);  // no throw from a destructor
}

void MpiCommunicator::set_max_elements_per_call(size_t elements) {
  if (elements < 1 || elements > static_cast<size_t>(INT_MAX))
    throw std::invalid_argument("group '" + name_ + "': max elements per call " +
                                std::to_string(elements) + " must be in 1..INT_MAX");
  max_elements_per_call_ = elements;
}

size_t MpiCommunicator::staging_piece() const {
  return std::max<size_t>(
      1, std::min(max_elements_per_call_, kStagingElements / static_cast<size_t>(size_)));
}

template <typename T>
void MpiCommunicator::reserve_workspace(size_t staging, size_t received, size_t reduced,
                                        T** staging_out, T** received_out, T** reduced_out) {
  const size_t total = staging + received + reduced;
  const size_t doubles = (total * sizeof(T) + sizeof(double) - 1) / sizeof(double);
  if (workspace_.size() < doubles) workspace_.resize(doubles);
  T* base = reinterpret_cast<T*>(workspace_.data());
  *staging_out = base;
  *received_out = base + staging;
  *reduced_out = base + staging + received;
}

template <typename T>
void MpiCommunicator::all_reduce_in_order(T* data, size_t count, ReduceOp op) {
  if (count == 0 || size_ == 1) return;
  const MPI_Datatype type = mpi_type_of<T>();
  const size_t members = static_cast<size_t>(size_);
  // Chunk j (padded to equal size) is reduced at member j, then gathered by all.
  const size_t chunk = (count + members - 1) / members;
  const size_t piece = std::min(chunk, staging_piece());
  // One round without padding needs no staging copy: send from data, gather into it.
  const bool direct = piece == chunk && chunk * members == count;
  T *staging, *received, *reduced;
  reserve_workspace<T>(direct ? 0 : members * piece, members * piece, piece, &staging, &received,
                       &reduced);

  for (size_t offset = 0; offset < chunk; offset += piece) {
    const size_t length = std::min(piece, chunk - offset);
    const auto valid_in_block = [&](size_t member) -> size_t {
      const size_t begin = member * chunk + offset;
      return begin >= count ? 0 : std::min(length, count - begin);
    };
    const T* send = data;
    if (!direct) {
      for (size_t member = 0; member < members; ++member) {
        T* block = staging + member * length;
        const size_t valid = valid_in_block(member);
        std::copy(data + member * chunk + offset, data + member * chunk + offset + valid, block);
        std::fill(block + valid, block + length, T(0));  // padding, never unpacked
      }
      send = staging;
    }
    MPI_Request request = MPI_REQUEST_NULL;
    PARAPLAN_MPI_CHECK(name_, "all_reduce (all-to-all of chunks)",
                       complete(MPI_Ialltoall(send, static_cast<int>(length), type, received,
                                              static_cast<int>(length), type, comm_, &request),
                                &request));
    reduce_blocks_in_rank_order(received, members, length, op, reduced);
    T* gathered = direct ? data : staging;
    PARAPLAN_MPI_CHECK(name_, "all_reduce (all-gather of reduced chunks)",
                       complete(MPI_Iallgather(reduced, static_cast<int>(length), type, gathered,
                                               static_cast<int>(length), type, comm_, &request),
                                &request));
    if (!direct) {
      for (size_t member = 0; member < members; ++member) {
        const T* block = staging + member * length;
        std::copy(block, block + valid_in_block(member), data + member * chunk + offset);
      }
    }
  }
}

void MpiCommunicator::all_reduce(void* data, size_t count, kernels::DType dtype, ReduceOp op) {
  if (dtype == kernels::DType::kBFloat16) {
    all_reduce_in_order(static_cast<uint16_t*>(data), count, op);
  } else {
    all_reduce_in_order(static_cast<float*>(data), count, op);
  }
}

void MpiCommunicator::all_reduce(double* data, size_t count, ReduceOp op) {
  all_reduce_in_order(data, count, op);
}

void MpiCommunicator::reduce_scatter(const void* send, void* receive, size_t chunk_count,
                                     kernels::DType dtype) {
  if (dtype == kernels::DType::kBFloat16) {
    reduce_scatter_in_order(static_cast<const uint16_t*>(send), static_cast<uint16_t*>(receive),
                            chunk_count);
  } else {
    reduce_scatter_in_order(static_cast<const float*>(send), static_cast<float*>(receive),
                            chunk_count);
  }
}

// Each element is reduced exactly as all_reduce_in_order reduces it (the same
// blocks in the same rank order), so the result is bitwise all_reduce's slice.
template <typename T>
void MpiCommunicator::reduce_scatter_in_order(const T* send, T* receive, size_t chunk_count) {
  if (chunk_count == 0) return;
  if (size_ == 1) {
    if (send != receive) std::memmove(receive, send, chunk_count * sizeof(T));
    return;
  }
  const MPI_Datatype type = mpi_type_of<T>();
  const size_t members = static_cast<size_t>(size_);
  const size_t piece = std::min(chunk_count, staging_piece());
  const bool direct = piece == chunk_count;
  T *staging, *received, *unused;
  reserve_workspace<T>(direct ? 0 : members * piece, members * piece, 0, &staging, &received,
                       &unused);
  for (size_t offset = 0; offset < chunk_count; offset += piece) {
    const size_t length = std::min(piece, chunk_count - offset);
    const T* from = send;
    if (!direct) {
      for (size_t member = 0; member < members; ++member) {
        const T* block = send + member * chunk_count + offset;
        std::copy(block, block + length, staging + member * length);
      }
      from = staging;
    }
    MPI_Request request = MPI_REQUEST_NULL;
    PARAPLAN_MPI_CHECK(name_, "reduce_scatter (all-to-all of chunks)",
                       complete(MPI_Ialltoall(from, static_cast<int>(length), type, received,
                                              static_cast<int>(length), type, comm_, &request),
                                &request));
    // receive may overlap send's own chunk: that part was already sent.
    reduce_blocks_in_rank_order(received, members, length, ReduceOp::kSum, receive + offset);
  }
}

void MpiCommunicator::all_gather(const void* send, void* receive, size_t chunk_count,
                                 kernels::DType dtype) {
  if (chunk_count == 0) return;
  const size_t element_bytes = kernels::dtype_bytes(dtype);
  const size_t chunk_bytes = chunk_count * element_bytes;
  const MPI_Datatype type = mpi_element_type(dtype);
  const char* send_bytes = static_cast<const char*>(send);
  char* receive_bytes = static_cast<char*>(receive);
  const bool in_place = send_bytes == receive_bytes + static_cast<size_t>(rank_) * chunk_bytes;
  if (size_ == 1) {
    if (!in_place) std::memmove(receive, send, chunk_bytes);
    return;
  }
  const size_t piece = std::min(chunk_count, max_elements_per_call_);
  if (piece == chunk_count) {
    MPI_Request request = MPI_REQUEST_NULL;
    PARAPLAN_MPI_CHECK(
        name_, "all_gather",
        complete(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, static_cast<int>(chunk_count), type,
                                receive, static_cast<int>(chunk_count), type, comm_, &request),
                 &request));
    return;
  }
  // Large chunks go in pieces: piece k of every member's chunk at once, received
  // through a type of `length` elements whose extent is a whole chunk, so member
  // j's piece lands at receive + j * chunk_count + offset.
  for (size_t offset = 0; offset < chunk_count; offset += piece) {
    const size_t length = std::min(piece, chunk_count - offset);
    MPI_Datatype contiguous = MPI_DATATYPE_NULL, strided = MPI_DATATYPE_NULL;
    PARAPLAN_MPI_CHECK(name_, "all_gather (type_contiguous)",
                       MPI_Type_contiguous(static_cast<int>(length), type, &contiguous));
    PARAPLAN_MPI_CHECK(
        name_, "all_gather (type_create_resized)",
        MPI_Type_create_resized(contiguous, 0, static_cast<MPI_Aint>(chunk_bytes), &strided));
    MPI_Type_free(&contiguous);
    PARAPLAN_MPI_CHECK(name_, "all_gather (type_commit)", MPI_Type_commit(&strided));
    const size_t offset_bytes = offset * element_bytes;
    MPI_Request request = MPI_REQUEST_NULL;
    const int status =
        complete(MPI_Iallgather(in_place ? MPI_IN_PLACE : send_bytes + offset_bytes,
                                static_cast<int>(length), type, receive_bytes + offset_bytes, 1,
                                strided, comm_, &request),
                 &request);
    MPI_Type_free(&strided);
    PARAPLAN_MPI_CHECK(name_, "all_gather", status);
  }
}

void MpiCommunicator::broadcast(void* data, size_t count, kernels::DType dtype, int root) {
  if (root < 0 || root >= size_)
    throw std::invalid_argument("broadcast on group '" + name_ + "': root " + std::to_string(root) +
                                " is not a member; valid: 0.." + std::to_string(size_ - 1));
  const size_t element_bytes = kernels::dtype_bytes(dtype);
  const MPI_Datatype type = mpi_element_type(dtype);
  char* bytes = static_cast<char*>(data);
  for (size_t offset = 0; offset < count; offset += max_elements_per_call_) {
    const size_t length = std::min(max_elements_per_call_, count - offset);
    MPI_Request request = MPI_REQUEST_NULL;
    PARAPLAN_MPI_CHECK(name_, "broadcast",
                       complete(MPI_Ibcast(bytes + offset * element_bytes, static_cast<int>(length),
                                           type, root, comm_, &request),
                                &request));
  }
}

void MpiCommunicator::barrier() {
  MPI_Request request = MPI_REQUEST_NULL;
  PARAPLAN_MPI_CHECK(name_, "barrier", complete(MPI_Ibarrier(comm_, &request), &request));
}

// ---------------------------------------------------------------- MpiPeerToPeer

}  // namespace paraplan

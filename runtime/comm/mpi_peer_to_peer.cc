// mpi_peer_to_peer.cc: MpiPeerToPeer, the pipeline's transfers between world
// ranks over MPI: paired (send_receive) and posted (post_send, post_receive,
// wait).
#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/comm/mpi_communicator.h"
#include "runtime/comm/mpi_wait.h"

namespace paraplan {
namespace {

constexpr int kPeerTag = 7;  // pipeline transfers use kPeerTag + their tag

}  // namespace

MpiPeerToPeer::MpiPeerToPeer(MPI_Comm comm) : comm_(comm) {
  PARAPLAN_MPI_CHECK("peers", "set_errhandler", MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  PARAPLAN_MPI_CHECK("peers", "comm_rank", MPI_Comm_rank(comm_, &rank_));
  PARAPLAN_MPI_CHECK("peers", "comm_size", MPI_Comm_size(comm_, &size_));
}

std::unique_ptr<MpiPeerToPeer> MpiPeerToPeer::over_world() {
  MPI_Comm peers = MPI_COMM_NULL;
  PARAPLAN_MPI_CHECK("world", "comm_dup (peers)", MPI_Comm_dup(MPI_COMM_WORLD, &peers));
  return std::make_unique<MpiPeerToPeer>(peers);
}

MpiPeerToPeer::~MpiPeerToPeer() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // Sends never waited on (a step that failed half-way) are cancelled, not leaked.
  for (Pending& pending : pending_)
    for (MPI_Request& request : pending.requests)
      if (request != MPI_REQUEST_NULL) {
        MPI_Cancel(&request);
        MPI_Request_free(&request);
      }
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiPeerToPeer::set_max_elements_per_message(size_t elements) {
  if (elements < 1 || elements > static_cast<size_t>(INT_MAX))
    throw std::invalid_argument("peers: max elements per message " + std::to_string(elements) +
                                " must be in 1..INT_MAX");
  max_elements_per_message_ = elements;
}

void MpiPeerToPeer::check_peer(int peer, int tag, const char* operation) const {
  if (tag < 0 || tag >= kMaxPeerTags)
    throw std::invalid_argument(std::string(operation) + ": tag " + std::to_string(tag) +
                                "; valid: 0.." + std::to_string(kMaxPeerTags - 1));
  if (peer < -1 || peer >= size_)
    throw std::invalid_argument(std::string(operation) + ": peer " + std::to_string(peer) +
                                " is not a world rank; valid: -1 (none) or 0.." +
                                std::to_string(size_ - 1));
}

std::string MpiPeerToPeer::describe(bool send, size_t count, int peer, kernels::DType dtype,
                                    int tag) const {
  return std::string(send ? "send " : "receive ") + std::to_string(count) + " " +
         elements_unit(dtype) + (send ? " to" : " from") + " world rank " + std::to_string(peer) +
         (tag > 0 ? ", tag " + std::to_string(tag) : std::string());
}

std::vector<MPI_Request> MpiPeerToPeer::start_sends(const void* data, size_t count, int to,
                                                    kernels::DType dtype, int tag,
                                                    const std::string& transfer) {
  const size_t element_bytes = kernels::dtype_bytes(dtype);
  const char* bytes = static_cast<const char*>(data);
  // Always at least one message, even of 0 elements, so a count the two sides
  // disagree on is reported instead of leaving one side waiting.
  const size_t messages =
      std::max<size_t>(1, (count + max_elements_per_message_ - 1) / max_elements_per_message_);
  std::vector<MPI_Request> sends;
  for (size_t k = 0; k < messages; ++k) {
    const size_t offset = k * max_elements_per_message_;
    const size_t length = std::min(max_elements_per_message_, count - offset);
    sends.emplace_back();
    PARAPLAN_MPI_CHECK(
        "peers", transfer + " isend",
        MPI_Isend(bytes + offset * element_bytes, static_cast<int>(length), mpi_element_type(dtype),
                  to, kPeerTag + tag, comm_, &sends.back()));
  }
  return sends;
}

std::string MpiPeerToPeer::receive_messages(void* data, size_t count, int from,
                                            kernels::DType dtype, int tag,
                                            const std::string& transfer) {
  const size_t element_bytes = kernels::dtype_bytes(dtype);
  char* bytes_out = static_cast<char*>(data);
  const char* unit = elements_unit(dtype);
  // Each receive first matches its message (MPI_Improbe) and checks its length,
  // then receives it (MPI_Imrecv) into the buffer. A message of another length
  // is received into a scratch buffer and reported: a plain MPI_Irecv would
  // truncate it, and Open MPI 4.1 can hang on a truncated receive when MPI was
  // initialised with threads.
  const size_t messages =
      std::max<size_t>(1, (count + max_elements_per_message_ - 1) / max_elements_per_message_);
  for (size_t k = 0; k < messages; ++k) {
    const size_t offset = k * max_elements_per_message_;
    const size_t length = std::min(max_elements_per_message_, count - offset);
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    PARAPLAN_MPI_CHECK("peers", transfer + " mprobe", wait_patiently([&](int* matched) {
                         const int probed =
                             MPI_Improbe(from, kPeerTag + tag, comm_, matched, &message, &status);
                         if (probed == MPI_SUCCESS && !*matched) land_arrived_receives(from, tag);
                         return probed;
                       }));
    MPI_Count bytes = 0;
    PARAPLAN_MPI_CHECK("peers", transfer + " get_elements",
                       MPI_Get_elements_x(&status, MPI_BYTE, &bytes));
    if (static_cast<size_t>(bytes) == length * element_bytes) {
      MPI_Request request = MPI_REQUEST_NULL;
      PARAPLAN_MPI_CHECK(
          "peers", transfer + " mrecv",
          complete(MPI_Imrecv(bytes_out + offset * element_bytes, static_cast<int>(length),
                              mpi_element_type(dtype), &message, &request),
                   &request));
      continue;
    }
    if (bytes > INT_MAX)
      throw std::runtime_error("MPI " + transfer + " on group 'peers': expected " +
                               std::to_string(length) + " " + unit + " from world rank " +
                               std::to_string(from) + " but the message has " +
                               std::to_string(static_cast<long long>(bytes)) + " bytes");
    std::vector<char> scratch(static_cast<size_t>(bytes));
    PARAPLAN_MPI_CHECK(
        "peers", transfer + " mrecv",
        MPI_Mrecv(scratch.data(), static_cast<int>(bytes), MPI_BYTE, &message, MPI_STATUS_IGNORE));
    return "expected " + std::to_string(length) + " " + unit + " from world rank " +
           std::to_string(from) + " but received " +
           std::to_string(static_cast<size_t>(bytes) / element_bytes) +
           (bytes % element_bytes ? " and a part" : "") + "; both sides must agree on the count";
  }
  return "";
}

void MpiPeerToPeer::wait_sends(std::vector<MPI_Request>& sends, const std::string& transfer) {
  if (sends.empty()) return;
  std::vector<MPI_Status> statuses(sends.size());
  const int status = wait_patiently([&](int* done) {
    const int tested =
        MPI_Testall(static_cast<int>(sends.size()), sends.data(), done, statuses.data());
    if (tested == MPI_SUCCESS && !*done) land_arrived_receives(-1, 0);
    return tested;
  });
  if (status == MPI_ERR_IN_STATUS) {
    for (const MPI_Status& each : statuses) {
      if (each.MPI_ERROR != MPI_SUCCESS && each.MPI_ERROR != MPI_ERR_PENDING)
        throw_mpi_error("peers", transfer + " waitall", each.MPI_ERROR);
    }
  }
  PARAPLAN_MPI_CHECK("peers", transfer + " waitall", status);
}

void MpiPeerToPeer::send_receive(const void* send, size_t send_count, int send_to, void* receive,
                                 size_t receive_count, int receive_from, kernels::DType dtype,
                                 int tag) {
  check_peer(send_to, tag, "send_receive");
  check_peer(receive_from, tag, "send_receive");
  const std::string transfer = "send_receive (" + describe(true, send_count, send_to, dtype, 0) +
                               ", " + describe(false, receive_count, receive_from, dtype, tag) +
                               ")";
  // Sends are posted first and complete in the background, so two neighbours
  // that send to each other both have their sends in flight before either
  // waits for its receive.
  std::vector<MPI_Request> sends;
  if (send_to >= 0) sends = start_sends(send, send_count, send_to, dtype, tag, transfer);
  std::string mismatch;
  if (receive_from >= 0)
    mismatch = receive_messages(receive, receive_count, receive_from, dtype, tag, transfer);
  wait_sends(sends, transfer);
  if (!mismatch.empty())
    throw std::runtime_error("MPI " + transfer + " on group 'peers': " + mismatch);
}

PeerToPeer::Posted MpiPeerToPeer::post_send(const void* data, size_t count, int to,
                                            kernels::DType dtype, int tag) {
  check_peer(to, tag, "post_send");
  if (to < 0) throw std::invalid_argument("post_send: no peer (-1)");
  Pending pending{next_id_++, true, {}, nullptr, count, to, tag, dtype};
  pending.requests =
      start_sends(data, count, to, dtype, tag, "posted " + describe(true, count, to, dtype, tag));
  pending_.push_back(std::move(pending));
  return pending_.back().id;
}

// Host memory, written when the receive is matched (at its wait, or at any
// wait before, land_arrived_receives): buffer_free (a device mark) does not
// apply, and a send from the same buffer finishes first.
PeerToPeer::Posted MpiPeerToPeer::post_receive(void* data, size_t count, int from,
                                               kernels::DType dtype, int tag, void* /*buffer_free*/,
                                               Posted after_send) {
  check_peer(from, tag, "post_receive");
  if (from < 0) throw std::invalid_argument("post_receive: no peer (-1)");
  if (after_send != 0) {
    Pending& send = *find_posted(pending_, after_send);
    if (!send.send)
      throw std::logic_error("post_receive: transfer " + std::to_string(after_send) +
                             " to finish first is a receive, not a send");
    if (!send.finished) finish(send);
    send.finished = true;  // its own wait only forgets it
  }
  pending_.push_back(Pending{next_id_++, false, {}, data, count, from, tag, dtype});
  return pending_.back().id;
}

void MpiPeerToPeer::land_arrived_receives(int receiving_peer, int receiving_tag) {
  if (landing_) return;  // a receive that lands waits for its message's later parts
  landing_ = true;
  struct Reset {  // on every way out, a throw included
    bool& flag;
    ~Reset() { flag = false; }
  } reset{landing_};
  // Per peer and tag, only the first receive not yet landed can match; none
  // on the link being received, whose next message is that receive's.
  std::vector<std::pair<int, int>> waiting_behind{{receiving_peer, receiving_tag}};
  for (Pending& pending : pending_) {
    if (pending.send || pending.finished) continue;
    const std::pair<int, int> link{pending.peer, pending.tag};
    if (std::find(waiting_behind.begin(), waiting_behind.end(), link) != waiting_behind.end())
      continue;
    int arrived = 0;
    PARAPLAN_MPI_CHECK(
        "peers", "iprobe",
        MPI_Iprobe(pending.peer, kPeerTag + pending.tag, comm_, &arrived, MPI_STATUS_IGNORE));
    if (!arrived) {
      waiting_behind.push_back(link);
      continue;
    }
    finish(pending);
    pending.finished = true;  // its own wait only forgets it
  }
}

void MpiPeerToPeer::finish(Pending& pending) {
  const std::string transfer =
      "posted " + describe(pending.send, pending.count, pending.peer, pending.dtype, pending.tag);
  if (pending.send) {
    wait_sends(pending.requests, transfer);
    return;
  }
  const std::string mismatch = receive_messages(pending.data, pending.count, pending.peer,
                                                pending.dtype, pending.tag, transfer);
  if (!mismatch.empty())
    throw std::runtime_error("MPI " + transfer + " on group 'peers': " + mismatch);
}

void MpiPeerToPeer::wait(Posted transfer) {
  const auto it = find_posted(pending_, transfer);
  // A receive is matched after those posted before it from its peer and tag.
  if (!it->send) {
    for (auto earlier = pending_.begin(); earlier != it; ++earlier) {
      if (earlier->send || earlier->finished || earlier->peer != it->peer ||
          earlier->tag != it->tag)
        continue;
      finish(*earlier);
      earlier->finished = true;  // its own wait only forgets it
    }
  }
  Pending pending = std::move(*it);
  pending_.erase(it);
  if (!pending.finished) finish(pending);
}

}  // namespace paraplan

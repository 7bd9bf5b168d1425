// collective_profiler.cc: collective and pipeline-exchange timings for
// profile.json (collective_profiler.h).
#include "runtime/measure/collective_profiler.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <functional>
#include <utility>
#include <vector>

#include "runtime/comm/mpi_communicator.h"
#include "runtime/comm/transport.h"
#include "runtime/measure/span_clock.h"
#include "runtime/parallel/parallel_state.h"

namespace paraplan {

namespace {

using Clock = std::chrono::steady_clock;

// An entry of the measured points and the line fitted to them: latency +
// bytes * seconds_per_byte by least squares of the relative error (each point
// weighted 1 / seconds^2, so the 16 KiB point counts as much as the 4 MiB one:
// a step's messages are of every size in between); both kept >= 0.
CollectiveEntry measured_entry(CollectiveOperation operation, int group_size, int processes,
                               ProfileClock clock, std::vector<CollectivePoint> points) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const CollectivePoint& point : points) {
    const double x = point.bytes, y = point.seconds;
    const double w = 1 / std::max(y * y, 1e-300);
    sw += w, sx += w * x, sy += w * y, sxx += w * x * x, sxy += w * x * y;
  }
  const double slope = std::max(0.0, (sw * sxy - sx * sy) / std::max(1e-300, sw * sxx - sx * sx));
  const double latency = std::max(0.0, (sy - slope * sx) / std::max(sw, 1e-300));
  return CollectiveEntry{.operation = operation,
                         .group_size = group_size,
                         .processes = processes,
                         .latency = latency,
                         .seconds_per_byte = slope,
                         .clock = clock,
                         .points = std::move(points)};
}

// A stand-in for a step's compute between its collectives: streaming
// updates over a buffer of the bytes that compute touches (the request's
// compute_bytes), so that the collective's buffers are as far out of the
// caches as a step leaves them: a large model's GEMMs evict them, a small
// one's leave them in. A member that shares its core with others takes
// longer, as in a step.
class StandInCompute {
 public:
  // bytes 0: none (a device's timer never computes between calls).
  explicit StandInCompute(uint64_t bytes) {
    if (bytes == 0) return;
    buffer_.assign(std::max<size_t>(static_cast<size_t>(bytes / sizeof(float)), 1024), 0.0f);
    stream(buffer_.size());
    // At least 32 MiB streamed (a few milliseconds), so that one preemption
    // does not set the pace of a small buffer's calibration.
    const size_t passes = std::max<size_t>(4, (size_t{8} << 20) / buffer_.size());
    const Clock::time_point start = Clock::now();
    stream(passes * buffer_.size());
    passes_per_second_ =
        static_cast<double>(passes) /
        std::max(1e-9, std::chrono::duration<double>(Clock::now() - start).count());
  }
  // About `seconds` of work on a core of its own.
  void run(double seconds) {
    if (buffer_.empty()) return;
    stream(static_cast<size_t>(seconds * passes_per_second_ * static_cast<double>(buffer_.size())));
  }

 private:
  // Updates `elements` values, passing over the buffer as often as needed.
  void stream(size_t elements) {
    for (size_t done = 0; done < elements; done += buffer_.size()) {
      const size_t n = std::min(buffer_.size(), elements - done);
      for (size_t i = 0; i < n; ++i) buffer_[i] = buffer_[i] * 0.999f + 0.001f;
    }
  }
  std::vector<float> buffer_;
  double passes_per_second_ = 1;
};

// How one call is timed. On the CPU backend (whose ranks may outnumber the
// cores) each call follows the same stretch of compute on every member, as
// the ranks of a tensor- or data-parallel group do in a step, and its time is
// what replay counts as a call's transfer (wait_attribution.h): the least
// work (CPU time, capped at the call's duration) any member did in it; the
// mean over the calls. On a device, calls run back to back and the window
// ends when the device has finished them (NCCL returns once a call is queued).
class CallTimer {
 public:
  CallTimer(kernels::Ops& ops, const CollectiveProfileRequest& request)
      : ops_(ops), request_(request), on_cpu_(ops.backend() == kernels::Backend::kCpu) {}

  // Collective over the world; `members` is the group the call runs in.
  // `input`: the bytes the call reads first, which the step's compute has just
  // written (the CPU timer writes them after its stand-in compute).
  double seconds(MPI_Comm members, const std::function<void()>& work, void* input,
                 size_t input_bytes, StandInCompute& compute) {
    return on_cpu_ ? between_compute(members, work, input, input_bytes, compute)
                   : back_to_back(work);
  }

 private:
  double back_to_back(const std::function<void()>& work) {
    work();
    ops_.synchronize();
    PARAPLAN_MPI_CHECK("profile", "barrier", MPI_Barrier(MPI_COMM_WORLD));
    Clock::time_point start = Clock::now();
    work();
    ops_.synchronize();
    double one = std::chrono::duration<double>(Clock::now() - start).count();
    PARAPLAN_MPI_CHECK("profile", "allreduce",
                       MPI_Allreduce(MPI_IN_PLACE, &one, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    const int runs =
        std::max(request_.repetitions,
                 static_cast<int>(request_.minimum_window_seconds / std::max(one, 1e-6)));
    PARAPLAN_MPI_CHECK("profile", "barrier", MPI_Barrier(MPI_COMM_WORLD));
    start = Clock::now();
    for (int i = 0; i < runs; ++i) work();
    ops_.synchronize();
    double seconds = std::chrono::duration<double>(Clock::now() - start).count() / runs;
    // The slowest member sets a collective's pace.
    PARAPLAN_MPI_CHECK(
        "profile", "allreduce",
        MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    return seconds;
  }

  double between_compute(MPI_Comm members, const std::function<void()>& work, void* input,
                         size_t input_bytes, StandInCompute& compute) {
    work();
    PARAPLAN_MPI_CHECK("profile", "barrier", MPI_Barrier(MPI_COMM_WORLD));
    const int runs = std::max(request_.repetitions, 20);
    std::vector<double> negated(runs);
    for (int i = 0; i < runs; ++i) {
      compute.run(2e-3);
      ops_.zero_bytes(input, input_bytes);  // as the GEMM before an all-reduce leaves it
      SpanClock span;
      work();
      span.stop();
      negated[i] = -span.work();
    }
    PARAPLAN_MPI_CHECK(
        "profile", "allreduce",
        MPI_Allreduce(MPI_IN_PLACE, negated.data(), runs, MPI_DOUBLE, MPI_MAX, members));
    double seconds = 0;
    for (double value : negated) seconds -= value / runs;
    PARAPLAN_MPI_CHECK(
        "profile", "allreduce",
        MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    return seconds;
  }

  kernels::Ops& ops_;
  const CollectiveProfileRequest& request_;
  bool on_cpu_;
};

// Two buffers of the backend (device memory on a GPU), freed with it.
class MessageBuffers {
 public:
  MessageBuffers(kernels::Ops& ops, size_t bytes)
      : ops_(ops), send_(ops.allocate(bytes)), receive_(ops.allocate(bytes)) {
    ops.zero_bytes(send_, bytes);
    ops.zero_bytes(receive_, bytes);
  }
  ~MessageBuffers() {
    ops_.deallocate(send_);
    ops_.deallocate(receive_);
  }
  MessageBuffers(const MessageBuffers&) = delete;
  MessageBuffers& operator=(const MessageBuffers&) = delete;
  void* send() const { return send_; }
  void* receive() const { return receive_; }

 private:
  kernels::Ops& ops_;
  void* send_;
  void* receive_;
};

// The members of one measured group as an MPI communicator (the CPU timer
// reduces each call's durations over them); freed when dropped.
struct SplitComm {
  MPI_Comm comm = MPI_COMM_NULL;
  SplitComm(int color, int key) {
    PARAPLAN_MPI_CHECK("profile", "comm_split", MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm));
  }
  ~SplitComm() { MPI_Comm_free(&comm); }
  SplitComm(const SplitComm&) = delete;
  SplitComm& operator=(const SplitComm&) = delete;
};

}  // namespace

std::vector<double> collective_message_bytes(kernels::Backend backend, uint64_t largest_bytes) {
  std::vector<double> sizes;
  for (double bytes = 16 << 10; bytes <= 4 << 20; bytes *= 2) sizes.push_back(bytes);
  if (backend == kernels::Backend::kCpu) return sizes;
  const double largest = static_cast<double>(largest_bytes);
  for (double bytes = sizes.back() * 4; bytes < largest; bytes *= 4) sizes.push_back(bytes);
  if (largest > sizes.back()) sizes.push_back(largest);
  return sizes;
}

std::vector<CollectiveEntry> measure_collectives(kernels::Ops& ops,
                                                 const CollectiveProfileRequest& request) {
  int world = 1, rank = 0;
  PARAPLAN_MPI_CHECK("profile", "comm_size", MPI_Comm_size(MPI_COMM_WORLD, &world));
  PARAPLAN_MPI_CHECK("profile", "comm_rank", MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  const Transport transport = choose_transport(request.transport, ops.backend(),
                                               find_shared_devices(ops), nccl_compiled_in())
                                  .transport;
  const kernels::DType dtype = ops.storage_dtype();
  const size_t element = kernels::dtype_bytes(dtype);
  const std::vector<double> sizes = collective_message_bytes(ops.backend(), request.largest_bytes);
  const MessageBuffers buffers(ops, static_cast<size_t>(sizes.back()));
  CallTimer timer(ops, request);
  // Only the CPU timer computes between calls; beyond 64 MiB every cache is
  // long left behind.
  const auto compute_bytes = [&](int tensor_parallel) -> uint64_t {
    if (ops.backend() != kernels::Backend::kCpu) return 0;
    return std::min(
        request.compute_bytes ? request.compute_bytes(tensor_parallel) : uint64_t{8} << 20,
        uint64_t{64} << 20);
  };
  const ProfileClock clock =
      ops.backend() == kernels::Backend::kCpu ? ProfileClock::kCpu : ProfileClock::kWall;
  std::vector<CollectiveEntry> results;
  for (int group_size = 2; group_size <= world; ++group_size) {
    if (world % group_size != 0) continue;
    // The groups as a job builds them: a mesh whose tensor-parallel groups
    // are blocks of group_size ranks, with this transport's communicators.
    ProcessGroups groups =
        make_process_groups(transport, 1, world / group_size, group_size, 1, ops);
    Communicator& group = *groups.tensor;
    const SplitComm members(rank / group_size, rank);
    StandInCompute compute(compute_bytes(group_size));
    for (CollectiveOperation operation :
         {CollectiveOperation::AllReduce, CollectiveOperation::ReduceScatter,
          CollectiveOperation::AllGather}) {
      std::vector<CollectivePoint> points;
      for (double bytes : sizes) {
        const size_t count = static_cast<size_t>(bytes) / element;
        const size_t chunk = count / group_size;
        points.push_back(
            {bytes,
             timer.seconds(
                 members.comm,
                 [&] {
                   if (operation == CollectiveOperation::AllReduce)
                     group.all_reduce(buffers.receive(), count, dtype, ReduceOp::kSum);
                   else if (operation == CollectiveOperation::ReduceScatter)
                     group.reduce_scatter(buffers.send(), buffers.receive(), chunk, dtype);
                   else
                     group.all_gather(buffers.send(), buffers.receive(), chunk, dtype);
                 },
                 operation == CollectiveOperation::AllReduce ? buffers.receive() : buffers.send(),
                 (operation == CollectiveOperation::AllGather ? chunk : count) * element,
                 compute)});
      }
      results.push_back(measured_entry(operation, group_size, world, clock, std::move(points)));
    }
  }
  if (world % 2 == 0) {
    // Two pipeline stages: each rank and its neighbour in the other stage
    // exchange one message each way at once, as neighbouring stages trade an
    // activation and a gradient.
    ProcessGroups groups = make_process_groups(transport, 2, world / 2, 1, 1, ops);
    const int partner =
        groups.next_stage_rank >= 0 ? groups.next_stage_rank : groups.previous_stage_rank;
    const SplitComm pair(std::min(rank, partner), rank);
    StandInCompute compute(compute_bytes(1));
    std::vector<CollectivePoint> points;
    for (double bytes : sizes) {
      const size_t count = static_cast<size_t>(bytes) / element;
      points.push_back({bytes, timer.seconds(
                                   pair.comm,
                                   [&] {
                                     groups.peers->send_receive(buffers.send(), count, partner,
                                                                buffers.receive(), count, partner,
                                                                dtype);
                                   },
                                   buffers.send(), count * element, compute)});
    }
    results.push_back(
        measured_entry(CollectiveOperation::SendReceive, 2, world, clock, std::move(points)));
  }
  return results;
}

}  // namespace paraplan

// mpi_wait.h: how the MPI communicators wait (polling without holding a
// core) and the MPI type of an element; shared by mpi_communicator.cc and
// mpi_peer_to_peer.cc, nothing else.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "kernels/dtype.h"

namespace paraplan {

// How a rank waits for MPI. Open MPI's blocking calls poll without pause, so
// a rank waiting for a stalled peer holds a core (or, oversubscribed, a share
// of one) for as long as the stall lasts. Here the operations are started
// non-blocking and polled (MPI progresses only inside MPI calls): for the
// first kSpinFor, where healthy waits end, yielding the core between polls
// (a rank that shares its core with others lets them compute; alone on its
// core it polls back to back), then sleeping between polls for 1/64 of the
// time waited so far, at most kLongestNap. A late message costs at most about
// 1.6% more than the wait itself, and a rank that waits seconds polls a
// thousand times a second instead of spinning. The same kSpinFor where ranks
// outnumber cores: there a sleeping rank wakes late to each of a
// tensor-parallel step's many short waits, and polling 0.25 ms instead of 2
// made tp4 on 2 cores 13% slower (6 alternating pairs; pp2 x dp2 and dp4
// within 2%, pp4 within 3% either way in two sets of pairs).
inline constexpr auto kSpinFor = std::chrono::microseconds(2000);
inline constexpr auto kLongestNap = std::chrono::microseconds(1000);

// Calls test(&done) until done or an error; returns MPI's status code.
template <typename Test>
inline int wait_patiently(Test test) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  while (true) {
    int done = 0;
    const int status = test(&done);
    if (status != MPI_SUCCESS || done) return status;
    const Clock::duration waited = Clock::now() - start;
    if (waited > kSpinFor)
      std::this_thread::sleep_for(std::min<Clock::duration>(kLongestNap, waited / 64));
    else
      std::this_thread::yield();
  }
}

// The status of a non-blocking call that was started with `started` (its
// error, if it failed to start), waited for patiently.
inline int complete(int started, MPI_Request* request) {
  if (started != MPI_SUCCESS) return started;
  return wait_patiently(
      [request](int* done) { return MPI_Test(request, done, MPI_STATUS_IGNORE); });
}

// The MPI type an element of dtype travels as: bf16 as its 16 bits, so counts
// stay in elements (a byte count would overflow MPI's int twice as soon).
inline MPI_Datatype mpi_element_type(kernels::DType dtype) {
  return dtype == kernels::DType::kBFloat16 ? MPI_UINT16_T : MPI_FLOAT;
}

}  // namespace paraplan

// local_communicator.h: the groups of a one-process job. Every group has one
// member, so collectives are copies or nothing; a run without mpirun uses
// these and needs no MPI at all.
#pragma once

#include "kernels/ops.h"
#include "runtime/communicator.h"

namespace paraplan {

// All groups of a world of one rank (mesh 1 x 1 x 1). Copies between distinct
// buffers go through ops, so they work on any backend's memory.
ProcessGroups make_local_process_groups(kernels::Ops& ops);

}  // namespace paraplan

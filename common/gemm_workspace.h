// gemm_workspace.h: the device memory the CUDA backend's GEMM lanes hold for
// cuBLAS and cuBLASLt (kernels/cuda/cuda_gemm_lane.cuh): one workspace per
// lane, llm.c's size (enough for every split-K configuration); one lane on
// the ops' stream and one on the stream that runs the weight gradients
// beside the backward. The one place the figure lives: the planner counts
// it on GPU cluster presets (planner/cost/model_counts.h
// gemm_workspace_bytes), as the memory tracker measures it
// (Ops::internal_bytes). It over-counts a run with PARAPLAN_CUDA_OVERLAP=0
// (one lane), the safe side.
#pragma once

#include <cstdint>

namespace paraplan {

inline constexpr int64_t kGemmLaneWorkspaceBytes = int64_t{32} << 20;
inline constexpr int kGemmLanes = 2;

}  // namespace paraplan

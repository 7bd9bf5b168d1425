// call_recorder_test.cc: replay's recording communicator times a device's
// collectives between synchronizations, and only while recording.
#include "runtime/measure/call_recorder.h"

#include <gtest/gtest.h>

#include "kernels/sync_counting_ops.h"
#include "runtime/comm/local_communicator.h"

namespace paraplan {
namespace {

TEST(RecordingCommunicator, SynchronizesTheDeviceAroundEachRecordedCall) {
  kernels::SyncCountingOps device(kernels::make_cpu_ops(1, kernels::DType::kFloat32));
  std::unique_ptr<Communicator> group = std::make_unique<LocalCommunicator>("tensor", device);
  double seconds = 0, cpu_seconds = 0;
  bool recording = false;
  RecordingCommunicator* recorder =
      record_communicator(group, {&seconds, &cpu_seconds, &recording, &device});
  float values[4] = {1, 2, 3, 4};
  group->all_reduce(values, 4, kernels::DType::kFloat32, ReduceOp::kSum);
  // Warm-up steps run as training does: no synchronization added.
  EXPECT_EQ(device.synchronizations(), 0u);
  recording = true;
  group->all_reduce(values, 4, kernels::DType::kFloat32, ReduceOp::kSum);
  group->all_gather(values, values, 4, kernels::DType::kFloat32);
  // Before each call (the compute queued earlier is not its time) and after
  // it (NCCL returns once the call is queued).
  EXPECT_EQ(device.synchronizations(), 4u);
  // One member: each recorded call is all transfer (no peer to wait for).
  const TransferAndWait split = recorder->split_recorded_calls();
  EXPECT_GT(split.transfer, 0.0);
  EXPECT_DOUBLE_EQ(split.wait, 0.0);
}

TEST(RecordingCommunicator, LeavesTheCpuBackendUnsynchronized) {
  kernels::SyncCountingOps cpu(kernels::make_cpu_ops(1, kernels::DType::kFloat32));
  std::unique_ptr<Communicator> group = std::make_unique<LocalCommunicator>("data", cpu);
  double seconds = 0, cpu_seconds = 0;
  bool recording = true;
  record_communicator(group, {&seconds, &cpu_seconds, &recording});
  float values[2] = {1, 2};
  group->all_reduce(values, 2, kernels::DType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(cpu.synchronizations(), 0u);
  EXPECT_GE(seconds, 0.0);
}

}  // namespace
}  // namespace paraplan

// communicator_memory_test.cc: NCCL's buffers per communicator and per rank
// by hand (defaults and the NCCL_* overrides, a node of 8 H100s at tp 8, 64
// H100s for a 70B plan), refusals of bad variables. The plans' side is
// planner/communicator_buffers_test.cc.
#include "planner/cost/communicator_memory.h"

#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace paraplan {
namespace {

constexpr int64_t kConnection = 524288 + 4915200 + 4194304;  // LL + LL128 + SIMPLE
constexpr int64_t kNvlsPerHead = 16 * 2 * 131072 * 8;        // channels x 2 x chunk x steps

EnvironmentLookup variables(std::map<std::string, std::string> values) {
  return [values = std::move(values)](const char* name) -> const char* {
    const auto found = values.find(name);
    return found == values.end() ? nullptr : found->second.c_str();
  };
}

schema::CommunicatorMesh mesh_of(int pp, int dp, int tp, int cp = 1, int zero_groups = 1,
                                 int zero_stage = 0) {
  schema::CommunicatorMesh mesh;
  mesh.pipeline = pp, mesh.data = dp, mesh.tensor = tp, mesh.context = cp;
  mesh.zero_groups = zero_groups;
  mesh.zero_stage = zero_stage;
  return mesh;
}

int64_t bytes_of(const std::vector<CommunicatorBuffers>& all, const std::string& name) {
  for (const CommunicatorBuffers& buffers : all)
    if (buffers.name == name) return buffers.bytes;
  ADD_FAILURE() << "no communicator " << name;
  return -1;
}

int64_t sum_of(const std::vector<CommunicatorBuffers>& all) {
  int64_t sum = 0;
  for (const CommunicatorBuffers& buffers : all) sum += buffers.bytes;
  return sum;
}

TEST(CommunicatorMemory, NcclDefaultsWithoutVariables) {
  const NcclSettings settings = nccl_settings(variables({}));
  EXPECT_EQ(settings.ll_buffer_bytes, 524288);       // 8 x 512 x 8 x 16
  EXPECT_EQ(settings.ll128_buffer_bytes, 4915200);   // 120 x 640 x 8 x 8
  EXPECT_EQ(settings.simple_buffer_bytes, 4194304);  // 4 MiB
  EXPECT_EQ(settings.connection_bytes(), 9633792);
  EXPECT_TRUE(settings.runtime_connect);
}

TEST(CommunicatorMemory, TensorParallelEightOnOneH100Node) {
  // Llama 3 8B on 8 H100s at tp 8: world (the gradient norm's all-reduce:
  // one ring of 32 channels), tensor (8 on the node: 32 ring channels and
  // NVLS with 8 heads), data, zero, zero_replicas of one rank (nothing to
  // connect).
  const auto all = communicator_buffers(nccl_device_defaults("h100-sxm"),
                                        nccl_settings(variables({})), {1, 8}, mesh_of(1, 1, 8), 3);
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(bytes_of(all, "world"), 32 * kConnection);                      // 308,281,344
  EXPECT_EQ(bytes_of(all, "tensor"), 32 * kConnection + 8 * kNvlsPerHead);  // 576,716,800
  EXPECT_EQ(bytes_of(all, "tensor"), 576716800);
  EXPECT_EQ(bytes_of(all, "data") + bytes_of(all, "zero") + bytes_of(all, "zero_replicas"), 0);
  // On A100s: 24 channels, no NVLS (tensor and world).
  EXPECT_EQ(sum_of(communicator_buffers(nccl_device_defaults("a100-80g"),
                                        nccl_settings(variables({})), {1, 8}, mesh_of(1, 1, 8), 0)),
            2 * 24 * kConnection);
  // The CPU backend: MPI, no NCCL.
  EXPECT_EQ(stage_communicator_buffer_bytes(nccl_device_defaults("cpu"),
                                            nccl_settings(variables({})), {1, 8}, mesh_of(1, 1, 8)),
            std::vector<int64_t>{0});
}

TEST(CommunicatorMemory, VariablesOverrideTheDefaults) {
  const NcclSettings settings = nccl_settings(variables({{"NCCL_BUFFSIZE", "1048576"},
                                                         {"NCCL_LL128_BUFFSIZE", "0x100000"},
                                                         {"NCCL_MAX_NCHANNELS", "8"},
                                                         {"NCCL_NVLS_ENABLE", "0"}}));
  EXPECT_EQ(settings.connection_bytes(), 524288 + 1048576 + 1048576);
  const auto all =
      communicator_buffers(nccl_device_defaults("h100-sxm"), settings, {1, 8}, mesh_of(1, 1, 8), 0);
  EXPECT_EQ(bytes_of(all, "tensor"), 8 * int64_t{524288 + 1048576 + 1048576});  // 20,971,520
  // A minimum above the device's channels raises them (NCCL copies channels).
  const NcclSettings more = nccl_settings(variables({{"NCCL_MIN_NCHANNELS", "48"}}));
  EXPECT_EQ(bytes_of(communicator_buffers(nccl_device_defaults("a100-80g"), more, {1, 8},
                                          mesh_of(1, 1, 8), 0),
                     "tensor"),
            48 * kConnection);
  // NVLS channels and chunk.
  const NcclSettings nvls =
      nccl_settings(variables({{"NCCL_NVLS_NCHANNELS", "8"}, {"NCCL_NVLS_CHUNKSIZE", "65536"}}));
  EXPECT_EQ(bytes_of(communicator_buffers(nccl_device_defaults("h200"), nvls, {1, 8},
                                          mesh_of(1, 1, 8), 0),
                     "tensor"),
            32 * kConnection + int64_t{8} * 2 * 65536 * 8 * 8);
  // Connecting at init: the world's ring too.
  const NcclSettings at_init = nccl_settings(variables({{"NCCL_RUNTIME_CONNECT", "0"}}));
  EXPECT_EQ(bytes_of(communicator_buffers(nccl_device_defaults("h100-sxm"), at_init, {1, 8},
                                          mesh_of(1, 1, 8), 0),
                     "world"),
            32 * kConnection + 8 * kNvlsPerHead);
}

TEST(CommunicatorMemory, BadVariablesAreRefusedByName) {
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"NCCL_BUFFSIZE", "4MB"},
                                                        {"NCCL_BUFFSIZE", "-1"},
                                                        {"NCCL_LL_BUFFSIZE", "0"},
                                                        {"NCCL_MAX_NCHANNELS", "many"},
                                                        {"NCCL_NVLS_ENABLE", "3"},
                                                        {"NCCL_RUNTIME_CONNECT", "yes"}}) {
    try {
      nccl_settings(variables({{name, value}}));
      ADD_FAILURE() << name << "=" << value << " was accepted";
    } catch (const std::invalid_argument& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(name + "='" + value + "'"), std::string::npos) << message;
      EXPECT_NE(message.find("not valid"), std::string::npos) << message;
    }
  }
  // Empty is unset, as NCCL reads it.
  EXPECT_EQ(nccl_settings(variables({{"NCCL_BUFFSIZE", ""}})).simple_buffer_bytes, 4194304);
}

TEST(CommunicatorMemory, PipelineLinksOnTheReceivingRank) {
  const NcclDeviceDefaults h100 = nccl_device_defaults("h100-sxm");
  const NcclSettings settings = nccl_settings(variables({}));
  // pp 8 on one node: a middle rank receives on two links (32 p2p channels
  // each); pp 2: on one; the embedding group joins the first and the last;
  // and every rank the world's ring (32 channels in a node, 16 across).
  const auto middle = communicator_buffers(h100, settings, {1, 8}, mesh_of(8, 1, 1), 3);
  EXPECT_EQ(bytes_of(middle, "world"), 32 * kConnection);
  EXPECT_EQ(sum_of(middle), 2 * 32 * kConnection + 32 * kConnection);
  const auto first = communicator_buffers(h100, settings, {1, 8}, mesh_of(8, 1, 1), 0);
  EXPECT_EQ(bytes_of(first, "embedding"), 32 * kConnection + 2 * kNvlsPerHead);
  EXPECT_EQ(sum_of(first), 3 * 32 * kConnection + bytes_of(first, "embedding"));
  EXPECT_EQ(
      sum_of(communicator_buffers(h100, settings, {1, 2}, mesh_of(2, 1, 1), 1)),
      2 * 32 * kConnection +
          bytes_of(communicator_buffers(h100, settings, {1, 2}, mesh_of(2, 1, 1), 1), "embedding"));
  // Across nodes: 2 channels x 8 steps x 128 KiB per receiving link.
  EXPECT_EQ(sum_of(communicator_buffers(h100, settings, {4, 1}, mesh_of(4, 1, 1), 1)),
            2 * int64_t{2} * 8 * 131072 + 16 * kConnection);
}

// stage_communicator_buffer_bytes works out each stage's first rank once per
// mesh, and copies the middle stages where stages fill whole nodes: every
// stage as its rank's communicators, on a grid of meshes and node sizes.
TEST(CommunicatorMemory, StageBytesAreEachStageFirstRanks) {
  const NcclDeviceDefaults h100 = nccl_device_defaults("h100-sxm");
  for (const bool runtime_connect : {true, false}) {
    const NcclSettings settings =
        nccl_settings(variables({{"NCCL_RUNTIME_CONNECT", runtime_connect ? "1" : "0"}}));
    for (const int devices_per_node : {2, 4, 8})
      for (const int pp : {1, 2, 3, 5})
        for (const int dp : {1, 2, 3})
          for (const int tp : {1, 2, 4})
            for (const int zero_stage : {0, 1, 3}) {
              const schema::CommunicatorMesh mesh = mesh_of(pp, dp, tp, 1, 1, zero_stage);
              const int world = mesh.world_size();
              const DeviceLayout layout{(world + devices_per_node - 1) / devices_per_node,
                                        devices_per_node};
              const std::vector<int64_t> stages =
                  stage_communicator_buffer_bytes(h100, settings, layout, mesh);
              ASSERT_EQ(stages.size(), static_cast<size_t>(pp));
              for (int s = 0; s < pp; ++s)
                EXPECT_EQ(stages[s],
                          sum_of(communicator_buffers(h100, settings, layout, mesh, s * dp * tp)))
                    << "pp " << pp << " dp " << dp << " tp " << tp << " node " << devices_per_node
                    << " stage " << s;
            }
  }
}

TEST(CommunicatorMemory, SeventyBillionOnSixtyFourH100s) {
  // tp 8 x dp 2 x pp 4, ZeRO-1: stage 0's first rank (rank 0). Its tensor
  // group is its node; zero (ranks 0 and 8) and embedding (0 and 48) span
  // two nodes (16 channels, no NVLS); the data group (the same ranks) is
  // never reduced over under ZeRO, so never connected; its ring neighbours
  // 16 and 48 are on other nodes.
  const NcclSettings defaults = nccl_settings(variables({}));
  const auto all = communicator_buffers(nccl_device_defaults("h100-sxm"), defaults, {8, 8},
                                        mesh_of(4, 2, 8, 1, 1, 1), 0);
  EXPECT_EQ(bytes_of(all, "tensor"), 576716800);
  EXPECT_EQ(bytes_of(all, "data"), 0);
  EXPECT_EQ(bytes_of(all, "zero"), 16 * kConnection);  // 154,140,672
  EXPECT_EQ(bytes_of(all, "zero_replicas"), 0);
  EXPECT_EQ(bytes_of(all, "embedding"), 16 * kConnection);
  EXPECT_EQ(bytes_of(all, "world"), 16 * kConnection);  // 64 ranks over 8 nodes
  EXPECT_EQ(sum_of(all),
            576716800 + 3 * 16 * kConnection + 2 * 2 * 8 * 131072);  // 1,043,333,120
  // Without ZeRO the data group carries the reduction and zero is idle.
  const auto plain =
      communicator_buffers(nccl_device_defaults("h100-sxm"), defaults, {8, 8}, mesh_of(4, 2, 8), 0);
  EXPECT_EQ(bytes_of(plain, "data"), 16 * kConnection);
  EXPECT_EQ(bytes_of(plain, "zero"), 0);
  EXPECT_EQ(sum_of(plain), sum_of(all));
  // NCCL_RUNTIME_CONNECT=0 connects every group at init: both count.
  const auto at_init = communicator_buffers(
      nccl_device_defaults("h100-sxm"), nccl_settings(variables({{"NCCL_RUNTIME_CONNECT", "0"}})),
      {8, 8}, mesh_of(4, 2, 8, 1, 1, 1), 0);
  EXPECT_EQ(bytes_of(at_init, "data"), 16 * kConnection);
  // A middle stage's rank: no embedding group.
  const std::vector<int64_t> stages = stage_communicator_buffer_bytes(
      nccl_device_defaults("h100-sxm"), defaults, {8, 8}, mesh_of(4, 2, 8, 1, 1, 1));
  ASSERT_EQ(stages.size(), 4u);
  EXPECT_EQ(stages[0], sum_of(all));
  EXPECT_EQ(stages[1], 576716800 + 2 * 16 * kConnection + 2 * 2 * 8 * 131072);
}

}  // namespace
}  // namespace paraplan

// transport_test.cc: the transport choice (every branch of choose_transport,
// its reasons and its errors) and the description of ranks sharing a device.
// Pure functions: no MPI, no GPU.
#include "runtime/comm/transport.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace paraplan {
namespace {

using kernels::Backend;

const DeviceSharing kNoSharing{};
const DeviceSharing kFourOnOneGpu{true, "4 ranks share GPU 0000:1b:00.0 on host x"};

// The message of the std::invalid_argument choose_transport throws, or a
// failure if it throws nothing.
std::string refusal(const std::string& requested, Backend backend, const DeviceSharing& sharing,
                    bool nccl) {
  try {
    const TransportChoice choice = choose_transport(requested, backend, sharing, nccl);
    ADD_FAILURE() << "'" << requested << "' was accepted: " << choice.reason;
  } catch (const std::invalid_argument& error) {
    return error.what();
  }
  return "";
}

TEST(TransportName, NamesEveryTransport) {
  EXPECT_STREQ(transport_name(Transport::kMpi), "mpi");
  EXPECT_STREQ(transport_name(Transport::kNccl), "nccl");
  EXPECT_STREQ(transport_name(Transport::kStaged), "staged");
}

TEST(ChooseTransport, RefusesAnUnknownName) {
  for (const Backend backend : {Backend::kCpu, Backend::kCuda}) {
    EXPECT_EQ(refusal("gloo", backend, kNoSharing, true),
              "--transport: unknown transport 'gloo'; valid: auto, mpi, nccl, staged");
    EXPECT_EQ(refusal("", backend, kNoSharing, false),
              "--transport: unknown transport ''; valid: auto, mpi, nccl, staged");
  }
}

// ---- the CPU backend: host buffers --------------------------------------------

TEST(ChooseTransport, CpuAutoKeepsPlainMpi) {
  for (const bool nccl : {false, true}) {
    // Sharing never matters to host buffers.
    for (const DeviceSharing& sharing : {kNoSharing, kFourOnOneGpu}) {
      const TransportChoice choice = choose_transport("auto", Backend::kCpu, sharing, nccl);
      EXPECT_EQ(choice.transport, Transport::kMpi);
      EXPECT_EQ(choice.reason, "plain MPI on host buffers (CPU backend)");
    }
  }
}

TEST(ChooseTransport, CpuMpiWhenRequested) {
  const TransportChoice choice = choose_transport("mpi", Backend::kCpu, kNoSharing, true);
  EXPECT_EQ(choice.transport, Transport::kMpi);
  EXPECT_EQ(choice.reason, "plain MPI on host buffers (requested)");
}

TEST(ChooseTransport, CpuStagedWhenRequestedSaysItOnlyAddsCopies) {
  const TransportChoice choice = choose_transport("staged", Backend::kCpu, kNoSharing, false);
  EXPECT_EQ(choice.transport, Transport::kStaged);
  EXPECT_EQ(choice.reason,
            "staged MPI through host staging buffers (requested; the CPU backend's buffers are "
            "host memory already, so this only adds copies)");
}

TEST(ChooseTransport, CpuRefusesNccl) {
  for (const bool nccl : {false, true}) {
    EXPECT_EQ(refusal("nccl", Backend::kCpu, kNoSharing, nccl),
              "--transport nccl needs --backend cuda: NCCL moves device buffers and the CPU "
              "backend has none; use --transport auto (or mpi) with --backend cpu");
  }
}

// ---- the CUDA backend: device buffers -----------------------------------------

TEST(ChooseTransport, CudaAutoPicksNcclWithOneGpuPerRank) {
  const TransportChoice choice = choose_transport("auto", Backend::kCuda, kNoSharing, true);
  EXPECT_EQ(choice.transport, Transport::kNccl);
  EXPECT_EQ(choice.reason, "NCCL on device buffers (one GPU per rank)");
}

TEST(ChooseTransport, CudaAutoStagesWhenRanksShareAGpu) {
  for (const bool nccl : {true, false}) {  // sharing is the reason either way
    const TransportChoice choice = choose_transport("auto", Backend::kCuda, kFourOnOneGpu, nccl);
    EXPECT_EQ(choice.transport, Transport::kStaged);
    EXPECT_EQ(choice.reason,
              "staged MPI through pinned host memory (4 ranks share GPU 0000:1b:00.0 on host x; "
              "NCCL needs one GPU per rank)");
  }
}

TEST(ChooseTransport, CudaAutoStagesWithoutNccl) {
  const TransportChoice choice = choose_transport("auto", Backend::kCuda, kNoSharing, false);
  EXPECT_EQ(choice.transport, Transport::kStaged);
  EXPECT_EQ(choice.reason,
            "staged MPI through pinned host memory (this paraplan was built without NCCL)");
}

TEST(ChooseTransport, CudaNcclWhenRequestedAndPossible) {
  const TransportChoice choice = choose_transport("nccl", Backend::kCuda, kNoSharing, true);
  EXPECT_EQ(choice.transport, Transport::kNccl);
  EXPECT_EQ(choice.reason, "NCCL on device buffers (requested)");
}

TEST(ChooseTransport, CudaNcclRefusedWithoutNccl) {
  for (const DeviceSharing& sharing : {kNoSharing, kFourOnOneGpu}) {
    EXPECT_EQ(refusal("nccl", Backend::kCuda, sharing, false),
              "--transport nccl: this paraplan was built without NCCL (nccl.h and libnccl were "
              "not found at configure time); use --transport staged (or auto), or rebuild with "
              "NCCL installed");
  }
}

TEST(ChooseTransport, CudaNcclRefusedOnASharedGpuNamingTheFix) {
  EXPECT_EQ(refusal("nccl", Backend::kCuda, kFourOnOneGpu, true),
            "--transport nccl: 4 ranks share GPU 0000:1b:00.0 on host x, and NCCL needs one GPU "
            "per rank; start at most one rank per GPU, or use --transport staged (or auto), "
            "which stages through pinned host memory");
}

TEST(ChooseTransport, CudaStagedWhenRequested) {
  for (const bool nccl : {false, true}) {
    for (const DeviceSharing& sharing : {kNoSharing, kFourOnOneGpu}) {
      const TransportChoice choice = choose_transport("staged", Backend::kCuda, sharing, nccl);
      EXPECT_EQ(choice.transport, Transport::kStaged);
      EXPECT_EQ(choice.reason, "staged MPI through pinned host memory (requested)");
    }
  }
}

TEST(ChooseTransport, CudaRefusesPlainMpi) {
  EXPECT_EQ(refusal("mpi", Backend::kCuda, kNoSharing, true),
            "--transport mpi cannot move --backend cuda buffers: plain MPI takes host memory and "
            "these are device memory; use --transport auto, nccl or staged");
}

TEST(NcclCompiledIn, MatchesTheBuild) {
#ifdef PARAPLAN_HAVE_NCCL
  EXPECT_TRUE(nccl_compiled_in());
#else
  EXPECT_FALSE(nccl_compiled_in());
#endif
}

// ---- ranks sharing a device ---------------------------------------------------

TEST(DescribeDeviceSharing, CpuRanksNeverShare) {
  EXPECT_FALSE(describe_device_sharing({}).shared);
  const DeviceSharing sharing = describe_device_sharing({{"x", ""}, {"x", ""}, {"x", ""}});
  EXPECT_FALSE(sharing.shared);
  EXPECT_EQ(sharing.detail, "");
}

TEST(DescribeDeviceSharing, OneGpuPerRankIsNotSharing) {
  EXPECT_FALSE(
      describe_device_sharing({{"x", "0000:1b:00.0"}, {"x", "0000:2c:00.0"}, {"y", "0000:1b:00.0"}})
          .shared)
      << "the same bus id on two hosts is two GPUs";
}

TEST(DescribeDeviceSharing, OneHostNameOnTwoMachinesIsTwoMachines) {
  // Cloned VMs or containers with one --hostname: ranks 0-1 and 2-3.
  EXPECT_FALSE(describe_device_sharing({{"vm", "0000:1b:00.0", 0},
                                        {"vm", "0000:2c:00.0", 0},
                                        {"vm", "0000:1b:00.0", 2},
                                        {"vm", "0000:2c:00.0", 2}})
                   .shared);
}

TEST(DescribeDeviceSharing, NamesTheSharedGpuAndItsHost) {
  const DeviceSharing sharing = describe_device_sharing(
      {{"x", "0000:1b:00.0"}, {"x", "0000:1b:00.0"}, {"x", "0000:1b:00.0"}, {"x", "0000:1b:00.0"}});
  EXPECT_TRUE(sharing.shared);
  EXPECT_EQ(sharing.detail, "4 ranks share GPU 0000:1b:00.0 on host x");
}

TEST(DescribeDeviceSharing, NamesTheBusiestGpuAndCountsTheOthers) {
  const std::vector<RankDevice> devices = {{"x", "A"}, {"x", "A"}, {"x", "B"}, {"x", "B"},
                                           {"x", "B"}, {"y", "A"}, {"y", "A"}, {"z", "C"}};
  EXPECT_EQ(describe_device_sharing(devices).detail,
            "3 ranks share GPU B on host x (and 2 more shared GPUs)");
  EXPECT_EQ(describe_device_sharing({{"x", "A"}, {"x", "A"}, {"x", "B"}, {"x", "B"}}).detail,
            "2 ranks share GPU A on host x (and 1 more shared GPU)")
      << "a tie names the GPU of the lowest rank";
}

}  // namespace
}  // namespace paraplan

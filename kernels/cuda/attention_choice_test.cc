// attention_choice_test.cc: the host rules of the CUDA backend's attention
// choice (attention_choice.h), run on the CPU in every build: the
// PARAPLAN_CUDA_ATTENTION values, the graph cache's shape key, which shapes
// go to cuDNN, the chooser's fallback (cuDNN probed at most once, its absence
// said in one line, never fatal under auto, fatal under cudnn), and the
// workspace formula the planner counts (common/attention_workspace.h).
#include "kernels/cuda/attention_choice.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/attention_workspace.h"

namespace paraplan::kernels::cuda {
namespace {

constexpr AttentionShapeKey kGpt2{8, 1024, 12, 12, 64, DType::kBFloat16};
constexpr AttentionShapeKey kLlama{1, 2048, 32, 8, 128, DType::kBFloat16};

TEST(AttentionChoice, ParsesTheSetting) {
  EXPECT_EQ(parse_attention_setting(nullptr), AttentionSetting::kAuto);
  EXPECT_EQ(parse_attention_setting(""), AttentionSetting::kAuto);
  EXPECT_EQ(parse_attention_setting("auto"), AttentionSetting::kAuto);
  EXPECT_EQ(parse_attention_setting("own"), AttentionSetting::kOwn);
  EXPECT_EQ(parse_attention_setting("fma"), AttentionSetting::kFma);
  EXPECT_EQ(parse_attention_setting("cudnn"), AttentionSetting::kCudnn);
  for (const AttentionSetting setting : {AttentionSetting::kAuto, AttentionSetting::kOwn,
                                         AttentionSetting::kFma, AttentionSetting::kCudnn}) {
    EXPECT_EQ(parse_attention_setting(attention_setting_name(setting)), setting);
  }
  try {
    parse_attention_setting("tensor");
    FAIL() << "'tensor' was accepted";
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("PARAPLAN_CUDA_ATTENTION='tensor'"), std::string::npos) << message;
    for (const char* value : {"auto", "own", "fma", "cudnn"})
      EXPECT_NE(message.find(value), std::string::npos) << message;
  }
  EXPECT_THROW(parse_attention_setting("CUDNN"), std::runtime_error);
}

TEST(AttentionChoice, ShapeKeyTellsEveryFieldApart) {
  std::unordered_set<AttentionShapeKey, AttentionShapeKeyHash> keys{kGpt2};
  EXPECT_EQ(keys.count(AttentionShapeKey{8, 1024, 12, 12, 64, DType::kBFloat16}), 1u);
  std::vector<AttentionShapeKey> variants(6, kGpt2);
  variants[0].batch = 4;
  variants[1].seq_len = 512;
  variants[2].heads = 16;
  variants[3].kv_heads = 4;
  variants[4].head_dim = 128;
  variants[5].storage = DType::kFloat32;
  for (const AttentionShapeKey& variant : variants) {
    EXPECT_FALSE(variant == kGpt2) << describe(variant);
    EXPECT_EQ(keys.count(variant), 0u) << describe(variant);
    keys.insert(variant);
  }
  EXPECT_EQ(keys.size(), 7u);
  EXPECT_EQ(describe(kGpt2), "B=8 T=1024 H=12 Hkv=12 D=64 bfloat16");
}

TEST(AttentionChoice, CudnnServesBf16WithHeadDim64Or128) {
  EXPECT_TRUE(cudnn_sdpa_supports(kGpt2));
  EXPECT_TRUE(cudnn_sdpa_supports(kLlama));
  AttentionShapeKey shape = kGpt2;
  shape.storage = DType::kFloat32;  // fp32 stays on the own kernels
  EXPECT_FALSE(cudnn_sdpa_supports(shape));
  for (const int head_dim : {16, 32, 80, 96, 256}) {
    shape = kGpt2;
    shape.head_dim = head_dim;
    EXPECT_FALSE(cudnn_sdpa_supports(shape)) << head_dim;
  }
  shape = kGpt2;
  shape.kv_heads = 5;  // does not divide 12
  EXPECT_FALSE(cudnn_sdpa_supports(shape));
  shape = kGpt2;
  shape.batch = 0;
  EXPECT_FALSE(cudnn_sdpa_supports(shape));
  shape = kGpt2;
  shape.seq_len = 1;  // cuDNN's backward refuses one token
  EXPECT_FALSE(cudnn_sdpa_supports(shape));
  shape.seq_len = 2;
  EXPECT_TRUE(cudnn_sdpa_supports(shape));
}

// A chooser whose probe and notices are counted.
struct Recorder {
  int probes = 0;
  std::vector<std::string> notices;
  CudnnAvailability availability;
  AttentionChooser make(AttentionSetting setting) {
    return AttentionChooser(
        setting,
        [this] {
          ++probes;
          return availability;
        },
        [this](const std::string& line) { notices.push_back(line); });
  }
};

TEST(AttentionChoice, AutoFallsBackOnceWithOneLineWhenCudnnIsMissing) {
  Recorder recorder;
  recorder.availability = {false, "libcudnn.so.9 not found"};
  AttentionChooser chooser = recorder.make(AttentionSetting::kAuto);
  EXPECT_EQ(recorder.probes, 0);  // nothing loads before a shape cuDNN serves comes
  AttentionShapeKey fp32 = kGpt2;
  fp32.storage = DType::kFloat32;
  EXPECT_EQ(chooser.choose(fp32), AttentionKernels::kOwn);
  EXPECT_EQ(recorder.probes, 0);
  for (int call = 0; call < 5; ++call) {
    EXPECT_EQ(chooser.choose(kGpt2), AttentionKernels::kOwn);
    EXPECT_EQ(chooser.choose(kLlama), AttentionKernels::kOwn);
  }
  EXPECT_EQ(recorder.probes, 1);
  ASSERT_EQ(recorder.notices.size(), 1u);
  EXPECT_EQ(recorder.notices[0], cudnn_fallback_notice("libcudnn.so.9 not found"));
  EXPECT_EQ(recorder.notices[0],
            "attention: paraplan's own kernels (cuDNN's SDPA is not used: libcudnn.so.9 not "
            "found)");
  EXPECT_EQ(recorder.notices[0].find('\n'), std::string::npos);
  EXPECT_TRUE(chooser.tensor_cores());
}

TEST(AttentionChoice, AutoUsesCudnnForTheShapesItServes) {
  Recorder recorder;
  recorder.availability = {true, "cuDNN 9.19.0 (libcudnn.so.9)"};
  AttentionChooser chooser = recorder.make(AttentionSetting::kAuto);
  EXPECT_EQ(chooser.choose(kGpt2), AttentionKernels::kCudnn);
  EXPECT_EQ(chooser.choose(kLlama), AttentionKernels::kCudnn);
  AttentionShapeKey other = kGpt2;
  other.head_dim = 32;
  EXPECT_EQ(chooser.choose(other), AttentionKernels::kOwn);
  EXPECT_EQ(recorder.probes, 1);
  EXPECT_TRUE(recorder.notices.empty());
}

TEST(AttentionChoice, OwnAndFmaNeverAskForCudnn) {
  Recorder recorder;
  recorder.availability = {true, "cuDNN"};
  AttentionChooser own = recorder.make(AttentionSetting::kOwn);
  AttentionChooser fma = recorder.make(AttentionSetting::kFma);
  EXPECT_EQ(own.choose(kGpt2), AttentionKernels::kOwn);
  EXPECT_EQ(fma.choose(kLlama), AttentionKernels::kOwn);
  EXPECT_EQ(recorder.probes, 0);
  EXPECT_TRUE(recorder.notices.empty());
  EXPECT_TRUE(own.tensor_cores());
  EXPECT_FALSE(fma.tensor_cores());
}

TEST(AttentionChoice, CudnnSettingRequiresCudnn) {
  Recorder missing;
  missing.availability = {false, "libcudnn.so.9 not found"};
  try {
    missing.make(AttentionSetting::kCudnn);
    FAIL() << "PARAPLAN_CUDA_ATTENTION=cudnn without cuDNN did not throw";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("libcudnn.so.9 not found"), std::string::npos);
  }
  EXPECT_TRUE(missing.notices.empty());  // an error, not a fallback

  Recorder present;
  present.availability = {true, "cuDNN"};
  AttentionChooser chooser = present.make(AttentionSetting::kCudnn);
  EXPECT_EQ(present.probes, 1);
  EXPECT_EQ(chooser.choose(kGpt2), AttentionKernels::kCudnn);
  AttentionShapeKey fp32 = kGpt2;
  fp32.storage = DType::kFloat32;
  EXPECT_EQ(chooser.choose(fp32), AttentionKernels::kOwn);  // shapes cuDNN does not serve
  EXPECT_EQ(present.probes, 1);
}

// The formula, by hand at GPT-2's shape (common/attention_workspace.h).
TEST(AttentionChoice, CudnnWorkspaceFormula) {
  const int64_t rows = int64_t{8} * 12 * 1024;
  const int64_t expected = 4 * rows                             // softmax_sum
                           + int64_t{2} * 8 * 12 * 1024 * 1024  // dP, 16-bit
                           + 4 * rows * 64                      // fp32 dQ accumulator
                           + kCudnnSdpaForwardSlack;
  EXPECT_EQ(cudnn_sdpa_workspace_bytes(8, 1024, 12, 64, true), expected);
  EXPECT_EQ(cudnn_sdpa_workspace_bytes(8, 1024, 12, 64, false), kCudnnSdpaForwardSlack);
  // dP's queries round up to 64, its keys to 128 (the frontend's sm90
  // formula): T = 1000 takes 1024 x 1024 there, T = 1030 1088 x 1152.
  EXPECT_EQ(cudnn_sdpa_workspace_bytes(1, 1000, 1, 64, true) -
                cudnn_sdpa_workspace_bytes(1, 1000, 1, 64, false),
            4 * 1000 + 2 * 1024 * 1024 + 4 * 1000 * 64);
  EXPECT_EQ(cudnn_sdpa_workspace_bytes(1, 1030, 1, 64, true) -
                cudnn_sdpa_workspace_bytes(1, 1030, 1, 64, false),
            4 * 1030 + 2 * 1088 * 1152 + 4 * 1030 * 64);
}

}  // namespace
}  // namespace paraplan::kernels::cuda

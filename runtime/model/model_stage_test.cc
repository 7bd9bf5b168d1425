// model_stage_test.cc: every architecture's stage (GPT-2, Llama) through the
// ModelStage interface: gradients against finite differences, and the
// exactness properties the parallel runtime relies on: recomputation gives
// bitwise the same gradients, slots are independent, micro-batches add up,
// activation memory is linear in the sequence length, and bf16 tracks fp32.
#include "runtime/model/model_stage.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "runtime/model/architecture.h"

namespace paraplan {
namespace {

// The architecture of the test being run (the suites are parameterized by it).
Architecture current_architecture = Architecture::kGpt2;

TransformerConfig tiny_config() {
  TransformerConfig config;
  config.architecture = current_architecture;
  if (current_architecture == Architecture::kLlama) {
    config.num_kv_heads = 1;         // grouped-query attention: both heads share one KV head
    config.tied_embeddings = false;  // Llama's default: lm_head is its own
  }
  config.vocab_size = 11;
  config.seq_len = 5;
  config.num_layers = 2;
  config.d_model = 8;
  config.num_heads = 2;
  config.ffn_size = 12;
  config.init_std = 0.3f;  // large enough that every path carries gradient
  return config;
}

struct Fixture {
  explicit Fixture(std::vector<RecomputeMode> recompute, int batch = 2, int slots = 1,
                   TransformerConfig config = tiny_config(),
                   kernels::DType dtype = kernels::DType::kFloat32)
      : ops(kernels::make_cpu_ops(0, dtype)),
        memory(*ops),
        layout_pointer(make_parameter_layout(config, StageSpec{0, config.num_layers, true, true})),
        layout(*layout_pointer),
        stage_pointer(make_model_stage(
            layout, *ops, memory,
            ModelStageOptions{
                .micro_batch_size = batch, .num_slots = slots, .recompute = std::move(recompute)})),
        stage(*stage_pointer) {
    std::vector<float> initial(layout.num_elements());
    layout.initialize(initial.data(), 5);
    stage.load_parameters(initial.data(), initial.size());
  }
  // Tokens and targets of sample k, batch entries in order.
  void load(int slot, int first_sample, int batch) {
    const int T = layout.config().seq_len, V = layout.config().vocab_size;
    for (int b = 0; b < batch; ++b)
      for (int t = 0; t < T; ++t) {
        stage.tokens(slot)[b * T + t] = ((first_sample + b) * 7 + t * 3) % V;
        stage.targets(slot)[b * T + t] = ((first_sample + b) * 5 + t * 2 + 1) % V;
      }
  }
  double loss(int batch) {
    load(0, 0, batch);
    stage.take_loss_sum();  // drops what earlier forwards added
    stage.forward(0, 1.0f, false);
    return stage.take_loss_sum() / (batch * layout.config().seq_len);
  }
  std::vector<float> gradients(int batch) {
    const float scale = 1.0f / (batch * layout.config().seq_len);
    zero_gradients();
    load(0, 0, batch);
    stage.forward(0, scale);
    stage.backward(0);
    return current_gradients();
  }
  void zero_gradients() {
    ops->zero_bytes(stage.gradients(), ops->storage_bytes(layout.num_elements()));
  }
  // The gradient buffer, widened to fp32.
  std::vector<float> current_gradients() {
    std::vector<float> result(layout.num_elements());
    stage.read_gradients(result.data(), result.size());
    return result;
  }
  std::unique_ptr<kernels::Ops> ops;
  MemoryTracker memory;
  std::unique_ptr<ParameterLayout> layout_pointer;
  const ParameterLayout& layout;
  std::unique_ptr<ModelStage> stage_pointer;
  ModelStage& stage;
};

class Stage : public ::testing::TestWithParam<Architecture> {
 protected:
  void SetUp() override { current_architecture = GetParam(); }
};
class StageBfloat16 : public Stage {};

std::string architecture_test_name(const ::testing::TestParamInfo<Architecture>& info) {
  return architecture_name(info.param);
}
INSTANTIATE_TEST_SUITE_P(Architectures, Stage,
                         ::testing::Values(Architecture::kGpt2, Architecture::kLlama),
                         architecture_test_name);
INSTANTIATE_TEST_SUITE_P(Architectures, StageBfloat16,
                         ::testing::Values(Architecture::kGpt2, Architecture::kLlama),
                         architecture_test_name);

std::vector<RecomputeMode> modes(RecomputeMode a, RecomputeMode b) {
  return {a, b};
}

TEST_P(Stage, InitialLossIsNearUniform) {
  TransformerConfig config = tiny_config();
  config.init_std = 0.02f;
  Fixture f(modes(RecomputeMode::None, RecomputeMode::None), 2, 1, config);
  EXPECT_NEAR(f.loss(2), std::log(11.0), 0.05);
}

// Every tensor's gradient, a few elements each, against central differences.
void expect_finite_difference_gradients(Fixture& f) {
  const std::vector<float> analytic = f.gradients(2);
  float* params = static_cast<float*>(f.stage.parameters());  // fp32 storage
  // Every tensor, a few elements each; central differences in float with
  // step 1e-2 are accurate to ~1e-4 absolute on this loss scale.
  int checked = 0;
  for (const ParameterTensor& tensor : f.layout.tensors()) {
    for (size_t k = 0; k < tensor.size; k += std::max<size_t>(1, tensor.size / 5)) {
      const size_t i = tensor.offset + k;
      const float saved = params[i];
      const float h = 1e-2f;
      params[i] = saved + h;
      const double plus = f.loss(2);
      params[i] = saved - h;
      const double minus = f.loss(2);
      params[i] = saved;
      const double numeric = (plus - minus) / (2 * h);
      EXPECT_NEAR(analytic[i], numeric, 2e-4 + 2e-2 * std::fabs(numeric))
          << tensor.name << "[" << k << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 80);
}

TEST_P(Stage, GradientsMatchFiniteDifferences) {
  Fixture f(modes(RecomputeMode::None, RecomputeMode::None));
  expect_finite_difference_gradients(f);
}

// Qwen 2's q, k and v biases, set away from their zero start so that they
// shape every other gradient too.
TEST(QkvBiasStage, GradientsMatchFiniteDifferences) {
  current_architecture = Architecture::kLlama;
  TransformerConfig config = tiny_config();
  config.qkv_bias = true;
  Fixture f(modes(RecomputeMode::None, RecomputeMode::Selective), 2, 1, config);
  std::vector<float> params(f.layout.num_elements());
  f.stage.read_parameters(params.data(), params.size());
  int biases = 0;
  for (const ParameterTensor& tensor : f.layout.tensors())
    if (tensor.name.find("_proj.bias") != std::string::npos) {
      for (size_t k = 0; k < tensor.size; ++k)
        params[tensor.offset + k] = 0.3f * std::sin(static_cast<float>(7 * k + tensor.offset));
      ++biases;
    }
  EXPECT_EQ(biases, 6);  // q, k and v in each of the two blocks
  f.stage.load_parameters(params.data(), params.size());
  expect_finite_difference_gradients(f);
}

TEST_P(Stage, RecomputationGivesBitwiseTheSameGradients) {
  // 70 tokens: the CPU attention runs over two query and key tiles of 64.
  TransformerConfig long_sequence = tiny_config();
  long_sequence.seq_len = 70;
  for (const TransformerConfig& config : {tiny_config(), long_sequence}) {
    const std::vector<float> none =
        Fixture(modes(RecomputeMode::None, RecomputeMode::None), 2, 1, config).gradients(2);
    for (auto pair : {modes(RecomputeMode::Selective, RecomputeMode::Selective),
                      modes(RecomputeMode::Full, RecomputeMode::Full),
                      modes(RecomputeMode::Full, RecomputeMode::Selective),
                      modes(RecomputeMode::None, RecomputeMode::Full),
                      modes(RecomputeMode::Selective, RecomputeMode::None)}) {
      Fixture f(pair, 2, 1, config);
      EXPECT_EQ(f.gradients(2), none)
          << "modes " << int(pair[0]) << "," << int(pair[1]) << " seq_len " << config.seq_len;
    }
  }
}

TEST_P(Stage, RecomputationKeepsLessActivationMemory) {
  const uint64_t none = Fixture(modes(RecomputeMode::None, RecomputeMode::None), 2, 4)
                            .memory.peak(MemoryCategory::kActivations);
  const uint64_t selective =
      Fixture(modes(RecomputeMode::Selective, RecomputeMode::Selective), 2, 4)
          .memory.peak(MemoryCategory::kActivations);
  const uint64_t full = Fixture(modes(RecomputeMode::Full, RecomputeMode::Full), 2, 4)
                            .memory.peak(MemoryCategory::kActivations);
  EXPECT_LT(selective, none);
  EXPECT_LT(full, selective);
}

TEST_P(Stage, ActivationMemoryIsLinearInTheSequenceLength) {
  // The fused attention keeps no [B, H, T, T] tensor, in any mode and in no
  // scratch: the kept activations and the workspace are affine in T (a
  // constant part, the loss accumulator, aside), so T -> 2T adds exactly what
  // 2T -> 3T adds, and doubling T doubles the activations.
  for (RecomputeMode mode : {RecomputeMode::None, RecomputeMode::Selective, RecomputeMode::Full}) {
    uint64_t peaks[3][2];
    for (int times = 1; times <= 3; ++times) {
      TransformerConfig config = tiny_config();
      config.seq_len *= times;
      const Fixture fixture(modes(mode, mode), 2, 3, config);
      peaks[times - 1][0] = fixture.memory.peak(MemoryCategory::kActivations);
      peaks[times - 1][1] = fixture.memory.peak(MemoryCategory::kWorkspace);
    }
    for (int category = 0; category < 2; ++category)
      EXPECT_EQ(peaks[2][category] - peaks[1][category], peaks[1][category] - peaks[0][category])
          << "mode " << int(mode) << (category == 0 ? " activations" : " workspace");
    EXPECT_EQ(peaks[1][0], 2 * peaks[0][0]) << "mode " << int(mode);
  }
}

TEST_P(Stage, SlotsInFlightAreIndependent) {
  // Two micro-batches forwarded before either is backwarded (as 1F1B does)
  // give bitwise the gradients of running them one after the other.
  for (auto recompute : {RecomputeMode::None, RecomputeMode::Selective, RecomputeMode::Full}) {
    Fixture sequential(modes(recompute, recompute), 1, 1);
    sequential.zero_gradients();
    for (int mb = 0; mb < 2; ++mb) {
      sequential.load(0, mb, 1);
      sequential.stage.forward(0, 0.1f);
      sequential.stage.backward(0);
    }
    Fixture interleaved(modes(recompute, recompute), 1, 2);
    interleaved.zero_gradients();
    interleaved.load(0, 0, 1);
    interleaved.load(1, 1, 1);
    interleaved.stage.forward(0, 0.1f);
    interleaved.stage.forward(1, 0.1f);
    interleaved.stage.backward(0);
    interleaved.stage.backward(1);
    EXPECT_EQ(sequential.current_gradients(), interleaved.current_gradients());
    // Both forwards' losses, summed on the device, read once.
    EXPECT_EQ(interleaved.stage.take_loss_sum(), sequential.stage.take_loss_sum());
  }
}

TEST_P(Stage, LossesAccumulateOverForwardsUntilTaken) {
  Fixture fixture(modes(RecomputeMode::None, RecomputeMode::None), 1, 2);
  const int tokens = fixture.layout.config().seq_len;
  double each[2];
  for (int mb = 0; mb < 2; ++mb) {
    fixture.load(mb, mb, 1);
    fixture.stage.forward(mb, 1.0f, false);
    each[mb] = fixture.stage.take_loss_sum();
    EXPECT_GT(each[mb] / tokens, 1.0);  // about log(vocab) at initialization
  }
  EXPECT_EQ(fixture.stage.take_loss_sum(), 0.0) << "taking resets the accumulator";
  fixture.stage.forward(0, 1.0f, false);
  fixture.stage.forward(1, 1.0f, false);
  EXPECT_EQ(fixture.stage.take_loss_sum(), each[0] + each[1]);
}

TEST_P(Stage, MicroBatchesAddUpToTheWholeBatch) {
  Fixture whole(modes(RecomputeMode::None, RecomputeMode::None), 2, 1);
  const std::vector<float> expected = whole.gradients(2);
  Fixture split(modes(RecomputeMode::None, RecomputeMode::None), 1, 1);
  split.zero_gradients();
  const float scale = 1.0f / (2 * split.layout.config().seq_len);
  for (int mb = 0; mb < 2; ++mb) {
    split.load(0, mb, 1);
    split.stage.forward(0, scale);
    split.stage.backward(0);
  }
  // Only the summation order differs: float rounding, relative ~1e-6.
  const std::vector<float> actual = split.current_gradients();
  for (size_t i = 0; i < expected.size(); ++i)
    ASSERT_NEAR(actual[i], expected[i], 1e-6 + 1e-4 * std::fabs(expected[i])) << i;
}

// ---- bf16 mixed precision ------------------------------------------------------------------

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double difference = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    difference += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(difference / norm);
}

TEST_P(StageBfloat16, TracksTheFloat32Stage) {
  // bf16 keeps 8 significant bits: each stored tensor is off by up to 2^-9
  // relative, and the errors of a dozen roundings on the way through the
  // tiny model add up to ~1% of the gradient's norm (measured: 0.97%; the
  // loss 4e-4 of 2.4). 5%
  // bounds that; a wrong rounding point (e.g. bf16 accumulation inside a
  // GEMM) or a dropped term moves it by far more.
  Fixture fp32(modes(RecomputeMode::None, RecomputeMode::None));
  Fixture bf16(modes(RecomputeMode::None, RecomputeMode::None), 2, 1, tiny_config(),
               kernels::DType::kBFloat16);
  const double loss32 = fp32.loss(2), loss16 = bf16.loss(2);
  EXPECT_NEAR(loss16, loss32, 1e-2 * loss32);
  const std::vector<float> g32 = fp32.gradients(2), g16 = bf16.gradients(2);
  const double difference = relative_difference(g16, g32);
  EXPECT_LT(difference, 0.05);
  EXPECT_GT(difference, 0.0) << "bf16 gave bitwise the fp32 gradients: nothing was rounded";
  // Every stored gradient is a bf16 value.
  for (float g : g16) ASSERT_EQ(g, kernels::round_to_bfloat16(g));
}

TEST_P(StageBfloat16, RecomputationIsBitwiseInvisible) {
  // The recomputed forward rounds exactly as the first one did.
  const TransformerConfig config = tiny_config();
  Fixture none(modes(RecomputeMode::None, RecomputeMode::None), 2, 1, config,
               kernels::DType::kBFloat16);
  const std::vector<float> expected = none.gradients(2);
  for (auto recompute : {RecomputeMode::Selective, RecomputeMode::Full}) {
    Fixture f(modes(recompute, recompute), 2, 1, config, kernels::DType::kBFloat16);
    EXPECT_EQ(f.gradients(2), expected) << "mode " << int(recompute);
  }
}

TEST_P(StageBfloat16, StoresHalfTheBytesOfFloat32) {
  Fixture fp32(modes(RecomputeMode::None, RecomputeMode::None));
  Fixture bf16(modes(RecomputeMode::None, RecomputeMode::None), 2, 1, tiny_config(),
               kernels::DType::kBFloat16);
  EXPECT_EQ(bf16.memory.current(MemoryCategory::kWeights) * 2,
            fp32.memory.current(MemoryCategory::kWeights));
  EXPECT_EQ(bf16.memory.current(MemoryCategory::kGradients) * 2,
            fp32.memory.current(MemoryCategory::kGradients));
  // Activations shrink less than half: the fp32 statistics stay fp32.
  EXPECT_LT(bf16.memory.current(MemoryCategory::kActivations),
            fp32.memory.current(MemoryCategory::kActivations) * 0.6);
}

}  // namespace
}  // namespace paraplan

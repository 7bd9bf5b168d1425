// model_stage_cuda_test.cc: one whole training step of a tiny stage of every
// architecture (GPT-2: 2 layers, d_model 64, 4 heads, seq 32, vocab 96;
// Llama: d_model 128, 2 query heads of 64 over 1 KV head, so bf16 attention
// takes cuDNN's SDPA where libcudnn loads, else the tensor-core kernels,
// with a group of 2) on the CUDA backend
// against the CPU backend: the same parameters and tokens give the same loss
// and the same gradients, tensor by tensor, within tolerance (compared, printed
// and on failure dumped by kernels/testing/tensor_compare.h), in TF32 and in
// strict fp32 GEMM mode, and in bf16 mixed precision against the CPU
// backend's bf16 storage; and on CUDA, recomputation gives bitwise the
// gradients of no recomputation (the runtime relies on it), and the weight
// gradients on the second stream bitwise those in line, and CUDA graphs of
// the forward and backward bitwise plain runs. Skips, visibly, without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/testing/tensor_compare.h"
#include "runtime/model/architecture.h"

namespace paraplan {
namespace {

namespace tensor_compare = kernels::tensor_compare;

// Tolerances per gradient tensor: max |cuda - cpu| / max |cpu|.
// Strict fp32: each op differs from the CPU by a few ulp (summation order,
// expf vs exp_approx, FMA); through ~20 ops forward and backward that stays
// well under 1e-4.
constexpr double kStrictGradientTolerance = 1e-4;
// TF32: every GEMM carries ~1e-3 relative error (10-bit mantissa inputs), and
// a step chains a dozen of them forward and backward: ~1e-2.
constexpr double kTf32GradientTolerance = 2e-2;
// The mean loss (~log 96 = 4.56) is one sum over the logits' softmax, far less
// sensitive than single gradient elements.
constexpr double kStrictLossTolerance = 1e-5;
constexpr double kTf32LossTolerance = 2e-3;
// bf16: both backends round every stored tensor to 8 significant bits at the
// same points, but a different fp32 summation order moves a value across a
// rounding boundary now and then (one bf16 ulp, 2^-8 relative), and such
// flips propagate: a few percent of a tensor's largest gradient.
constexpr double kBfloat16GradientTolerance = 5e-2;
constexpr double kBfloat16LossTolerance = 1e-2;

TransformerConfig tiny_config(Architecture architecture) {
  TransformerConfig config;
  config.architecture = architecture;
  config.vocab_size = 96;
  config.seq_len = 32;
  config.num_layers = 2;
  config.d_model = 64;
  config.num_heads = 4;
  config.ffn_size = 256;
  config.init_std = 0.1f;  // large enough that every path carries gradient
  if (architecture == Architecture::kLlama) {
    config.d_model = 128;
    config.num_heads = 2;
    config.num_kv_heads = 1;
    config.tied_embeddings = false;
  }
  return config;
}

// Sets an environment variable for its lifetime, then puts back what was there.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    const char* saved = std::getenv(name);
    if (saved != nullptr) saved_ = saved;
    had_ = saved != nullptr;
    setenv(name, value, 1);
  }
  ~ScopedVariable() {
    if (had_) {
      setenv(name_, saved_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  const char* name_;
  std::string saved_;
  bool had_ = false;
};

// overlap false: the weight gradients in line (PARAPLAN_CUDA_OVERLAP=0);
// graphs: PARAPLAN_CUDA_GRAPHS=1.
std::unique_ptr<kernels::Ops> make_cuda(bool tf32, kernels::DType dtype = kernels::DType::kFloat32,
                                        bool overlap = true, bool graphs = false) {
  const ScopedVariable precision("PARAPLAN_CUDA_TF32", tf32 ? "1" : "0");
  const ScopedVariable second_stream("PARAPLAN_CUDA_OVERLAP", overlap ? "1" : "0");
  const ScopedVariable launch_graphs("PARAPLAN_CUDA_GRAPHS", graphs ? "1" : "0");
  return kernels::make_cuda_ops(0, dtype);
}

struct StepResult {
  double mean_loss = 0;
  std::vector<float> gradients;
  int forward_calls = 0, backward_calls = 0;  // how often run_recorded ran each
};

// One forward + backward of a batch-2 micro-batch on `ops`, parameters from
// the layout's initializer (seed 5), tokens and targets from a fixed formula;
// everything moves through copy_from_host / copy_to_host, so it runs on any backend.
// runs > 1: the step again and again from zeroed gradients, its forward and
// backward through Ops::run_recorded (CUDA graphs: the third run replays);
// the last run's result. A new stage each call, so the recordings of the
// last one (its freed buffers' addresses) are forgotten first, as a new
// schedule executor does.
StepResult training_step(Architecture architecture, kernels::Ops& ops,
                         std::vector<RecomputeMode> recompute, int runs = 1) {
  const TransformerConfig config = tiny_config(architecture);
  const int batch = 2, T = config.seq_len, V = config.vocab_size;
  MemoryTracker memory(ops);
  const std::unique_ptr<ParameterLayout> layout_pointer =
      make_parameter_layout(config, StageSpec{0, config.num_layers, true, true});
  const ParameterLayout& layout = *layout_pointer;
  const std::unique_ptr<ModelStage> stage_pointer = make_model_stage(
      layout, ops, memory,
      ModelStageOptions{.micro_batch_size = batch, .recompute = std::move(recompute)});
  ModelStage& stage = *stage_pointer;
  const size_t n = layout.num_elements();
  std::vector<float> parameters(n);
  layout.initialize(parameters.data(), 5);
  stage.load_parameters(parameters.data(), n);
  std::vector<int32_t> tokens(batch * T), targets(batch * T);
  for (int i = 0; i < batch * T; i++) {
    tokens[i] = (i * 37 + 11) % V;
    targets[i] = (i * 53 + 7) % V;
  }
  ops.copy_from_host(stage.tokens(0), tokens.data(), tokens.size() * sizeof(int32_t));
  ops.copy_from_host(stage.targets(0), targets.data(), targets.size() * sizeof(int32_t));
  const float scale = 1.0f / (batch * T);
  StepResult result;
  ops.forget_recorded();
  for (int run = 0; run < runs; ++run) {
    ops.zero_bytes(stage.gradients(), ops.storage_bytes(n));
    ops.run_recorded(1, [&] {
      ++result.forward_calls;
      stage.forward(0, scale);
    });
    result.mean_loss = stage.take_loss_sum() * scale;
    ops.run_recorded(2, [&] {
      ++result.backward_calls;
      stage.backward(0);
    });
  }
  result.gradients.resize(n);
  stage.read_gradients(result.gradients.data(), n);
  return result;
}

std::vector<RecomputeMode> no_recompute() {
  return {RecomputeMode::None, RecomputeMode::None};
}

void expect_same_step(Architecture architecture, const StepResult& cuda, const StepResult& cpu,
                      double loss_tolerance, double gradient_tolerance, const std::string& mode) {
  const std::string name = std::string(architecture_name(architecture)) + " " + mode;
  tensor_compare::expect_scalar_close(cuda.mean_loss, cpu.mean_loss, loss_tolerance,
                                      name + " mean loss");
  const TransformerConfig config = tiny_config(architecture);
  const std::unique_ptr<ParameterLayout> layout =
      make_parameter_layout(config, StageSpec{0, config.num_layers, true, true});
  ASSERT_EQ(cuda.gradients.size(), cpu.gradients.size());
  // Each tensor: max |cuda - cpu| <= gradient_tolerance * max |cpu| (the
  // report, the printed line and the dump of tensor_compare.h; actual = cuda).
  for (const ParameterTensor& tensor : layout->tensors()) {
    const std::span<const float> cuda_gradient =
        std::span<const float>(cuda.gradients).subspan(tensor.offset, tensor.size);
    const std::span<const float> cpu_gradient =
        std::span<const float>(cpu.gradients).subspan(tensor.offset, tensor.size);
    const tensor_compare::CloseReport report = tensor_compare::expect_close(
        cuda_gradient, cpu_gradient, gradient_tolerance, name + " " + tensor.name);
    EXPECT_GT(report.scale, 0.0) << tensor.name << " has no gradient on the CPU";
  }
}

// Bitwise the same gradients; on failure, also which tensors the listed
// differences are in (the comparison's indices are into the whole vector).
void expect_same_gradients(Architecture architecture, const std::vector<float>& actual,
                           const std::vector<float>& expected, const std::string& what) {
  const tensor_compare::EqualReport report = tensor_compare::expect_equal(actual, expected, what);
  if (report.passed()) return;
  const TransformerConfig config = tiny_config(architecture);
  const std::unique_ptr<ParameterLayout> layout =
      make_parameter_layout(config, StageSpec{0, config.num_layers, true, true});
  std::string where;
  for (const tensor_compare::EqualReport::Difference& difference : report.first_differences) {
    for (const ParameterTensor& tensor : layout->tensors()) {
      if (difference.index >= tensor.offset && difference.index < tensor.offset + tensor.size) {
        where += " [" + std::to_string(difference.index) + "] = " + tensor.name + "[" +
                 std::to_string(difference.index - tensor.offset) + "]";
      }
    }
  }
  ADD_FAILURE() << what << ": the differences listed are in" << where;
}

class StageCuda : public ::testing::TestWithParam<Architecture> {
 protected:
  void SetUp() override {
    if (kernels::cuda_device_count() == 0)
      GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  }
  StepResult step(kernels::Ops& ops, std::vector<RecomputeMode> recompute = no_recompute()) {
    return training_step(GetParam(), ops, std::move(recompute));
  }
};
INSTANTIATE_TEST_SUITE_P(Architectures, StageCuda,
                         ::testing::Values(Architecture::kGpt2, Architecture::kLlama),
                         [](const ::testing::TestParamInfo<Architecture>& info) {
                           return std::string(architecture_name(info.param));
                         });

TEST_P(StageCuda, TrainingStepMatchesCpuInStrictFp32) {
  std::unique_ptr<kernels::Ops> cpu = kernels::make_cpu_ops(1), cuda = make_cuda(false);
  expect_same_step(GetParam(), step(*cuda), step(*cpu), kStrictLossTolerance,
                   kStrictGradientTolerance, "fp32");
}

TEST_P(StageCuda, TrainingStepMatchesCpuInTf32) {
  std::unique_ptr<kernels::Ops> cpu = kernels::make_cpu_ops(1), cuda = make_cuda(true);
  expect_same_step(GetParam(), step(*cuda), step(*cpu), kTf32LossTolerance, kTf32GradientTolerance,
                   "tf32");
}

TEST_P(StageCuda, TrainingStepMatchesCpuInBfloat16) {
  std::unique_ptr<kernels::Ops> cpu = kernels::make_cpu_ops(1, kernels::DType::kBFloat16),
                                cuda = make_cuda(false, kernels::DType::kBFloat16);
  expect_same_step(GetParam(), step(*cuda), step(*cpu), kBfloat16LossTolerance,
                   kBfloat16GradientTolerance, "bf16");
}

TEST_P(StageCuda, RecomputationGivesBitwiseTheSameGradientsOnCuda) {
  for (kernels::DType dtype : {kernels::DType::kFloat32, kernels::DType::kBFloat16}) {
    std::unique_ptr<kernels::Ops> cuda = make_cuda(true, dtype);
    const StepResult none = step(*cuda);
    const std::string name =
        std::string(architecture_name(GetParam())) + " " + kernels::dtype_name(dtype);
    expect_same_gradients(GetParam(), step(*cuda).gradients, none.gradients,
                          name + " gradients run to run");
    for (auto modes : {std::vector{RecomputeMode::Selective, RecomputeMode::Selective},
                       std::vector{RecomputeMode::Full, RecomputeMode::Full},
                       std::vector{RecomputeMode::Full, RecomputeMode::Selective}}) {
      const StepResult recomputed = step(*cuda, modes);
      EXPECT_EQ(recomputed.mean_loss, none.mean_loss);
      expect_same_gradients(GetParam(), recomputed.gradients, none.gradients,
                            name + " gradients recompute modes " + std::to_string(int(modes[0])) +
                                "," + std::to_string(int(modes[1])));
    }
  }
}

// The weight gradients on the second stream (kernels/ops.h
// linear_weight_gradients, joined where the stage says) are bitwise the same
// step in line, with and without recomputation (which joins before it
// rewrites the shared scratch).
TEST_P(StageCuda, WeightGradientsBesideTheBackwardAreBitwiseInLine) {
  for (kernels::DType dtype : {kernels::DType::kFloat32, kernels::DType::kBFloat16}) {
    std::unique_ptr<kernels::Ops> overlapped = make_cuda(true, dtype, true);
    std::unique_ptr<kernels::Ops> in_line = make_cuda(true, dtype, false);
    const std::string name =
        std::string(architecture_name(GetParam())) + " " + kernels::dtype_name(dtype);
    for (auto modes :
         {no_recompute(), std::vector{RecomputeMode::Full, RecomputeMode::Selective}}) {
      const StepResult side = step(*overlapped, modes), line = step(*in_line, modes);
      EXPECT_EQ(side.mean_loss, line.mean_loss);
      expect_same_gradients(
          GetParam(), side.gradients, line.gradients,
          name + " second stream vs in line, recompute " + std::to_string(int(modes[0])));
    }
  }
}

// A stage's forward and backward recorded as CUDA graphs on their second run
// and replayed on the third (the weight gradients' stream joining the
// graph) leave bitwise the loss and gradients of plain runs.
TEST_P(StageCuda, ReplayedGraphsAreBitwiseThePlainSteps) {
  for (kernels::DType dtype : {kernels::DType::kFloat32, kernels::DType::kBFloat16}) {
    std::unique_ptr<kernels::Ops> graphs = make_cuda(true, dtype, true, true);
    std::unique_ptr<kernels::Ops> plain = make_cuda(true, dtype, true, false);
    ASSERT_TRUE(graphs->records_launches());
    const std::string name =
        std::string(architecture_name(GetParam())) + " " + kernels::dtype_name(dtype);
    for (auto modes :
         {no_recompute(), std::vector{RecomputeMode::Full, RecomputeMode::Selective}}) {
      const StepResult replayed = training_step(GetParam(), *graphs, modes, 3);
      const StepResult once = training_step(GetParam(), *plain, modes, 1);
      // Plain, captured, replayed: a broken capture (said on stderr) would
      // run the steps plainly, bitwise the same, and only this would tell.
      EXPECT_EQ(replayed.forward_calls, 2) << name;
      EXPECT_EQ(replayed.backward_calls, 2) << name;
      EXPECT_EQ(replayed.mean_loss, once.mean_loss) << name;
      expect_same_gradients(GetParam(), replayed.gradients, once.gradients,
                            name + " graphs vs plain, recompute " + std::to_string(int(modes[0])));
    }
  }
}

}  // namespace
}  // namespace paraplan

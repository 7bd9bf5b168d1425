// hugging_face_test.cc: paraplan's checkpoints interchange with Hugging Face
// transformers, both ways, for Llama (LlamaForCausalLM: grouped-query
// attention, Llama 3's rope_theta and rope scaling, untied head), Qwen 2
// (Qwen2ForCausalLM: Llama with q/k/v biases, tied head), Mistral
// (MistralForCausalLM: Llama's tensors, loaded while the sequence fits its
// sliding window) and GPT-2 (GPT2LMHeadModel), through
// tests/hugging_face_check.py (PyTorch, fp32):
//
//   paraplan -> transformers: a checkpoint paraplan wrote (Llama from a
//     2-rank tensor-parallel run, so the shards are gathered into Hugging
//     Face's layout) loads with from_pretrained with no missing or unexpected
//     tensor, every parameter equal to the file's, and its loss on the
//     validation samples paraplan evaluated equals paraplan's logged val_loss.
//   transformers -> paraplan: a random model saved by save_pretrained trains
//     in paraplan (--init-from): the first step's loss equals transformers'
//     loss on the same batch, and after one step of the same AdamW (clip,
//     decoupled decay on matrices) in PyTorch the weights and the next loss
//     agree with paraplan's checkpoint and log.
//
// Each direction prints its figures ("hugging face: ..."). Tolerances: fp32 on
// both sides, summation orders differ: losses to 1e-5 (measured: 5e-8);
// weights after one AdamW step to 1e-5, 1% of the learning rate (the first
// step moves a weight by lr * g / (|g| + eps), about lr * sign(g), but for the
// few gradients near eps = 1e-8 it passes on their relative difference:
// measured 2.5e-6 for Llama, 6.7e-7 for GPT-2; a wrong or missing update is
// off by lr = 1e-3). Python and its packages come from
// scripts/install_dependencies.sh (a venv in .cache/hf-venv with Debian's
// python3-torch); without them the tests skip, saying so.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "command_runner.h"

namespace {

using namespace paraplan::testing;
using nlohmann::json;

constexpr double kLossTolerance = 1e-5;
constexpr double kStepWeightTolerance = 1e-5;

// The training settings of every job here: one AdamW step is replayed in PyTorch.
const char* kTraining = R"(
[training]
global_batch_size = 4
micro_batch_size = 2
learning_rate = 1e-3
decay_style = "constant"
warmup_steps = 0
beta1 = 0.9
beta2 = 0.95
epsilon = 1e-8
weight_decay = 0.1
grad_clip = 1.0
total_steps = 5
eval_interval = 5
eval_batches = 2
seed = 3
)";

// The tiny Llama-family shape of every such job here.
std::string llama_model(const std::string& keys) {
  return "\n[model]\narchitecture = \"llama\"\nvocab_size = 256\nseq_len = 32\nnum_layers = 2\n"
         "d_model = 64\nnum_heads = 4\nnum_kv_heads = 2\nffn_size = 128\n" +
         keys;
}

const std::string kLlamaModel = llama_model("rms_norm_eps = 1e-5\nrope_theta = 500000.0\n");
// Qwen 2: Llama with q, k and v biases, and (as Qwen2.5's small models) a tied head.
const std::string kQwen2Model = llama_model(
    "qkv_bias = true\ntied_embeddings = true\nrms_norm_eps = 1e-6\nrope_theta = 1000000.0\n");
// Mistral 7B's shape, scaled down: Llama's with grouped-query attention,
// rope_theta 10000 and an untied head.
const std::string kMistralModel = llama_model("");
const char* kMistralConfig =
    "vocab_size=256 hidden_size=64 intermediate_size=128 num_hidden_layers=2 "
    "num_attention_heads=4 num_key_value_heads=2 max_position_embeddings=4096 "
    "rms_norm_eps=1e-5 rope_theta=10000.0 tie_word_embeddings=false ";

const char* kGpt2Model = R"(
[model]
architecture = "gpt2"
vocab_size = 256
seq_len = 16
num_layers = 2
d_model = 32
num_heads = 4
)";

class HuggingFace : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    directory_ = new TemporaryDirectory("hugging_face");
    std::string corpus;
    for (int i = 0; i < 300; ++i)
      corpus += "record " + std::to_string(i * 7919 % 1000) + ": transformers and paraplan\n";
    write_file(*directory_ / "corpus.txt", corpus);
    const CommandResult tokenized =
        run("tokenize --input " + *directory_ / "corpus.txt" + " --output " + *directory_ / "data");
    ASSERT_EQ(tokenized.exit_code, 0) << tokenized.output;
  }
  static void TearDownTestSuite() { delete directory_; }

  void SetUp() override {
    if (!std::filesystem::exists(PARAPLAN_HF_PYTHON) ||
        run_command(std::string(PARAPLAN_HF_PYTHON) + " -c 'import torch, transformers'")
                .exit_code != 0)
      GTEST_SKIP() << PARAPLAN_HF_PYTHON
                   << " with torch and transformers is missing: run "
                      "scripts/install_dependencies.sh (it makes .cache/hf-venv)";
  }

  // Runs hugging_face_check.py; returns the JSON object of its last line.
  static json python(const std::string& arguments) {
    const CommandResult result =
        run_command(std::string(PARAPLAN_HF_PYTHON) + " " + PARAPLAN_SOURCE_DIR +
                    "/tests/hugging_face_check.py " + arguments);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    const size_t last_line = result.output.find_last_of('\n', result.output.size() - 2);
    return json::parse(result.output.substr(last_line == std::string::npos ? 0 : last_line + 1));
  }

  // Plans job (model + kTraining + planner) under name; returns the plan path.
  static std::string plan(const std::string& name, const std::string& model,
                          const std::string& planner = "") {
    const std::string job = *directory_ / (name + ".toml");
    // File order: the PyTorch reference steps on the first training samples.
    write_file(job,
               std::string(model) + kTraining + "\n[data]\nshuffle = false\n[planner]\n" + planner);
    const std::string plan_file = *directory_ / (name + ".pplan");
    const CommandResult planned = run("plan --config " + job + " --output " + plan_file);
    EXPECT_EQ(planned.exit_code, 0) << planned.output;
    return plan_file;
  }

  // paraplan -> transformers: train 5 steps, evaluate, load the checkpoint in
  // transformers, compare the validation loss.
  static void paraplan_to_transformers(const std::string& name, const std::string& model,
                                       int seq_len, const std::string& planner, bool multi_rank) {
    const std::string plan_file = plan(name, model, planner);
    const std::string checkpoints = *directory_ / (name + "_checkpoints");
    const std::string log = *directory_ / (name + ".jsonl");
    const std::string arguments = " --data " + *directory_ / "data/train.bin" + " --val-data " +
                                  *directory_ / "data/val.bin" + " --steps 5 --checkpoint-dir " +
                                  checkpoints + " --log-json " + log;
    // Several ranks start through `paraplan launch` (mpirun).
    const CommandResult trained =
        run(multi_rank ? "launch --plan " + plan_file + " -- train" + arguments
                       : "train --plan " + plan_file + arguments);
    ASSERT_EQ(trained.exit_code, 0) << trained.output;
    const std::vector<json> lines = read_json_lines(log);
    ASSERT_EQ(lines.size(), 5u);
    const double logged = lines[4]["val_loss"].get<double>();
    // eval_batches 2 x global batch 4: the first 8 validation samples.
    const json hf = python("loss " + checkpoints + "/step_00000005 " +
                           *directory_ / "data/val.bin" + " 0 8 " + std::to_string(seq_len));
    std::cout << "hugging face: " << name << ": paraplan val_loss " << logged << ", transformers "
              << hf["loss"] << ", max |transformers weight - file| " << hf["max_weight_difference"]
              << std::endl;
    EXPECT_NEAR(hf["loss"].get<double>(), logged, kLossTolerance);
    EXPECT_EQ(hf["max_weight_difference"].get<double>(), 0.0);
  }

  // transformers -> paraplan: a random model from save_pretrained trains in
  // paraplan; the first loss, one AdamW step and the next loss agree with PyTorch.
  static void transformers_to_paraplan(const std::string& name, const std::string& arch,
                                       const std::string& hf_config, const std::string& model,
                                       int seq_len) {
    const std::string hf_dir = *directory_ / (name + "_hf");
    python("make " + arch + " " + hf_dir + " 17 " + hf_config);
    const std::string plan_file = plan(name, model);
    const std::string checkpoints = *directory_ / (name + "_checkpoints");
    const std::string log = *directory_ / (name + ".jsonl");
    const CommandResult trained =
        run("train --plan " + plan_file + " --data " + *directory_ / "data/train.bin" +
            " --init-from " + hf_dir + " --steps 2 --checkpoint-dir " + checkpoints +
            " --checkpoint-every 1 --log-json " + log);
    ASSERT_EQ(trained.exit_code, 0) << trained.output;
    EXPECT_NE(trained.output.find("weights from " + hf_dir), std::string::npos) << trained.output;
    const std::vector<json> lines = read_json_lines(log);
    ASSERT_EQ(lines.size(), 2u);
    const json torch_step = python("step " + hf_dir + " " + *directory_ / "data/train.bin" + " 4 " +
                                   std::to_string(seq_len) + " 1e-3 0.9 0.95 1e-8 0.1 1.0 " +
                                   checkpoints + "/step_00000001");
    std::cout << "hugging face: " << name << ": first loss paraplan " << lines[0]["loss"]
              << ", transformers " << torch_step["loss"] << "; after one AdamW step: loss "
              << lines[1]["loss"] << " vs " << torch_step["next_loss"]
              << ", max |weight difference| " << torch_step["max_weight_difference"] << std::endl;
    EXPECT_NEAR(lines[0]["loss"].get<double>(), torch_step["loss"].get<double>(), kLossTolerance);
    EXPECT_NEAR(lines[1]["loss"].get<double>(), torch_step["next_loss"].get<double>(),
                kLossTolerance);
    EXPECT_LT(torch_step["max_weight_difference"].get<double>(), kStepWeightTolerance);
  }

  inline static TemporaryDirectory* directory_ = nullptr;
};

TEST_F(HuggingFace, LlamaCheckpointLoadsInTransformers) {
  paraplan_to_transformers("llama_to_hf", kLlamaModel, 32,
                           "tensor_parallel_degree = 2\nworld_size = 2\n", true);
  // Each tensor rank wrote its share of whole tensors; transformers read the index.
  const std::string step = *directory_ / "llama_to_hf_checkpoints/step_00000005";
  for (const char* file : {"model.safetensors.index.json", "model-00001-of-00002.safetensors",
                           "model-00002-of-00002.safetensors", "optimizer.safetensors.index.json"})
    EXPECT_TRUE(std::filesystem::exists(step + "/" + file)) << file;
}

TEST_F(HuggingFace, TransformersLlamaTrainsInParaplan) {
  // Llama 3.1's rope scaling on top of Llama 3's theta.
  const std::string model = kLlamaModel +
                            "rope_scaling_factor = 8.0\nrope_low_freq_factor = 1.0\n"
                            "rope_high_freq_factor = 4.0\nrope_original_max_positions = 8192\n";
  transformers_to_paraplan(
      "hf_to_llama", "llama",
      "vocab_size=256 hidden_size=64 intermediate_size=128 num_hidden_layers=2 "
      "num_attention_heads=4 num_key_value_heads=2 max_position_embeddings=32 "
      "rms_norm_eps=1e-5 rope_theta=500000.0 tie_word_embeddings=false "
      "'rope_scaling={\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
      "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}' "
      // Shards and model.safetensors.index.json, as the hub ships large models.
      "max_shard_size=100KB",
      model, 32);
  // The export came as shards: the index and more than one file.
  const std::filesystem::path exported = *directory_ / "hf_to_llama_hf";
  EXPECT_TRUE(std::filesystem::exists(exported / "model.safetensors.index.json"));
  int shards = 0;
  for (const auto& entry : std::filesystem::directory_iterator(exported))
    shards += entry.path().filename().string().rfind("model-0", 0) == 0;
  EXPECT_GT(shards, 1);
}

TEST_F(HuggingFace, Gpt2CheckpointLoadsInTransformers) {
  paraplan_to_transformers("gpt2_to_hf", kGpt2Model, 16, "", false);
}

TEST_F(HuggingFace, TransformersGpt2TrainsInParaplan) {
  transformers_to_paraplan("hf_to_gpt2", "gpt2",
                           "vocab_size=256 n_positions=16 n_embd=32 n_layer=2 n_head=4 "
                           "resid_pdrop=0.0 embd_pdrop=0.0 attn_pdrop=0.0",
                           kGpt2Model, 16);
}

TEST_F(HuggingFace, QwenTwoCheckpointLoadsInTransformers) {
  // Two tensor ranks: each holds its heads' share of the q, k and v biases.
  paraplan_to_transformers("qwen2_to_hf", kQwen2Model, 32,
                           "tensor_parallel_degree = 2\nworld_size = 2\n", true);
  const json config =
      json::parse(read_file(*directory_ / "qwen2_to_hf_checkpoints/step_00000005/config.json"));
  EXPECT_EQ(config["architectures"][0], "Qwen2ForCausalLM");
}

TEST_F(HuggingFace, TransformersQwenTwoTrainsInParaplan) {
  transformers_to_paraplan("hf_to_qwen2", "qwen2",
                           "vocab_size=256 hidden_size=64 intermediate_size=128 "
                           "num_hidden_layers=2 num_attention_heads=4 num_key_value_heads=2 "
                           "max_position_embeddings=32768 rms_norm_eps=1e-6 rope_theta=1000000.0 "
                           "tie_word_embeddings=true use_sliding_window=false",
                           kQwen2Model, 32);
  // Trained at 32 tokens, the checkpoint still serves the model's 32,768
  // (what vLLM and transformers read as its context).
  const json config =
      json::parse(read_file(*directory_ / "hf_to_qwen2_checkpoints/step_00000001/config.json"));
  EXPECT_EQ(config["max_position_embeddings"], 32768);
  EXPECT_EQ(config["architectures"][0], "Qwen2ForCausalLM");
}

TEST_F(HuggingFace, TransformersMistralTrainsInParaplanWithinItsWindow) {
  // v0.1's sliding window (4096) beyond the plan's 32 tokens changes nothing.
  transformers_to_paraplan("hf_to_mistral", "mistral",
                           std::string(kMistralConfig) + "sliding_window=4096", kMistralModel, 32);
  // A window shorter than the plan's sequence is refused, naming it.
  const std::string narrow = *directory_ / "hf_mistral_narrow";
  python("make mistral " + narrow + " 17 " + kMistralConfig + "sliding_window=16");
  const CommandResult refused =
      run("train --plan " + *directory_ / "hf_to_mistral.pplan" + " --data " +
          *directory_ / "data/train.bin" + " --init-from " + narrow + " --steps 1");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("sliding_window is 16 but the plan's model has seq_len 32"),
            std::string::npos)
      << refused.output;
}

}  // namespace

// checkpoint_test.cc: bitwise save/load round trips, the Hugging Face layout
// (names, Conv1D transposition, config.json), atomic publication via
// 'latest', and the error messages for missing, corrupt or mismatched files.
#include "runtime/checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/model/gpt/gpt_layout.h"
#include "runtime/testing/test_temp_dir.h"

namespace paraplan {
namespace {

using testing::contains;
using testing::error_of;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;
namespace fs = std::filesystem;

TransformerConfig small_config() {
  TransformerConfig config;
  config.vocab_size = 16;
  config.seq_len = 8;
  config.num_layers = 2;
  config.d_model = 8;
  config.num_heads = 2;
  config.ffn_size = 32;
  return config;
}

GptLayout full_layout(const TransformerConfig& config) {
  return GptLayout(config, StageSpec{0, config.num_layers, true, true});
}

// Parameters, first and second moments with distinct, exactly representable values.
struct Buffers {
  explicit Buffers(const GptLayout& layout, float base = 0.0f)
      : params(layout.num_elements()), first(layout.num_elements()), second(layout.num_elements()) {
    layout.initialize(params.data(), 1234);
    for (size_t i = 0; i < params.size(); ++i) {
      params[i] += base;
      first[i] = static_cast<float>(i) * 0.25f - 3.0f + base;
      second[i] = static_cast<float>(i % 97) * 1e-7f;
    }
  }
  std::vector<float> params, first, second;
};

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CheckpointTest, RoundTripIsBitwise) {
  TempDir dir;
  const GptLayout layout = full_layout(small_config());
  const Buffers saved(layout);
  const std::string step_dir = save_checkpoint(
      dir / "ckpt", layout, saved.params.data(), saved.first.data(), saved.second.data(),
      TrainState{.step = 7, .next_train_sample = 56, .seed = 18446744073709551615ull});
  EXPECT_EQ(step_dir, dir / "ckpt/step_00000007");
  EXPECT_EQ(entries(dir.path() / "ckpt"), (std::vector<std::string>{"latest", "step_00000007"}));
  EXPECT_EQ(read_bytes(dir.path() / "ckpt/latest"), "step_00000007\n");
  EXPECT_EQ(entries(step_dir),
            (std::vector<std::string>{"config.json", "model.safetensors", "optimizer.safetensors",
                                      "train_state.json"}));

  Buffers loaded(layout, 5.0f);  // different values, all overwritten by the load
  const TrainState state = load_checkpoint(dir / "ckpt", layout, loaded.params.data(),
                                           loaded.first.data(), loaded.second.data());
  EXPECT_EQ(state.step, 7);
  EXPECT_EQ(state.next_train_sample, 56);
  EXPECT_EQ(state.seed, 18446744073709551615ull);
  EXPECT_TRUE(bitwise_equal(loaded.params, saved.params));
  EXPECT_TRUE(bitwise_equal(loaded.first, saved.first));
  EXPECT_TRUE(bitwise_equal(loaded.second, saved.second));

  // A weights-only load from the step directory itself.
  std::vector<float> params(layout.num_elements(), 9.0f);
  EXPECT_EQ(load_checkpoint(step_dir, layout, params.data(), nullptr, nullptr).step, 7);
  EXPECT_TRUE(bitwise_equal(params, saved.params));
}

TEST(CheckpointTest, ModelFileUsesHuggingFaceNamesAndConv1DLayout) {
  TempDir dir;
  const TransformerConfig config = small_config();
  const GptLayout layout = full_layout(config);
  Buffers saved(layout);
  const ParameterTensor* qkv = layout.find("transformer.h.1.attn.c_attn.weight");
  ASSERT_NE(qkv, nullptr);
  ASSERT_EQ(qkv->shape, (std::vector<int64_t>{24, 8}));  // paraplan [out = 3C, in = C]
  // Element [out 5, in 2] must land at HF's [in 2, out 5].
  saved.params[qkv->offset + 5 * 8 + 2] = 1234.5f;
  saved.first[qkv->offset + 5 * 8 + 2] = -77.0f;
  const std::string step_dir = save_checkpoint(dir / "ckpt", layout, saved.params.data(),
                                               saved.first.data(), saved.second.data(), {});

  const SafetensorsFile model = SafetensorsFile::open(step_dir + "/model.safetensors");
  EXPECT_EQ(model.metadata().at("format"), "pt");
  EXPECT_EQ(model.tensors().size(), layout.tensors().size());
  EXPECT_EQ(model.tensors()[0].name, "transformer.wte.weight");
  EXPECT_FALSE(model.has("lm_head.weight"));  // tied to transformer.wte.weight
  EXPECT_EQ(model.shape("transformer.h.1.attn.c_attn.weight"), (std::vector<int64_t>{8, 24}));
  EXPECT_EQ(model.shape("transformer.h.0.mlp.c_fc.weight"), (std::vector<int64_t>{8, 32}));
  EXPECT_EQ(model.shape("transformer.h.0.mlp.c_proj.weight"), (std::vector<int64_t>{32, 8}));
  EXPECT_EQ(model.shape("transformer.wte.weight"), (std::vector<int64_t>{16, 8}));
  EXPECT_EQ(model.shape("transformer.wpe.weight"), (std::vector<int64_t>{8, 8}));
  std::vector<float> hf(8 * 24);
  model.read("transformer.h.1.attn.c_attn.weight", hf.data(), {8, 24});
  EXPECT_EQ(hf[2 * 24 + 5], 1234.5f);
  // Every element of the transposed tensor matches.
  for (int out = 0; out < 24; ++out)
    for (int in = 0; in < 8; ++in)
      ASSERT_EQ(hf[in * 24 + out], saved.params[qkv->offset + out * 8 + in]) << out << "," << in;
  // The bytes in the file at that element's offset.
  const std::string bytes = read_bytes(step_dir + "/model.safetensors");
  const SafetensorsTensor& info = model.tensor("transformer.h.1.attn.c_attn.weight");
  float stored;
  std::memcpy(&stored, bytes.data() + model.data_start() + info.begin + (2 * 24 + 5) * 4, 4);
  EXPECT_EQ(stored, 1234.5f);

  const SafetensorsFile optimizer = SafetensorsFile::open(step_dir + "/optimizer.safetensors");
  EXPECT_EQ(optimizer.tensors().size(), 2 * layout.tensors().size());
  EXPECT_EQ(optimizer.shape("exp_avg_sq.transformer.h.1.attn.c_attn.weight"),
            (std::vector<int64_t>{8, 24}));
  optimizer.read("exp_avg.transformer.h.1.attn.c_attn.weight", hf.data(), {8, 24});
  EXPECT_EQ(hf[2 * 24 + 5], -77.0f);
}

TEST(CheckpointTest, ConfigJsonIsAHuggingFaceGpt2Config) {
  TempDir dir;
  const GptLayout layout = full_layout(small_config());
  const Buffers saved(layout);
  const std::string step_dir = save_checkpoint(
      dir / "ckpt", layout, saved.params.data(), saved.first.data(), saved.second.data(),
      TrainState{.step = 3, .next_train_sample = 24, .seed = 9});
  const nlohmann::json config = nlohmann::json::parse(read_bytes(step_dir + "/config.json"));
  EXPECT_EQ(config["architectures"], nlohmann::json({"GPT2LMHeadModel"}));
  EXPECT_EQ(config["model_type"], "gpt2");
  EXPECT_EQ(config["vocab_size"], 16);
  EXPECT_EQ(config["n_positions"], 8);
  EXPECT_EQ(config["n_ctx"], 8);
  EXPECT_EQ(config["n_embd"], 8);
  EXPECT_EQ(config["n_layer"], 2);
  EXPECT_EQ(config["n_head"], 2);
  EXPECT_EQ(config["n_inner"], 32);
  EXPECT_EQ(config["activation_function"], "gelu_new");
  EXPECT_EQ(config["layer_norm_epsilon"], 1e-5);  // the shortest decimal, not 9.99999974e-06
  EXPECT_EQ(config["initializer_range"], 0.02);
  EXPECT_EQ(config["tie_word_embeddings"], true);
  EXPECT_EQ(config["torch_dtype"], "float32");
  EXPECT_EQ(config["resid_pdrop"], 0.0);
  EXPECT_FALSE(config.contains("bos_token_id"));
  EXPECT_FALSE(config.contains("eos_token_id"));
  const nlohmann::json state = nlohmann::json::parse(read_bytes(step_dir + "/train_state.json"));
  EXPECT_EQ(
      state,
      nlohmann::json({{"format_version", 1}, {"step", 3}, {"next_train_sample", 24}, {"seed", 9}}));

  const TransformerConfig read = read_checkpoint_config(dir / "ckpt");
  EXPECT_EQ(read.vocab_size, 16);
  EXPECT_EQ(read.seq_len, 8);
  EXPECT_EQ(read.num_layers, 2);
  EXPECT_EQ(read.d_model, 8);
  EXPECT_EQ(read.num_heads, 2);
  EXPECT_EQ(read.ffn_size, 32);
  EXPECT_TRUE(read.tied_embeddings);
  EXPECT_EQ(read.norm_epsilon, 1e-5f);
  EXPECT_EQ(read.init_std, 0.02f);
}

TEST(CheckpointTest, UntiedHeadIsWrittenAsLmHead) {
  TempDir dir;
  TransformerConfig config = small_config();
  config.tied_embeddings = false;
  const GptLayout layout = full_layout(config);
  const Buffers saved(layout);
  const std::string step_dir =
      save_checkpoint(dir / "ckpt", layout, saved.params.data(), nullptr, nullptr, {});
  EXPECT_FALSE(fs::exists(step_dir + "/optimizer.safetensors"));  // saved without moments
  const SafetensorsFile model = SafetensorsFile::open(step_dir + "/model.safetensors");
  EXPECT_EQ(model.shape("lm_head.weight"), (std::vector<int64_t>{16, 8}));
  EXPECT_FALSE(read_checkpoint_config(step_dir).tied_embeddings);
  std::vector<float> params(layout.num_elements()), first(layout.num_elements());
  load_checkpoint(step_dir, layout, params.data(), nullptr, nullptr);
  EXPECT_TRUE(bitwise_equal(params, saved.params));
  EXPECT_TRUE(contains(
      error_of([&] { load_checkpoint(step_dir, layout, params.data(), first.data(), nullptr); }),
      step_dir + "/optimizer.safetensors: missing"));
}

TEST(CheckpointTest, LastStageWritesItsTiedHeadCopyOnce) {
  TempDir dir;
  const TransformerConfig config = small_config();
  const GptLayout last_stage(config, StageSpec{1, 1, false, true});
  const Buffers saved(last_stage);
  const std::string step_dir = save_checkpoint(dir / "ckpt", last_stage, saved.params.data(),
                                               saved.first.data(), saved.second.data(), {});
  const SafetensorsFile model = SafetensorsFile::open(step_dir + "/model.safetensors");
  EXPECT_TRUE(model.has("transformer.wte.weight"));
  EXPECT_TRUE(model.has("transformer.h.1.ln_1.weight"));
  EXPECT_FALSE(model.has("transformer.h.0.ln_1.weight"));
  EXPECT_FALSE(model.has("transformer.wpe.weight"));
  Buffers loaded(last_stage, 1.0f);
  load_checkpoint(step_dir, last_stage, loaded.params.data(), loaded.first.data(),
                  loaded.second.data());
  EXPECT_TRUE(bitwise_equal(loaded.params, saved.params));
  EXPECT_TRUE(bitwise_equal(loaded.second, saved.second));
}

TEST(CheckpointTest, LoadsHubStyleNamesWithoutTrainingState) {
  // A Hugging Face hub export names GPT2Model's tensors without "transformer."
  // and has no train_state.json; a weights-only load accepts it.
  TempDir dir;
  const GptLayout layout = full_layout(small_config());
  const Buffers saved(layout);
  const std::string step_dir =
      save_checkpoint(dir / "ckpt", layout, saved.params.data(), nullptr, nullptr, {});
  fs::create_directories(dir.path() / "hub");
  fs::copy_file(step_dir + "/config.json", dir.path() / "hub/config.json");
  const SafetensorsFile model = SafetensorsFile::open(step_dir + "/model.safetensors");
  std::vector<std::vector<float>> data;
  data.reserve(model.tensors().size());
  SafetensorsWriter hub;
  for (const SafetensorsTensor& tensor : model.tensors()) {
    data.emplace_back(tensor.num_elements());
    model.read(tensor.name, data.back().data(), tensor.shape);
    hub.add_view(tensor.name.substr(std::string("transformer.").size()), tensor.shape,
                 data.back().data());
  }
  hub.write(dir / "hub/model.safetensors");
  std::vector<float> params(layout.num_elements());
  EXPECT_EQ(load_checkpoint(dir / "hub", layout, params.data(), nullptr, nullptr).step, 0);
  EXPECT_TRUE(bitwise_equal(params, saved.params));
}

// ---- atomicity ----

TEST(CheckpointTest, LeftoverTemporaryDirectoryDoesNotBreakLatest) {
  TempDir dir;
  const GptLayout layout = full_layout(small_config());
  const Buffers saved(layout);
  save_checkpoint(dir / "ckpt", layout, saved.params.data(), saved.first.data(),
                  saved.second.data(), TrainState{.step = 1});
  // A save of step 2 that crashed half-way: a partial temporary directory.
  fs::create_directories(dir.path() / "ckpt/step_00000002.tmp-4242-0");
  write_bytes(dir.path() / "ckpt/step_00000002.tmp-4242-0/model.safetensors", "partial");
  Buffers loaded(layout, 2.0f);
  EXPECT_EQ(load_checkpoint(dir / "ckpt", layout, loaded.params.data(), loaded.first.data(),
                            loaded.second.data())
                .step,
            1);
  EXPECT_TRUE(bitwise_equal(loaded.params, saved.params));
  // The next save of step 2 succeeds beside the leftover.
  save_checkpoint(dir / "ckpt", layout, saved.params.data(), saved.first.data(),
                  saved.second.data(), TrainState{.step = 2});
  EXPECT_EQ(read_bytes(dir.path() / "ckpt/latest"), "step_00000002\n");
  EXPECT_EQ(resolve_checkpoint(dir / "ckpt"), dir / "ckpt/step_00000002");
}

// A pid no process has: a child that has exited and been reaped.
pid_t finished_process() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

// Saves step `step` of `buffers` to DIR/ckpt.
void save_step(const TempDir& dir, const GptLayout& layout, const Buffers& buffers, int64_t step) {
  save_checkpoint(dir / "ckpt", layout, buffers.params.data(), buffers.first.data(),
                  buffers.second.data(), TrainState{.step = step});
}

TEST(CheckpointTest, ALaterSaveRemovesWhatKilledSavesLeftBehind) {
  TempDir dir;
  const GptLayout layout = full_layout(small_config());
  save_step(dir, layout, Buffers(layout), 1);
  // Saves killed part-way (their processes are gone), and one still being
  // written by a live process (this test's parent), which must stay.
  const std::string dead = std::to_string(finished_process());
  const std::string live = std::to_string(::getppid());
  for (const std::string& name :
       {"step_00000002.tmp-" + dead + "-0", "step_00000001.tmp-" + dead + "-3",
        "step_00000003.tmp-" + live + "-0"}) {
    fs::create_directories(dir.path() / "ckpt" / name);
    write_bytes(dir.path() / "ckpt" / name / "model.safetensors", "partial");
  }
  write_bytes(dir.path() / "ckpt" / ("latest.tmp-" + dead + "-1"), "step_0000");
  // Not a save's temporary: the user's own files stay whatever their names.
  write_bytes(dir.path() / "ckpt" / ("notes.tmp-" + dead + "-0"), "mine");
  save_step(dir, layout, Buffers(layout), 4);
  EXPECT_EQ(entries(dir.path() / "ckpt"),
            (std::vector<std::string>{"latest", "notes.tmp-" + dead + "-0", "step_00000001",
                                      "step_00000003.tmp-" + live + "-0", "step_00000004"}));
}

TEST(CheckpointTest, LatestMovesOnlyAfterTheStepDirectoryIsComplete) {
  TempDir dir;
  const GptLayout layout = full_layout(small_config());
  const Buffers saved(layout);
  save_checkpoint(dir / "ckpt", layout, saved.params.data(), saved.first.data(),
                  saved.second.data(), TrainState{.step = 2});
  // A plain file where step 3's directory must go makes the final rename fail.
  write_bytes(dir.path() / "ckpt/step_00000003", "in the way");
  EXPECT_TRUE(contains(error_of([&] {
                         save_checkpoint(dir / "ckpt", layout, saved.params.data(),
                                         saved.first.data(), saved.second.data(),
                                         TrainState{.step = 3});
                       }),
                       "step_00000003"));
  EXPECT_EQ(read_bytes(dir.path() / "ckpt/latest"), "step_00000002\n");
  // The failed save removed its temporary directory.
  EXPECT_EQ(entries(dir.path() / "ckpt"),
            (std::vector<std::string>{"latest", "step_00000002", "step_00000003"}));
}

TEST(CheckpointTest, AWriterFencedOutPublishesNothing) {
  // before_publish throws (the directory was taken by another run): step 3
  // is not published, latest stays, and nothing is left aside.
  TempDir dir;
  const GptLayout layout = full_layout(small_config());
  const Buffers saved(layout);
  save_checkpoint(dir / "ckpt", layout, saved.params.data(), saved.first.data(),
                  saved.second.data(), TrainState{.step = 2});
  int asked = 0;
  EXPECT_EQ(error_of([&] {
              save_checkpoint(dir / "ckpt", layout, saved.params.data(), saved.first.data(),
                              saved.second.data(), TrainState{.step = 3}, [&] {
                                ++asked;
                                throw std::runtime_error("fenced out");
                              });
            }),
            "fenced out");
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(read_bytes(dir.path() / "ckpt/latest"), "step_00000002\n");
  EXPECT_EQ(entries(dir.path() / "ckpt"), (std::vector<std::string>{"latest", "step_00000002"}));
}

TEST(CheckpointTest, SavingTheSameStepAgainReplacesIt) {
  TempDir dir;
  const GptLayout layout = full_layout(small_config());
  const Buffers first(layout), second(layout, 0.5f);
  save_checkpoint(dir / "ckpt", layout, first.params.data(), first.first.data(),
                  first.second.data(), TrainState{.step = 5});
  save_checkpoint(dir / "ckpt", layout, second.params.data(), second.first.data(),
                  second.second.data(), TrainState{.step = 5, .next_train_sample = 40});
  EXPECT_EQ(entries(dir.path() / "ckpt"), (std::vector<std::string>{"latest", "step_00000005"}));
  Buffers loaded(layout, 3.0f);
  EXPECT_EQ(load_checkpoint(dir / "ckpt", layout, loaded.params.data(), loaded.first.data(),
                            loaded.second.data())
                .next_train_sample,
            40);
  EXPECT_TRUE(bitwise_equal(loaded.params, second.params));
}

TEST(CheckpointTest, OldStepDirectoriesAreKept) {
  TempDir dir;
  const GptLayout layout = full_layout(small_config());
  const Buffers saved(layout);
  for (int64_t step : {10, 20, 30, 40})
    save_checkpoint(dir / "ckpt", layout, saved.params.data(), nullptr, nullptr,
                    TrainState{.step = step});
  EXPECT_EQ(entries(dir.path() / "ckpt"),
            (std::vector<std::string>{"latest", "step_00000010", "step_00000020", "step_00000030",
                                      "step_00000040"}));
  EXPECT_EQ(resolve_checkpoint(dir / "ckpt"), dir / "ckpt/step_00000040");
}

// ---- errors ----

class CheckpointErrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    step_dir_ = save_checkpoint(dir_ / "ckpt", layout_, saved_.params.data(), saved_.first.data(),
                                saved_.second.data(), TrainState{.step = 10});
  }
  std::string load_error(const GptLayout& layout) {
    Buffers loaded(layout);
    return error_of([&] {
      load_checkpoint(dir_ / "ckpt", layout, loaded.params.data(), loaded.first.data(),
                      loaded.second.data());
    });
  }
  std::string load_error() { return load_error(layout_); }

  TempDir dir_;
  GptLayout layout_ = full_layout(small_config());
  Buffers saved_{layout_};
  std::string step_dir_;
};

TEST_F(CheckpointErrorTest, MismatchedConfigNamesEachField) {
  TransformerConfig config = small_config();
  config.num_layers = 4;
  EXPECT_EQ(load_error(full_layout(config)),
            step_dir_ + "/config.json: n_layer is 2 but the plan's model has 4 layers");
  config.num_heads = 4;
  config.seq_len = 16;
  EXPECT_EQ(load_error(full_layout(config)),
            step_dir_ + "/config.json: n_positions is 8 but the plan's model has 16 seq_len\n" +
                step_dir_ + "/config.json: n_layer is 2 but the plan's model has 4 layers\n" +
                step_dir_ + "/config.json: n_head is 2 but the plan's model has 4 heads");
}

TEST_F(CheckpointErrorTest, MissingFilesAreNamed) {
  fs::remove(step_dir_ + "/model.safetensors");
  EXPECT_EQ(load_error(),
            step_dir_ +
                "/model.safetensors: cannot read the safetensors file: No such file or "
                "directory");
  fs::remove(step_dir_ + "/config.json");
  EXPECT_EQ(load_error(), step_dir_ +
                              "/config.json: cannot read model config (missing; the checkpoint is "
                              "incomplete)");
}

TEST_F(CheckpointErrorTest, MissingTrainStateIsNamedWhenResuming) {
  fs::remove(step_dir_ + "/train_state.json");
  EXPECT_TRUE(contains(load_error(), step_dir_ + "/train_state.json: cannot read training state"));
}

TEST_F(CheckpointErrorTest, TruncatedSafetensorsIsNamed) {
  const std::string path = step_dir_ + "/optimizer.safetensors";
  fs::resize_file(path, fs::file_size(path) - 10);
  const std::string error = load_error();
  EXPECT_TRUE(contains(error, path + ": tensor 'exp_avg_sq.transformer.ln_f.bias'"));
  EXPECT_TRUE(contains(error, "(truncated?)"));
}

TEST_F(CheckpointErrorTest, MissingTensorIsNamed) {
  // A model file lacking one tensor the plan needs.
  const SafetensorsFile model = SafetensorsFile::open(step_dir_ + "/model.safetensors");
  std::vector<std::vector<float>> data;
  data.reserve(model.tensors().size());
  SafetensorsWriter partial;
  for (const SafetensorsTensor& tensor : model.tensors()) {
    if (tensor.name == "transformer.h.1.mlp.c_fc.bias") continue;
    data.emplace_back(tensor.num_elements());
    model.read(tensor.name, data.back().data(), tensor.shape);
    partial.add_view(tensor.name, tensor.shape, data.back().data());
  }
  partial.write(step_dir_ + "/model.safetensors");
  EXPECT_TRUE(contains(load_error(), step_dir_ + "/model.safetensors: missing tensor "
                                                 "'transformer.h.1.mlp.c_fc.bias'"));
}

TEST_F(CheckpointErrorTest, CorruptJsonIsNamed) {
  write_bytes(step_dir_ + "/train_state.json", "{\"step\": ");
  EXPECT_TRUE(contains(load_error(), step_dir_ + "/train_state.json: training state is not valid "
                                                 "JSON"));
  write_bytes(step_dir_ + "/train_state.json",
              R"({"format_version": 2, "step": 1, "next_train_sample": 0, "seed": 0})");
  EXPECT_TRUE(contains(load_error(), "format_version 2 is not supported"));
  write_bytes(step_dir_ + "/config.json", R"({"model_type": "gpt2", "n_embd": 8})");
  EXPECT_EQ(error_of([&] { read_checkpoint_config(step_dir_); }),
            step_dir_ + "/config.json: missing field 'vocab_size'");
  write_bytes(step_dir_ + "/config.json", R"({"model_type": "gemma"})");
  EXPECT_TRUE(contains(error_of([&] { read_checkpoint_config(step_dir_); }),
                       "model_type is 'gemma' but paraplan loads 'gpt2', 'llama', 'mistral' and "
                       "'qwen2' checkpoints"));
  write_bytes(step_dir_ + "/config.json", R"({"model_type": "llama", "vocab_size": 8})");
  EXPECT_EQ(error_of([&] { read_checkpoint_config(step_dir_); }),
            step_dir_ + "/config.json: missing field 'hidden_size'");
}

// config.json as a hostile or broken file may have it: every size is checked
// with the plan's rules (runtime/model/model_config.h) before anything divides
// by it or allocates for it, and the message names the file and the key.
TEST_F(CheckpointErrorTest, ConfigSizesAreValidatedNamingTheKey) {
  const std::string path = step_dir_ + "/config.json";
  const nlohmann::json good = nlohmann::json::parse(read_bytes(path));
  const auto config_error = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json edited = good;
    edited[key] = value;
    write_bytes(path, edited.dump());
    return error_of([&] { read_checkpoint_config(step_dir_); });
  };
  EXPECT_EQ(config_error("n_head", 0), path + ": n_head: 0; must be positive");
  EXPECT_EQ(config_error("n_layer", (int64_t{1} << 32) + 2),
            path +
                ": n_layer: 4294967298; must be at most 4096, the most layers paraplan plans "
                "(the stage partition is quadratic in layers)");
  EXPECT_EQ(config_error("n_head", 3),
            path + ": n_embd: 8 is not divisible by n_head 3; n_embd must be a multiple of n_head");
  EXPECT_EQ(config_error("n_embd", -8), path + ": n_embd: -8; must be positive");
  EXPECT_EQ(config_error("n_inner", 2147483647),
            path +
                ": n_inner: 2147483647; must be at most 16777216 (2^24), the largest size "
                "paraplan builds (larger sizes would overflow the model's element counts)");
  EXPECT_EQ(config_error("vocab_size", "many"),
            path + ": field 'vocab_size' is \"many\", expected an integer");
  EXPECT_EQ(config_error("layer_norm_epsilon", 0.0),
            path + ": layer_norm_epsilon: 0; must be a positive finite float");
  EXPECT_EQ(config_error("tie_word_embeddings", "yes"),
            path + ": field 'tie_word_embeddings' is \"yes\", expected true or false");
}

TEST_F(CheckpointErrorTest, TrainStateOutOfRangeIsRefused) {
  const std::string path = step_dir_ + "/train_state.json";
  const auto state_error = [&](const std::string& step, const std::string& sample) {
    write_bytes(path, R"({"format_version": 1, "seed": 1, "step": )" + step +
                          R"(, "next_train_sample": )" + sample + "}");
    return load_error();
  };
  EXPECT_EQ(state_error("2147483648", "0"),
            path + ": field 'step' is 2147483648, out of range (valid: 0 to 2147483646)");
  EXPECT_EQ(state_error("-1", "0"), path +
                                        ": field 'step' is -1, out of range (valid: 0 to "
                                        "2147483646)");
  EXPECT_EQ(state_error("3", "9223372036854775800"),
            path +
                ": field 'next_train_sample' is 9223372036854775800, out of range (valid: 0 "
                "to 4611686018427387904)");
  EXPECT_EQ(state_error("3", "18446744073709551615"),
            path +
                ": field 'next_train_sample' is 18446744073709551615, out of range (valid: 0 "
                "to 4611686018427387904)");
  EXPECT_EQ(state_error("3", "4611686018427387904"), "<no exception>");
}

// 'latest' names a step directory of its own checkpoint directory, nothing else.
TEST_F(CheckpointErrorTest, LatestIsConfinedToTheCheckpointDirectory) {
  const std::string latest = dir_ / "ckpt/latest";
  const auto resolve_error = [&](const std::string& contents) {
    write_bytes(latest, contents);
    return error_of([&] { resolve_checkpoint(dir_ / "ckpt"); });
  };
  const std::string valid = "; it must hold one line such as step_00000100";
  EXPECT_EQ(resolve_error("../../etc\n"), latest +
                                              " holds '../../etc', not the name of a step "
                                              "directory of " +
                                              dir_ / "ckpt" + valid);
  EXPECT_EQ(resolve_error("/etc\n"),
            latest + " holds '/etc', not the name of a step directory of " + dir_ / "ckpt" + valid);
  EXPECT_EQ(resolve_error("step_00000010/../../..\n"),
            latest + " holds 'step_00000010/../../..', not the name of a step directory of " +
                dir_ / "ckpt" + valid);
  EXPECT_EQ(resolve_error(std::string("\xff\x00step\n\x01", 8)),
            latest + " holds '\\xff\\x00step\\x0a\\x01', not the name of a step directory of " +
                dir_ / "ckpt" + valid);
  EXPECT_EQ(resolve_error(std::string(5000, 'x')),
            latest +
                ": cannot read the checkpoint 'latest' file: it is 5000 bytes, more than the "
                "4096 bytes a checkpoint 'latest' file may hold");
  write_bytes(latest, "step_00000010\n");
  EXPECT_EQ(resolve_checkpoint(dir_ / "ckpt"), step_dir_);
}

TEST_F(CheckpointErrorTest, ResolveNamesWhatIsWrong) {
  EXPECT_EQ(resolve_checkpoint(dir_ / "ckpt"), step_dir_);
  EXPECT_EQ(resolve_checkpoint(step_dir_), step_dir_);
  EXPECT_EQ(error_of([&] { resolve_checkpoint(dir_ / "nowhere"); }),
            dir_ / "nowhere" + ": checkpoint path does not exist");
  fs::create_directories(dir_.path() / "empty");
  EXPECT_TRUE(contains(error_of([&] { resolve_checkpoint(dir_ / "empty"); }),
                       dir_ / "empty" + ": not a checkpoint"));
  write_bytes(dir_.path() / "ckpt/latest", "step_00000099\n");
  EXPECT_EQ(error_of([&] { resolve_checkpoint(dir_ / "ckpt"); }),
            dir_ / "ckpt/latest" + " names step_00000099 but " + dir_ / "ckpt/step_00000099" +
                " does not exist");
  write_bytes(dir_.path() / "ckpt/latest", " \n");
  EXPECT_TRUE(contains(error_of([&] { resolve_checkpoint(dir_ / "ckpt"); }), "latest is empty"));
}

}  // namespace
}  // namespace paraplan

// model_from_test.cc: `paraplan plan --model-from DIR` (launcher/model_from.h):
// the job's [model] from a Hugging Face config.json. A checkpoint paraplan
// wrote plans back to the model it was trained as; Qwen2.5's, Mistral's and
// GPT-2's config.json (as the hub ships them, no weights needed) give their
// shapes; the job keeps seq_len and dtype, and every other [model] key, one
// too long a seq_len and a missing one are refused naming the file (or the
// command line) and the key.
#include <string>

#include "command_fixture.h"

namespace {

using namespace paraplan::testing;
using nlohmann::json;

// A job with no model but its context and precision.
const char* kJob = R"([job]
name = "from-hf"

[model]
seq_len = 32
dtype = "bfloat16"

[training]
global_batch_size = 4
micro_batch_size = 2
total_steps = 10
)";

// Qwen2.5-0.5B's config.json as the hub has it.
const char* kQwen = R"({"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896,
  "initializer_range": 0.02, "intermediate_size": 4864, "max_position_embeddings": 32768,
  "max_window_layers": 24, "model_type": "qwen2", "num_attention_heads": 14,
  "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

// Mistral 7B v0.1's.
const char* kMistral = R"({"architectures": ["MistralForCausalLM"], "bos_token_id": 1,
  "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 32000})";

// GPT-2 124M's.
const char* kGpt2 = R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
  "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768,
  "n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257})";

class ModelFrom : public CommandTest {
 protected:
  // Writes `config` as DIR/config.json and the job, plans; returns the result.
  CommandResult plan(const std::string& config, const std::string& job = kJob,
                     const std::string& extra = "") {
    std::filesystem::create_directories(dir_ / "model");
    write_file(dir_ / "model" / "config.json", config);
    write_file(dir_ / "job.toml", job);
    return run("plan --config " + path("job.toml") + " --model-from " + path("model") +
               " --output " + path("job.pplan") + extra);
  }
  json model_of(const std::string& plan_file) {
    const CommandResult inspected = run("inspect " + plan_file + " --json");
    EXPECT_EQ(inspected.exit_code, 0) << inspected.output;
    return json::parse(inspected.output)["model"];
  }
};

TEST_F(ModelFrom, QwenTwoPlansWithItsShapeAndTheJobsContext) {
  const CommandResult planned = plan(kQwen);
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  const json model = model_of(path("job.pplan"));
  EXPECT_EQ(model["architecture"], "llama");
  EXPECT_EQ(model["vocab_size"], 151936);
  EXPECT_EQ(model["num_layers"], 24);
  EXPECT_EQ(model["d_model"], 896);
  EXPECT_EQ(model["num_heads"], 14);
  EXPECT_EQ(model["num_kv_heads"], 2);
  EXPECT_EQ(model["ffn_size"], 4864);
  EXPECT_EQ(model["tied_embeddings"], true);
  EXPECT_EQ(model["qkv_bias"], true);
  EXPECT_EQ(model["rope_theta"], 1000000.0);
  EXPECT_NEAR(model["layernorm_epsilon"].get<double>(), 1e-6, 1e-12);  // the norm's epsilon
  EXPECT_EQ(model["seq_len"], 32);                                     // the job's
  EXPECT_EQ(model["dtype"], "bfloat16");                               // the job's
  EXPECT_NE(planned.output.find("(2 KV heads, q/k/v biases)"), std::string::npos);
  // The config.json itself does as well as its directory.
  EXPECT_EQ(run("plan --config " + path("job.toml") + " --model-from " + path("model/config.json") +
                " --output " + path("again.pplan"))
                .exit_code,
            0);
  EXPECT_EQ(model_of(path("again.pplan")), model);
}

TEST_F(ModelFrom, MistralsSlidingWindowBoundsTheContext) {
  // 7B parameters' training state is beyond one CPU rank's 32 GB.
  const CommandResult planned = plan(kMistral, kJob, " --planner.consider_mem false");
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  EXPECT_EQ(model_of(path("job.pplan"))["num_kv_heads"], 8);
  std::string long_job = kJob;
  long_job.replace(long_job.find("seq_len = 32"), 12, "seq_len = 8192");
  expect_clear_error(plan(kMistral, long_job),
                     {"job.toml: [model] seq_len 8192 is longer than", "model/config.json",
                      "at most 4096 (max_position_embeddings 32768 and sliding_window 4096"});
  std::string no_context = kJob;
  no_context.replace(no_context.find("seq_len = 32\n"), 13, "");
  expect_clear_error(plan(kMistral, no_context),
                     {"job.toml: [model] seq_len is required with --model-from: the training "
                      "context, at most 4096"});
  // A seq_len from the command line is named as such.
  expect_clear_error(plan(kMistral, kJob, " --model.seq_len 40000"),
                     {"command line (--model.seq_len): [model] seq_len 40000 is longer than"});
  // A job file that does not parse is reported as without --model-from.
  expect_clear_error(plan(kMistral, "[model\nseq_len = 32\n"), {"job.toml:1:", "TOML syntax"});
}

TEST_F(ModelFrom, GptTwoTakesItsPositionsAsTheContext) {
  std::string job = kJob;
  job.replace(job.find("seq_len = 32\n"), 13, "");
  ASSERT_EQ(plan(kGpt2, job).exit_code, 0);
  const json model = model_of(path("job.pplan"));
  EXPECT_EQ(model["architecture"], "gpt2");
  EXPECT_EQ(model["seq_len"], 1024);
  EXPECT_EQ(model["d_model"], 768);
  EXPECT_EQ(model["ffn_size"], 3072);
  expect_clear_error(plan(kGpt2), {"job.toml: [model] seq_len is 32 but",
                                   "is GPT-2 with n_positions 1024, its learned positions"});
}

TEST_F(ModelFrom, TheJobMayNotSayWhatTheModelSays) {
  std::string job = kJob;
  job.replace(job.find("seq_len = 32\n"), 13, "seq_len = 32\nd_model = 512\n");
  expect_clear_error(plan(kQwen, job),
                     {"job.toml: [model] d_model is set, but with --model-from the model is",
                      "remove it (the job keeps seq_len and dtype)"});
  expect_clear_error(plan(kQwen, kJob, " --model.num_layers 2"),
                     {"command line (--model.num_layers): [model] num_layers is set"});
  // The job's own keys may be overridden as always.
  EXPECT_EQ(plan(kQwen, kJob, " --model.seq_len 64").exit_code, 0);
  EXPECT_EQ(model_of(path("job.pplan"))["seq_len"], 64);
  write_file(dir_ / "model" / "config.json", R"({"model_type": "gemma"})");
  expect_clear_error(run("plan --config " + path("job.toml") + " --model-from " + path("model") +
                         " --output " + path("x.pplan")),
                     {"model/config.json: model_type is 'gemma'"});
}

// A checkpoint paraplan wrote plans back to the model it was trained as.
TEST_F(ModelFrom, APlanFromACheckpointHasTheCheckpointsModel) {
  std::string job = kTinyJob;
  job.replace(job.find("[model]\n"), 8,
              "[model]\narchitecture = \"llama\"\nnum_kv_heads = 2\nffn_size = 64\n"
              "qkv_bias = true\nrope_theta = 500000.0\nrms_norm_eps = 1e-6\n");
  tokenize_and_plan(job);
  ASSERT_EQ(run("train --plan " + path("job.pplan") + " --data " + path("data/train.bin") +
                " --steps 1 --checkpoint-dir " + path("ckpt"))
                .exit_code,
            0);
  write_file(dir_ / "again.toml",
             "[model]\nseq_len = 16\n[training]\nglobal_batch_size = 4\ntotal_steps = 10\n");
  // The checkpoint directory stands for its latest step, as for train --init-from.
  const CommandResult planned = run("plan --config " + path("again.toml") + " --model-from " +
                                    path("ckpt") + " --output " + path("again.pplan"));
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  json original = model_of(path("job.pplan"));
  json again = model_of(path("again.pplan"));
  EXPECT_EQ(again, original);
}

}  // namespace

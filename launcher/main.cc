// main.cc: the `paraplan` command: tokenize, plan, inspect, train, evaluate,
// replay, profile, autotune, launch, preflight, sample.
//
// Each subcommand is a thin shell over the planner or the runtime. Every
// failure ends here as one line, "paraplan: error: <message>", and exit
// status 1; usage errors print CLI11's help hint and exit 2.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "launcher/autotune.h"
#include "launcher/launch.h"
#include "launcher/model_from.h"
#include "launcher/preflight.h"
#include "launcher/profile_command.h"
#include "planner/job/job_config.h"
#include "planner/planner.h"
#include "planner/replan.h"
#include "runtime/measure/replay.h"
#include "runtime/tokenizer/bpe_tokenizer.h"
#include "runtime/tokenizer/corpus.h"
#include "runtime/train/evaluator.h"
#include "runtime/train/sampler.h"
#include "runtime/train/trainer.h"
#include "schema/plan_io.h"

namespace {

using namespace paraplan;

struct TokenizeArguments {
  std::vector<std::string> inputs;
  std::string output = "data";
  std::string tokenizer;  // empty: byte-level
  TokenizeOptions options;
};

struct PlanArguments {
  std::string config;
  std::string model_from;  // launcher/model_from.h
  std::string output;
  int what_if_lost_nodes = 0;
};

struct InspectArguments {
  std::string plan;
  bool json = false;
};

// --collective-timeout and --transport for the commands that run a plan.
void add_communication_options(CLI::App& command, double& timeout_seconds, std::string& transport) {
  command
      .add_option("--collective-timeout", timeout_seconds,
                  "seconds a collective or pipeline transfer may take before the job ends "
                  "naming the rank, group and operation; 0 waits forever")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command
      .add_option("--transport", transport,
                  "how ranks talk: auto (MPI for cpu; NCCL for cuda, or MPI staged through "
                  "pinned host memory when ranks share a GPU), mpi, nccl, staged")
      ->check(CLI::IsMember({"auto", "mpi", "nccl", "staged"}))
      ->capture_default_str();
}

void run_tokenize(const TokenizeArguments& args) {
  std::optional<BpeTokenizer> tokenizer;
  TokenizeOptions options = args.options;
  if (!args.tokenizer.empty()) {
    if (options.vocab_size != kByteVocabSize)
      throw std::runtime_error(
          "tokenize: --vocab-size is for byte-level tokens; with --tokenizer "
          "the tokenizer's vocabulary decides the format");
    tokenizer = BpeTokenizer::from_file(args.tokenizer);
    options.tokenizer = &*tokenizer;
  }
  const auto start = std::chrono::steady_clock::now();
  // A line on stderr at most every 10 s: a 10B-token corpus takes most of
  // an hour, and a silent one looks stuck.
  auto last_line = start;
  options.progress = [&](const TokenizeProgress& p) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_line < std::chrono::seconds(10)) return;
    last_line = now;
    const double seconds = std::chrono::duration<double>(now - start).count();
    const double rate = static_cast<double>(p.input_bytes_done) / seconds;
    const double left =
        rate > 0 ? static_cast<double>(p.input_bytes - p.input_bytes_done) / rate : 0;
    std::cerr << "tokenize: " << p.files_done << "/" << p.files << " file(s), " << std::fixed
              << std::setprecision(2) << static_cast<double>(p.input_bytes_done) / 1e9 << "/"
              << static_cast<double>(p.input_bytes) / 1e9 << " GB of input, " << p.documents
              << " documents, " << std::setprecision(1) << static_cast<double>(p.tokens) / 1e6
              << "M tokens, " << rate / 1e6 << " MB/s, about " << std::setprecision(0)
              << std::ceil(left / 60) << " min left" << std::endl;
  };
  const TokenizeResult result = tokenize_files(args.inputs, args.output, options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "tokenized " << result.files_read.size() << " file(s)";
  if (tokenizer)
    std::cout << ", " << result.documents << " document(s), " << result.text_bytes
              << " bytes of text, with " << tokenizer->description() << ", each document after "
              << result.separator_name << " (" << result.separator_token << ")";
  auto files = [](int count) {
    return count > 1 ? " (" + std::to_string(count) + " files)" : std::string();
  };
  std::cout << ": " << result.train_tokens << " train tokens -> " << result.train_path
            << files(result.train_files) << ", " << result.val_tokens << " validation tokens -> "
            << result.val_path << files(result.val_files)
            << (result.uint32_tokens ? " (Llama 3 format, uint32 tokens)" : "") << "\n";
  if (tokenizer)
    std::cout << std::fixed << std::setprecision(2)
              << static_cast<double>(result.text_bytes) /
                     static_cast<double>(
                         std::max<int64_t>(1, result.train_tokens + result.val_tokens))
              << " bytes per token, " << std::setprecision(1)
              << static_cast<double>(result.text_bytes) / 1e6 / std::max(seconds, 1e-9)
              << " MB of text per second\n";
  if (result.invalid_utf8_bytes > 0)
    std::cout << "note: " << result.invalid_utf8_bytes
              << " byte(s) were not valid UTF-8; each is encoded as its byte token\n";
  std::cout << "unigram entropy of the training tokens: " << std::fixed << std::setprecision(3)
            << result.train_unigram_entropy
            << " nats/token (the loss of a model that ignores context)" << std::endl;
}

void run_plan(const PlanArguments& args, const std::vector<std::string>& extras) {
  std::vector<std::string> unknown;
  const std::vector<ConfigOverride> overrides = parse_override_arguments(extras, &unknown);
  if (!unknown.empty())
    throw std::runtime_error("plan: unexpected argument '" + unknown.front() +
                             "'; overrides take the form --section.key value");
  const JobConfig config =
      load_job_config(args.config, with_model_from(args.model_from, args.config, overrides));
  const PlanOutcome outcome = plan_job(config);
  std::string output = args.output;
  if (output.empty()) output = config.planner.save_plan_path;
  if (output.empty())
    throw std::runtime_error("plan: no output file; give --output FILE or planner.save_plan_path");
  write_plan(output, outcome.plan.data(), outcome.plan.size());
  const LoadedPlan loaded = load_plan(output);  // what the runtime will read, validated
  std::cout << outcome.report << plan_to_table(loaded.plan()) << "plan written to " << output
            << std::endl;
  if (args.what_if_lost_nodes > 0)
    std::cout << what_if_lost_nodes(loaded.plan(), output, args.what_if_lost_nodes) << std::flush;
}

void run_inspect(const InspectArguments& args) {
  const LoadedPlan loaded = load_plan(args.plan);
  if (args.json)
    // The plan's strings were checked as UTF-8 when it loaded; replace keeps
    // anything else from ever surfacing as the JSON library's exception.
    std::cout
        << plan_to_json(loaded.plan()).dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
        << std::endl;
  else
    std::cout << plan_to_table(loaded.plan());
}

// Every subcommand's arguments and its parser, filled by the add_*_command
// functions below and read once the command line is parsed.
struct CommandLine {
  TokenizeArguments tokenize;
  CLI::App* tokenize_command = nullptr;
  PlanArguments plan;
  CLI::App* plan_command = nullptr;
  InspectArguments inspect;
  CLI::App* inspect_command = nullptr;
  TrainOptions train_options;
  CLI::App* train_command = nullptr;
  ReplayOptions replay_options;
  CLI::App* replay_command = nullptr;
  ProfileArguments profile;
  CLI::App* profile_command = nullptr;
  AutotuneOptions autotune;
  CLI::App* autotune_command = nullptr;
  LaunchOptions launch_options;
  CLI::App* launch_command = nullptr;
  std::vector<std::string> preflight_files;
  bool preflight_gpus = false;
  SharedDirectory preflight_shared;
  CLI::App* preflight_command = nullptr;
  SampleOptions sample_options;
  CLI::App* sample_command = nullptr;
  EvaluateOptions evaluate_options;
  CLI::App* evaluate_command = nullptr;
};

void add_tokenize_command(CLI::App& app, CommandLine& c) {
  c.tokenize_command = app.add_subcommand(
      "tokenize", "text -> train.bin, val.bin: byte-level tokens, or a BPE tokenizer's");
  c.tokenize_command
      ->add_option("--input", c.tokenize.inputs,
                   "text files, .jsonl files (a document per line), .parquet files (a "
                   "document per row, as Hugging Face datasets ship them) or directories")
      ->required();
  c.tokenize_command->add_option("--output", c.tokenize.output, "output directory")
      ->capture_default_str();
  c.tokenize_command
      ->add_option("--val-fraction", c.tokenize.options.val_fraction,
                   "share of the corpus (its end) held out for validation")
      ->capture_default_str();
  c.tokenize_command
      ->add_option("--vocab-size", c.tokenize.options.vocab_size,
                   "byte-level: the model's vocabulary; above 65536 the files hold uint32 "
                   "tokens (llm.c's Llama 3 format)")
      ->capture_default_str();
  CLI::Option* tokenizer = c.tokenize_command->add_option(
      "--tokenizer", c.tokenize.tokenizer,
      "a Hugging Face tokenizer.json or a tiktoken file (gpt2.tiktoken, Llama 3's "
      "tokenizer.model): byte-level BPE of GPT-2, Llama 3 or Qwen 2, or the "
      "SentencePiece-style BPE of Llama 2 or Mistral (tokenizer.json, or SentencePiece's "
      "tokenizer.model)");
  c.tokenize_command
      ->add_option("--document-separator", c.tokenize.options.document_separator,
                   "the special token before each document (default <|endoftext|>, "
                   "<|begin_of_text|> for Llama 3, <s> for Llama 2 and Mistral)")
      ->needs(tokenizer);
  c.tokenize_command
      ->add_option("--text-field", c.tokenize.options.text_field,
                   "the field of a .jsonl line (the column of a .parquet file) holding the "
                   "document")
      ->capture_default_str();
  c.tokenize_command
      ->add_option("--shard-tokens", c.tokenize.options.shard_tokens,
                   "with --tokenizer: shards of this many tokens (train_000000.bin, ...); 0: one "
                   "file per split up to 2^31 - 1 tokens")
      ->check(CLI::NonNegativeNumber)
      ->needs(tokenizer)
      ->capture_default_str();
  c.tokenize_command
      ->add_option("--threads", c.tokenize.options.threads,
                   "encoding threads (0: one per hardware thread)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

// --model-from of the commands that plan (launcher/model_from.h).
void add_model_from_option(CLI::App& command, std::string& model_from) {
  command.add_option("--model-from", model_from,
                     "a Hugging Face model directory (or its config.json): the job's [model]");
}

void add_plan_command(CLI::App& app, CommandLine& c) {
  c.plan_command =
      app.add_subcommand("plan", "job.toml -> plan file; override any key as --section.key value");
  c.plan_command->add_option("--config", c.plan.config, "job.toml")->required();
  add_model_from_option(*c.plan_command, c.plan.model_from);
  c.plan_command->add_option("--output", c.plan.output, "the plan file to write (.pplan)");
  c.plan_command
      ->add_option("--what-if-lost-nodes", c.plan.what_if_lost_nodes,
                   "also print the plan this job falls back to on N fewer nodes")
      ->check(CLI::PositiveNumber);
  c.plan_command->allow_extras();
}

void add_inspect_command(CLI::App& app, CommandLine& c) {
  c.inspect_command = app.add_subcommand("inspect", "print a plan as a table or JSON");
  c.inspect_command->add_option("plan", c.inspect.plan, "plan file")->required();
  c.inspect_command->add_flag("--json", c.inspect.json, "every field as JSON");
}

void add_train_command(CLI::App& app, CommandLine& c) {
  c.train_command = app.add_subcommand("train", "train as the plan says");
  c.train_command->add_option("--plan", c.train_options.plan_path, "plan file")->required();
  c.train_command->add_option("--data", c.train_options.data_path,
                              "training tokens: a file, a quoted glob ('train_*.bin') or a "
                              "comma-separated list (default: the job's [data] train)");
  c.train_command->add_option("--val-data", c.train_options.validation_data_path,
                              "validation tokens, as --data (default: the job's [data] "
                              "validation)");
  c.train_command->add_option("--steps", c.train_options.steps,
                              "train until this step (default: the plan's total_steps)");
  c.train_command->add_option("--checkpoint-dir", c.train_options.checkpoint_dir,
                              "where checkpoints go (and --resume reads)");
  c.train_command->add_option("--checkpoint-every", c.train_options.checkpoint_every,
                              "save every K steps (and always at the end)");
  c.train_command->add_option("--checkpoint-every-seconds",
                              c.train_options.checkpoint_every_seconds,
                              "also save once S seconds have passed since the last save");
  c.train_command
      ->add_option("--checkpoint-keep-latest", c.train_options.checkpoint_keep_latest,
                   "keep only the newest K checkpoints, removing older ones after "
                   "each save (0: keep all)")
      ->capture_default_str();
  c.train_command->add_flag("--checkpoint-async", c.train_options.checkpoint_async,
                            "write checkpoints in the background from a copy in host memory "
                            "while training goes on (the last in line)");
  c.train_command->add_flag("--resume", c.train_options.resume,
                            "continue from the latest checkpoint in --checkpoint-dir");
  c.train_command->add_flag("--accept-data-order-change", c.train_options.accept_data_order_change,
                            "resume even though the data order (files, blend, shuffle, seed) "
                            "differs from the checkpoint's");
  c.train_command->add_option("--init-from", c.train_options.init_from,
                              "start from these weights (a checkpoint, or a Hugging Face model "
                              "directory) with fresh optimizer state");
  c.train_command->add_option(
      "--tokenizer", c.train_options.tokenizer,
      "kept beside each checkpoint's config.json, and encodes a --hellaswag "
      ".jsonl (default: the one beside the checkpoint resumed from or the "
      "--init-from weights)");
  c.train_command->add_option("--hellaswag", c.train_options.hellaswag,
                              "score HellaSwag at each evaluation: llm.c's hellaswag_val.bin, or "
                              "hellaswag_val.jsonl (encoded with --tokenizer)");
  c.train_command->add_option("--log-json", c.train_options.log_json, "one JSON object per step");
  c.train_command->add_option("--tensorboard-dir", c.train_options.tensorboard_dir,
                              "TensorBoard event files of the step metrics, as one run");
  c.train_command->add_option("--backend", c.train_options.backend, "cpu or cuda")
      ->capture_default_str();
  add_communication_options(*c.train_command, c.train_options.collective_timeout_seconds,
                            c.train_options.transport);
}

void add_replay_command(CLI::App& app, CommandLine& c) {
  c.replay_command = app.add_subcommand(
      "replay", "run a plan on synthetic tokens; measured against predicted, per stage");
  c.replay_command->add_option("--plan", c.replay_options.plan_path, "plan file")->required();
  c.replay_command->add_option("--steps", c.replay_options.steps, "measured steps")
      ->capture_default_str();
  c.replay_command->add_option("--warmup", c.replay_options.warmup, "steps run first, not measured")
      ->capture_default_str();
  c.replay_command->add_option("--backend", c.replay_options.backend, "cpu or cuda")
      ->capture_default_str();
  add_communication_options(*c.replay_command, c.replay_options.collective_timeout_seconds,
                            c.replay_options.transport);
  c.replay_command->add_option("--report", c.replay_options.report_path,
                               "write the report as JSON");
  c.replay_command->add_option("--trace", c.replay_options.trace_path,
                               "write a Chrome trace (opens in Perfetto), one track per rank");
  c.replay_command->add_option("--timeline", c.replay_options.timeline_path,
                               "write the pipeline timeline as SVG");
  c.replay_command->add_flag("!--no-memory-limit", c.replay_options.enforce_device_memory,
                             "do not hold ranks to the plan's device memory");
}

void add_profile_command(CLI::App& app, CommandLine& c) {
  c.profile_command = app.add_subcommand(
      "profile", "measure this device for a job's shapes -> <profile_dir>/profile.json");
  c.profile_command->add_option("--config", c.profile.config, "job.toml")->required();
  add_model_from_option(*c.profile_command, c.profile.model_from);
  c.profile_command->add_option("--backend", c.profile.backend, "cpu or cuda")
      ->capture_default_str();
  c.profile_command->add_option("--profile-dir", c.profile.profile_dir,
                                "where profile.json goes (default: [planner] profile_dir)");
  c.profile_command
      ->add_option("--repetitions", c.profile.repetitions, "timed runs per measurement")
      ->capture_default_str();
  c.profile_command
      ->add_option("--min-window", c.profile.minimum_window_seconds,
                   "seconds each measurement runs at least")
      ->capture_default_str();
  c.profile_command
      ->add_option("--transport", c.profile.transport,
                   "the collectives' transport, as the job's (auto, mpi, nccl, staged)")
      ->check(CLI::IsMember({"auto", "mpi", "nccl", "staged"}))
      ->capture_default_str();
  c.profile_command->add_option("--mpirun", c.profile.mpirun, "the mpirun to use")
      ->capture_default_str();
  c.profile_command->allow_extras();
}

void add_autotune_command(CLI::App& app, CommandLine& c) {
  c.autotune_command = app.add_subcommand(
      "autotune", "replay the planner's best settings, keep the fastest measured plan");
  c.autotune_command->add_option("--config", c.autotune.config, "job.toml")->required();
  add_model_from_option(*c.autotune_command, c.autotune.model_from);
  c.autotune_command->add_option("--output", c.autotune.output,
                                 "the best plan (default: planner.save_plan_path)");
  c.autotune_command->add_option("--work-dir", c.autotune.work_dir, "plans, logs and reports")
      ->capture_default_str();
  c.autotune_command->add_option("--backend", c.autotune.backend, "cpu or cuda")
      ->capture_default_str();
  c.autotune_command->add_option("--report", c.autotune.report, "write the summary as JSON");
  c.autotune_command->add_option("--steps", c.autotune.steps, "measured steps per experiment")
      ->capture_default_str();
  c.autotune_command->add_option("--warmup", c.autotune.warmup, "warm-up steps per experiment")
      ->capture_default_str();
  c.autotune_command
      ->add_option("--max-meshes", c.autotune.max_meshes,
                   "meshes (pp x dp x tp) tuned, best predicted first")
      ->capture_default_str();
  c.autotune_command
      ->add_option("--plateau", c.autotune.plateau,
                   "stop growing the micro-batch below this relative gain")
      ->capture_default_str();
  c.autotune_command
      ->add_option("--experiment-timeout", c.autotune.experiment_timeout,
                   "seconds before an experiment is killed")
      ->capture_default_str();
  c.autotune_command->add_option("--mpirun", c.autotune.mpirun, "the mpirun to use")
      ->capture_default_str();
  c.autotune_command->allow_extras();
}

void add_launch_command(CLI::App& app, CommandLine& c) {
  c.launch_command = app.add_subcommand(
      "launch", "start a plan's ranks with mpirun: paraplan launch --plan P -- train ...");
  c.launch_command->add_option("--plan", c.launch_options.plan_path, "plan file")->required();
  c.launch_command->add_option("--hostfile", c.launch_options.hostfile,
                               "'host slots=N' lines; without it, this machine");
  c.launch_command->add_flag("--dry-run", c.launch_options.dry_run,
                             "print the command, run nothing");
  c.launch_command->add_option("--mpirun", c.launch_options.mpirun, "the mpirun to use")
      ->capture_default_str();
  c.launch_command
      ->add_option("--mpirun-arg", c.launch_options.mpirun_arguments,
                   "an argument given to mpirun as it is (repeat: --mpirun-arg --mca "
                   "--mpirun-arg btl ...)")
      ->allow_extra_args(false);
  c.launch_command
      ->add_option("--network-interface", c.launch_options.network_interface,
                   "the network of a multi-host job, for Open MPI and NCCL alike: auto (the "
                   "subnet that carries every host's address), none, interface names "
                   "(eth0,ib0) or a subnet (10.0.0.0/16)")
      ->capture_default_str();
  c.launch_command
      ->add_option("--env", c.launch_options.pass_environment,
                   "pass this variable to every rank too: NAME (its value here) or NAME=VALUE")
      ->allow_extra_args(false);
  c.launch_command
      ->add_option("--max-restarts", c.launch_options.max_restarts,
                   "after a lost or silent rank, re-plan onto the hosts that answer and resume "
                   "from the latest checkpoint, at most N times")
      ->check(CLI::NonNegativeNumber);
  c.launch_command
      ->add_option("--min-nodes", c.launch_options.min_nodes, "never restart on fewer hosts")
      ->check(CLI::PositiveNumber);
  c.launch_command
      ->add_option("--heartbeat-timeout", c.launch_options.heartbeat_timeout_seconds,
                   "seconds without a heartbeat after which a rank counts as lost (stopped, "
                   "hung or cut off) and the job ends")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

void add_preflight_command(CLI::App& app, CommandLine& c) {
  c.preflight_command = app.add_subcommand(
      "preflight", "what this host offers a job, as JSON (launch runs it on every host over ssh)");
  c.preflight_command->add_option("--file", c.preflight_files, "a file the job reads here")
      ->allow_extra_args(false);
  c.preflight_command->add_flag("--count-gpus", c.preflight_gpus, "count the CUDA devices");
  CLI::Option* shared =
      c.preflight_command->add_option("--shared-directory", c.preflight_shared.path,
                                      "a directory every host must see as one (--checkpoint-dir)");
  c.preflight_command
      ->add_option("--marker", c.preflight_shared.marker, "the file launch put in it")
      ->needs(shared);
  shared->needs("--marker");
  c.preflight_command
      ->add_option("--marker-placed-by", c.preflight_shared.placed_by, "the host launch runs on")
      ->needs("--marker");
}

void add_sample_command(CLI::App& app, CommandLine& c) {
  c.sample_command = app.add_subcommand("sample", "generate text from a checkpoint");
  c.sample_command
      ->add_option("--checkpoint", c.sample_options.checkpoint,
                   "checkpoint directory (or one of its step directories)")
      ->required();
  c.sample_command->add_option("--prompt", c.sample_options.prompt, "text to continue")->required();
  c.sample_command->add_option(
      "--tokenizer", c.sample_options.tokenizer,
      "the tokenizer.json or .tiktoken file the data was tokenized with (default: "
      "tokenizer.json beside config.json; none for byte-level models)");
  c.sample_command->add_option("--tokens", c.sample_options.tokens, "tokens to generate")
      ->capture_default_str();
  c.sample_command
      ->add_option("--temperature", c.sample_options.temperature,
                   "softmax temperature; 0 is greedy")
      ->capture_default_str();
  c.sample_command
      ->add_option("--top-k", c.sample_options.top_k, "sample among the k most likely; 0 for all")
      ->capture_default_str();
  c.sample_command->add_option("--seed", c.sample_options.seed, "sampling seed")
      ->capture_default_str();
  c.sample_command->add_option("--backend", c.sample_options.backend, "cpu or cuda")
      ->capture_default_str();
  c.sample_command
      ->add_option("--prefill-chunk", c.sample_options.prefill_chunk,
                   "prompt tokens run at once (bounds the prompt's activations and logits)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c.sample_command
      ->add_option("--dtype", c.sample_options.dtype,
                   "float32, or bfloat16: half the memory, the weights rounded to bf16")
      ->check(CLI::IsMember({"float32", "bfloat16"}))
      ->capture_default_str();
}

void add_evaluate_command(CLI::App& app, CommandLine& c) {
  EvaluateOptions& options = c.evaluate_options;
  c.evaluate_command = app.add_subcommand(
      "evaluate", "a checkpoint's validation loss and HellaSwag accuracy under a plan");
  c.evaluate_command->add_option("--plan", options.plan_path, "plan file")->required();
  c.evaluate_command
      ->add_option("--checkpoint", options.checkpoint,
                   "checkpoint directory (or one of its step directories), or a Hugging Face "
                   "model directory")
      ->required();
  c.evaluate_command->add_option("--val-data", options.validation_data_path,
                                 "validation token files (default: the plan's [data] validation)");
  c.evaluate_command->add_option("--eval-batches", options.eval_batches,
                                 "global batches of validation data, at most one pass (default: "
                                 "the plan's training.eval_batches)");
  c.evaluate_command->add_option("--hellaswag", options.hellaswag,
                                 "llm.c's hellaswag_val.bin, or hellaswag_val.jsonl");
  c.evaluate_command->add_option(
      "--tokenizer", options.tokenizer,
      "encodes a --hellaswag .jsonl (default: the tokenizer beside the checkpoint's config.json)");
  c.evaluate_command->add_option("--report", options.report_path,
                                 "the figures as JSON, with each completion's mean loss");
  c.evaluate_command->add_option("--backend", options.backend, "cpu or cuda")
      ->capture_default_str();
  add_communication_options(*c.evaluate_command, options.collective_timeout_seconds,
                            options.transport);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"paraplan: plans and runs distributed training of transformer language models"};
  app.require_subcommand(1);

  CommandLine c;
  add_tokenize_command(app, c);
  add_plan_command(app, c);
  add_inspect_command(app, c);
  add_train_command(app, c);
  add_replay_command(app, c);
  add_profile_command(app, c);
  add_autotune_command(app, c);
  add_launch_command(app, c);
  add_preflight_command(app, c);
  add_sample_command(app, c);
  add_evaluate_command(app, c);

  // Everything after `--` belongs to the ranks (launch) and is not parsed here.
  std::vector<std::string> after_separator;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) != "--") continue;
    after_separator.assign(argv + i + 1, argv + argc);
    argc = i;
    break;
  }
  CLI11_PARSE(app, argc, argv);
  try {
    if (c.tokenize_command->parsed()) run_tokenize(c.tokenize);
    if (c.plan_command->parsed()) run_plan(c.plan, c.plan_command->remaining());
    if (c.inspect_command->parsed()) run_inspect(c.inspect);
    if (c.train_command->parsed()) train(c.train_options);
    if (c.replay_command->parsed()) replay(c.replay_options);
    if (c.profile_command->parsed())
      run_profile(c.profile, c.profile_command->remaining(),
                  std::vector<std::string>(argv + 1, argv + argc));
    if (c.autotune_command->parsed())
      return run_autotune(c.autotune, c.autotune_command->remaining());
    if (c.launch_command->parsed()) {
      c.launch_options.command = after_separator;
      return run_launch(c.launch_options);
    }
    if (c.preflight_command->parsed()) {
      std::optional<SharedDirectory> shared;
      if (!c.preflight_shared.path.empty()) shared = c.preflight_shared;
      std::cout << this_host_findings(c.preflight_files, c.preflight_gpus, shared).dump()
                << std::endl;
    }
    if (c.evaluate_command->parsed()) evaluate_checkpoint(c.evaluate_options);
    if (c.sample_command->parsed()) {
      const std::string text = sample_text(c.sample_options);
      std::cout << c.sample_options.prompt << text << std::endl;
    }
  } catch (const std::exception& error) {
    std::cerr << "paraplan: error: " << error.what() << std::endl;
    return 1;
  }
  return 0;
}

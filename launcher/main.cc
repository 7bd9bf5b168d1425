// main.cc: the `paraplan` command: tokenize, plan, inspect, train, replay,
// profile, autotune, launch, preflight, sample.
//
// Each subcommand is a thin shell over the planner or the runtime. Every
// failure ends here as one line, "paraplan: error: <message>", and exit
// status 1; usage errors print CLI11's help hint and exit 2.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "launcher/autotune.h"
#include "launcher/launch.h"
#include "launcher/preflight.h"
#include "launcher/profile_command.h"
#include "planner/job/job_config.h"
#include "planner/planner.h"
#include "planner/replan.h"
#include "runtime/data/tokenizer.h"
#include "runtime/measure/replay.h"
#include "runtime/train/sampler.h"
#include "runtime/train/trainer.h"
#include "schema/plan_io.h"

namespace {

using namespace paraplan;

struct TokenizeArguments {
  std::vector<std::string> inputs;
  std::string output = "data";
  double val_fraction = 0.1;
  int64_t vocab_size = 256;  // the model's: picks the token file format
};

struct PlanArguments {
  std::string config;
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
  const TokenizeResult result =
      tokenize_files(args.inputs, args.output, args.val_fraction, args.vocab_size);
  std::cout << "tokenized " << result.files_read.size() << " file(s): " << result.train_tokens
            << " train tokens -> " << result.train_path << ", " << result.val_tokens
            << " validation tokens -> " << result.val_path
            << (result.uint32_tokens ? " (Llama 3 format, uint32 tokens)" : "") << "\n"
            << "unigram entropy of the training tokens: " << std::fixed << std::setprecision(3)
            << result.train_unigram_entropy
            << " nats/token (the loss of a model that ignores context)" << std::endl;
}

void run_plan(const PlanArguments& args, const std::vector<std::string>& extras) {
  std::vector<std::string> unknown;
  const std::vector<ConfigOverride> overrides = parse_override_arguments(extras, &unknown);
  if (!unknown.empty())
    throw std::runtime_error("plan: unexpected argument '" + unknown.front() +
                             "'; overrides take the form --section.key value");
  const JobConfig config = load_job_config(args.config, overrides);
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"paraplan: plans and runs distributed training of transformer language models"};
  app.require_subcommand(1);

  TokenizeArguments tokenize;
  CLI::App* tokenize_command =
      app.add_subcommand("tokenize", "byte-level tokens (vocab 256) -> train.bin, val.bin");
  tokenize_command->add_option("--input", tokenize.inputs, "text files or directories")->required();
  tokenize_command->add_option("--output", tokenize.output, "output directory")
      ->capture_default_str();
  tokenize_command
      ->add_option("--val-fraction", tokenize.val_fraction,
                   "share of the corpus (its end) held out for validation")
      ->capture_default_str();
  tokenize_command
      ->add_option("--vocab-size", tokenize.vocab_size,
                   "the model's vocabulary: above 65536 the files hold uint32 tokens (llm.c's "
                   "Llama 3 format)")
      ->capture_default_str();

  PlanArguments plan;
  CLI::App* plan_command =
      app.add_subcommand("plan", "job.toml -> plan file; override any key as --section.key value");
  plan_command->add_option("--config", plan.config, "job.toml")->required();
  plan_command->add_option("--output", plan.output, "the plan file to write (.pplan)");
  plan_command
      ->add_option("--what-if-lost-nodes", plan.what_if_lost_nodes,
                   "also print the plan this job falls back to on N fewer nodes")
      ->check(CLI::PositiveNumber);
  plan_command->allow_extras();

  InspectArguments inspect;
  CLI::App* inspect_command = app.add_subcommand("inspect", "print a plan as a table or JSON");
  inspect_command->add_option("plan", inspect.plan, "plan file")->required();
  inspect_command->add_flag("--json", inspect.json, "every field as JSON");

  TrainOptions train_options;
  CLI::App* train_command = app.add_subcommand("train", "train as the plan says");
  train_command->add_option("--plan", train_options.plan_path, "plan file")->required();
  train_command->add_option("--data", train_options.data_path,
                            "training tokens: a file, a quoted glob ('train_*.bin') or a "
                            "comma-separated list (default: the job's [data] train)");
  train_command->add_option("--val-data", train_options.validation_data_path,
                            "validation tokens, as --data (default: the job's [data] "
                            "validation)");
  train_command->add_option("--steps", train_options.steps,
                            "train until this step (default: the plan's total_steps)");
  train_command->add_option("--checkpoint-dir", train_options.checkpoint_dir,
                            "where checkpoints go (and --resume reads)");
  train_command->add_option("--checkpoint-every", train_options.checkpoint_every,
                            "save every K steps (and always at the end)");
  train_command->add_option("--checkpoint-every-seconds", train_options.checkpoint_every_seconds,
                            "also save once S seconds have passed since the last save");
  train_command->add_flag("--resume", train_options.resume,
                          "continue from the latest checkpoint in --checkpoint-dir");
  train_command->add_flag("--accept-data-order-change", train_options.accept_data_order_change,
                          "resume even though the data order (files, blend, shuffle, seed) "
                          "differs from the checkpoint's");
  train_command->add_option("--init-from", train_options.init_from,
                            "start from these weights (a checkpoint, or a Hugging Face model "
                            "directory) with fresh optimizer state");
  train_command->add_option("--log-json", train_options.log_json, "one JSON object per step");
  train_command->add_option("--backend", train_options.backend, "cpu or cuda")
      ->capture_default_str();
  add_communication_options(*train_command, train_options.collective_timeout_seconds,
                            train_options.transport);

  ReplayOptions replay_options;
  CLI::App* replay_command = app.add_subcommand(
      "replay", "run a plan on synthetic tokens; measured against predicted, per stage");
  replay_command->add_option("--plan", replay_options.plan_path, "plan file")->required();
  replay_command->add_option("--steps", replay_options.steps, "measured steps")
      ->capture_default_str();
  replay_command->add_option("--warmup", replay_options.warmup, "steps run first, not measured")
      ->capture_default_str();
  replay_command->add_option("--backend", replay_options.backend, "cpu or cuda")
      ->capture_default_str();
  add_communication_options(*replay_command, replay_options.collective_timeout_seconds,
                            replay_options.transport);
  replay_command->add_option("--report", replay_options.report_path, "write the report as JSON");
  replay_command->add_option("--trace", replay_options.trace_path,
                             "write a Chrome trace (opens in Perfetto), one track per rank");
  replay_command->add_option("--timeline", replay_options.timeline_path,
                             "write the pipeline timeline as SVG");
  replay_command->add_flag("!--no-memory-limit", replay_options.enforce_device_memory,
                           "do not hold ranks to the plan's device memory");

  ProfileArguments profile;
  CLI::App* profile_command = app.add_subcommand(
      "profile", "measure this device for a job's shapes -> <profile_dir>/profile.json");
  profile_command->add_option("--config", profile.config, "job.toml")->required();
  profile_command->add_option("--backend", profile.backend, "cpu or cuda")->capture_default_str();
  profile_command->add_option("--profile-dir", profile.profile_dir,
                              "where profile.json goes (default: [planner] profile_dir)");
  profile_command->add_option("--repetitions", profile.repetitions, "timed runs per measurement")
      ->capture_default_str();
  profile_command
      ->add_option("--min-window", profile.minimum_window_seconds,
                   "seconds each measurement runs at least")
      ->capture_default_str();
  profile_command
      ->add_option("--transport", profile.transport,
                   "the collectives' transport, as the job's (auto, mpi, nccl, staged)")
      ->check(CLI::IsMember({"auto", "mpi", "nccl", "staged"}))
      ->capture_default_str();
  profile_command->add_option("--mpirun", profile.mpirun, "the mpirun to use")
      ->capture_default_str();
  profile_command->allow_extras();

  AutotuneOptions autotune;
  CLI::App* autotune_command = app.add_subcommand(
      "autotune", "replay the planner's best settings, keep the fastest measured plan");
  autotune_command->add_option("--config", autotune.config, "job.toml")->required();
  autotune_command->add_option("--output", autotune.output,
                               "the best plan (default: planner.save_plan_path)");
  autotune_command->add_option("--work-dir", autotune.work_dir, "plans, logs and reports")
      ->capture_default_str();
  autotune_command->add_option("--backend", autotune.backend, "cpu or cuda")->capture_default_str();
  autotune_command->add_option("--report", autotune.report, "write the summary as JSON");
  autotune_command->add_option("--steps", autotune.steps, "measured steps per experiment")
      ->capture_default_str();
  autotune_command->add_option("--warmup", autotune.warmup, "warm-up steps per experiment")
      ->capture_default_str();
  autotune_command
      ->add_option("--max-meshes", autotune.max_meshes,
                   "meshes (pp x dp x tp) tuned, best predicted first")
      ->capture_default_str();
  autotune_command
      ->add_option("--plateau", autotune.plateau,
                   "stop growing the micro-batch below this relative gain")
      ->capture_default_str();
  autotune_command
      ->add_option("--experiment-timeout", autotune.experiment_timeout,
                   "seconds before an experiment is killed")
      ->capture_default_str();
  autotune_command->add_option("--mpirun", autotune.mpirun, "the mpirun to use")
      ->capture_default_str();
  autotune_command->allow_extras();

  LaunchOptions launch_options;
  CLI::App* launch_command = app.add_subcommand(
      "launch", "start a plan's ranks with mpirun: paraplan launch --plan P -- train ...");
  launch_command->add_option("--plan", launch_options.plan_path, "plan file")->required();
  launch_command->add_option("--hostfile", launch_options.hostfile,
                             "'host slots=N' lines; without it, this machine");
  launch_command->add_flag("--dry-run", launch_options.dry_run, "print the command, run nothing");
  launch_command->add_option("--mpirun", launch_options.mpirun, "the mpirun to use")
      ->capture_default_str();
  launch_command
      ->add_option("--mpirun-arg", launch_options.mpirun_arguments,
                   "an argument given to mpirun as it is (repeat: --mpirun-arg --mca "
                   "--mpirun-arg btl ...)")
      ->allow_extra_args(false);
  launch_command
      ->add_option("--network-interface", launch_options.network_interface,
                   "the network of a multi-host job, for Open MPI and NCCL alike: auto (the "
                   "subnet that carries every host's address), none, interface names "
                   "(eth0,ib0) or a subnet (10.0.0.0/16)")
      ->capture_default_str();
  launch_command
      ->add_option("--env", launch_options.pass_environment,
                   "pass this variable to every rank too: NAME (its value here) or NAME=VALUE")
      ->allow_extra_args(false);
  launch_command
      ->add_option("--max-restarts", launch_options.max_restarts,
                   "after a lost or silent rank, re-plan onto the hosts that answer and resume "
                   "from the latest checkpoint, at most N times")
      ->check(CLI::NonNegativeNumber);
  launch_command
      ->add_option("--min-nodes", launch_options.min_nodes, "never restart on fewer hosts")
      ->check(CLI::PositiveNumber);
  launch_command
      ->add_option("--heartbeat-timeout", launch_options.heartbeat_timeout_seconds,
                   "seconds without a heartbeat after which a rank counts as lost (stopped, "
                   "hung or cut off) and the job ends")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();

  std::vector<std::string> preflight_files;
  bool preflight_gpus = false;
  CLI::App* preflight_command = app.add_subcommand(
      "preflight", "what this host offers a job, as JSON (launch runs it on every host over ssh)");
  preflight_command->add_option("--file", preflight_files, "a file the job reads here")
      ->allow_extra_args(false);
  preflight_command->add_flag("--count-gpus", preflight_gpus, "count the CUDA devices");

  SampleOptions sample_options;
  CLI::App* sample_command = app.add_subcommand("sample", "generate text from a checkpoint");
  sample_command
      ->add_option("--checkpoint", sample_options.checkpoint,
                   "checkpoint directory (or one of its step directories)")
      ->required();
  sample_command->add_option("--prompt", sample_options.prompt, "text to continue")->required();
  sample_command->add_option("--tokens", sample_options.tokens, "bytes to generate")
      ->capture_default_str();
  sample_command
      ->add_option("--temperature", sample_options.temperature, "softmax temperature; 0 is greedy")
      ->capture_default_str();
  sample_command
      ->add_option("--top-k", sample_options.top_k, "sample among the k most likely; 0 for all")
      ->capture_default_str();
  sample_command->add_option("--seed", sample_options.seed, "sampling seed")->capture_default_str();
  sample_command->add_option("--backend", sample_options.backend, "cpu or cuda")
      ->capture_default_str();

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
    if (tokenize_command->parsed()) run_tokenize(tokenize);
    if (plan_command->parsed()) run_plan(plan, plan_command->remaining());
    if (inspect_command->parsed()) run_inspect(inspect);
    if (train_command->parsed()) train(train_options);
    if (replay_command->parsed()) replay(replay_options);
    if (profile_command->parsed())
      run_profile(profile, profile_command->remaining(),
                  std::vector<std::string>(argv + 1, argv + argc));
    if (autotune_command->parsed()) return run_autotune(autotune, autotune_command->remaining());
    if (launch_command->parsed()) {
      launch_options.command = after_separator;
      return run_launch(launch_options);
    }
    if (preflight_command->parsed())
      std::cout << this_host_findings(preflight_files, preflight_gpus).dump() << std::endl;
    if (sample_command->parsed()) {
      const std::string text = sample_text(sample_options);
      std::cout << sample_options.prompt << text << std::endl;
    }
  } catch (const std::exception& error) {
    std::cerr << "paraplan: error: " << error.what() << std::endl;
    return 1;
  }
  return 0;
}

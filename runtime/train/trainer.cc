// trainer.cc: the training loop of `paraplan train`, on every rank of the job.
#include "runtime/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_lock.h"
#include "runtime/checkpoint/distributed_checkpoint.h"
#include "runtime/comm/mpi_session.h"
#include "runtime/comm/nccl_like_teardown.h"
#include "runtime/measure/memory_report.h"
#include "runtime/model/model_from_plan.h"
#include "runtime/pipeline/rank_state.h"
#include "runtime/tokenizer/hellaswag.h"
#include "runtime/train/evaluation.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/train/run_checkpoints.h"
#include "runtime/train/step_logger.h"
#include "runtime/train/training_data.h"
#include "runtime/train/training_step.h"
#include "schema/model_limits.h"
#include "schema/plan_io.h"

namespace paraplan {

namespace {

LrSchedule lr_schedule_of(const schema::Optimizer& optimizer) {
  LrSchedule schedule;
  schedule.learning_rate = optimizer.learning_rate();
  schedule.min_learning_rate = optimizer.min_learning_rate();
  schedule.warmup_steps = optimizer.warmup_steps();
  schedule.total_steps = optimizer.total_steps();
  switch (optimizer.decay_style()) {
    case schema::LrDecayStyle::Cosine:
      schedule.decay = LrDecay::kCosine;
      break;
    case schema::LrDecayStyle::Linear:
      schedule.decay = LrDecay::kLinear;
      break;
    case schema::LrDecayStyle::Constant:
      schedule.decay = LrDecay::kConstant;
      break;
    case schema::LrDecayStyle::WarmupStableDecay:
      schedule.decay = LrDecay::kWarmupStableDecay;
      break;
  }
  schedule.decay_steps = optimizer.wsd_decay_steps();
  switch (optimizer.wsd_decay_style()) {
    case schema::WsdDecayStyle::Linear:
      schedule.wsd_shape = WsdShape::kLinear;
      break;
    case schema::WsdDecayStyle::Cosine:
      schedule.wsd_shape = WsdShape::kCosine;
      break;
    case schema::WsdDecayStyle::MinusSqrt:
      schedule.wsd_shape = WsdShape::kMinusSqrt;
      break;
  }
  return schedule;
}

// PARAPLAN_FAIL_RANK_AT_STEP=R:S makes world rank R fail at step S: how the
// tests check that one rank's failure ends the whole job. -1 when unset.
// Fault injection for the tests: PARAPLAN_FAIL_RANK_AT_STEP=R:S makes rank R
// throw at step S; PARAPLAN_STALL_RANK_AT_STEP=R:S makes it stop answering
// there (its peers' collectives must then time out); PARAPLAN_STOP_RANK_AT_STEP
// stops the whole process there (SIGSTOP, as `kill -STOP` would: its
// heartbeat stops too). -1 when not this rank (or world_rank is -1).
int injected_fault_step(const char* variable, int world_rank) {
  const char* value = std::getenv(variable);
  int rank = -1, step = -1;
  if (value == nullptr || std::sscanf(value, "%d:%d", &rank, &step) != 2) return -1;
  return rank == world_rank ? step : -1;
}

// A resume continues from the checkpoint's next_train_sample, which counts
// samples in the order it was trained in: refused when this run's order
// differs, unless the user accepts it (then said once).
void check_data_order(const std::string& checkpoint, const DataOrderRecord& now, bool accept,
                      bool leader) {
  const TrainState saved = read_train_state(checkpoint);
  const std::string state_file = checkpoint + "/train_state.json";
  if (!saved.data_order) {
    if (leader)
      std::cout << "data order: " << state_file
                << " records none (written before paraplan recorded it); not compared" << std::endl;
    return;
  }
  const std::string changes = data_order_changes(*saved.data_order, now);
  if (changes.empty()) return;
  if (!accept)
    throw std::runtime_error(
        state_file +
        ": data_order: this run reads its training data in another order than "
        "the run that wrote the checkpoint (" +
        changes + "), so resuming at sample " + std::to_string(saved.next_train_sample) +
        " would skip and repeat samples; resume with the same [data] and --data, or pass "
        "--accept-data-order-change to continue in the new order");
  if (leader)
    std::cout << "data order: changed from the checkpoint's (" << changes
              << "); continuing at sample " << saved.next_train_sample
              << " in the new order (--accept-data-order-change)" << std::endl;
}

// What a run needs besides its rank state, validated before anything is
// allocated: the plan, this rank's place and model, the data, the last step,
// the checkpoint directory's lock and what to start from.
struct RunInputs {
  LoadedPlan loaded;
  MeshCoordinates mesh{};
  StageModelSpec model{};
  TrainingData data{};
  int last_step = 0;
  std::unique_ptr<CheckpointDirLock> checkpoint_lock{};  // rank 0 with --checkpoint-dir
  std::string resume_from{}, init_from{};                // resolved step directories
  std::optional<CheckpointTokenizer> tokenizer{};        // rank 0's
  std::unique_ptr<MultipleChoiceRows> hellaswag{};       // --hellaswag's, with its path
  std::string hellaswag_path{};
};

RunInputs validate_run(const TrainOptions& options, MpiSession& session) {
  RunInputs run{.loaded = load_plan(options.plan_path)};
  run.mesh = place_this_rank(run.loaded, session);
  run.model = stage_model_from_plan(run.loaded, run.mesh.pipeline_rank);
  const schema::Training& training = *run.loaded.plan().training();
  run.data = open_training_data(options.data_path, options.validation_data_path, training,
                                run.model.config.seq_len, run.model.config.vocab_size);
  run.last_step = options.steps >= 0 ? options.steps : training.optimizer()->total_steps();
  if (options.resume && options.checkpoint_dir.empty())
    throw std::runtime_error("--resume needs --checkpoint-dir (the directory to resume from)");
  if (options.steps != -1 && (options.steps < 1 || options.steps > kMaxSteps))
    throw std::runtime_error("--steps: " + std::to_string(options.steps) + " is invalid; give 1.." +
                             std::to_string(kMaxSteps) + " (the step to train until)");
  if (options.checkpoint_every < 0 || options.checkpoint_every > kMaxSteps)
    throw std::runtime_error("--checkpoint-every: " + std::to_string(options.checkpoint_every) +
                             " is invalid; give 0.." + std::to_string(kMaxSteps) +
                             " (0 saves only at the end)");
  if (!(options.checkpoint_every_seconds >= 0) || !std::isfinite(options.checkpoint_every_seconds))
    throw std::runtime_error(
        "--checkpoint-every-seconds: " + std::to_string(options.checkpoint_every_seconds) +
        " is invalid; must be a finite number >= 0 (0: off)");
  if (options.checkpoint_async && options.checkpoint_dir.empty())
    throw std::runtime_error(
        "--checkpoint-async needs --checkpoint-dir (the directory to write checkpoints in)");
  if (options.checkpoint_keep_latest < 0 ||
      (options.checkpoint_keep_latest > 0 && options.checkpoint_dir.empty()))
    throw std::runtime_error(
        "--checkpoint-keep-latest: " + std::to_string(options.checkpoint_keep_latest) +
        (options.checkpoint_keep_latest < 0
             ? " is invalid; give 0 (keep every checkpoint) or more"
             : " needs --checkpoint-dir (the directory to keep them in)"));
  if (options.resume && !options.init_from.empty())
    throw std::runtime_error(
        "--init-from and --resume exclude each other: --resume continues a "
        "run (its optimizer state and step), --init-from starts one from "
        "weights");
  // One run writes into a checkpoint directory at a time (rank 0 writes
  // every checkpoint, so it holds the lock); refused here, before anything.
  if (!options.checkpoint_dir.empty() && session.world_rank() == 0) {
    // Set by `launch --max-restarts` for a restarted attempt: how long the
    // failed attempt's rank 0 may still hold the directory.
    const char* wait = std::getenv("PARAPLAN_CHECKPOINT_LOCK_WAIT");
    run.checkpoint_lock = std::make_unique<CheckpointDirLock>(
        options.checkpoint_dir, "paraplan train of plan " + options.plan_path,
        wait != nullptr ? std::atof(wait) : 0.0);
  }
  // Every rank reads DIR/latest once rank 0 holds DIR (after any wait for a
  // failed attempt's writer), so all resume from the same step.
  if (options.resume) session.barrier();
  if (options.resume) {
    run.resume_from = resolve_checkpoint(options.checkpoint_dir);
    check_data_order(run.resume_from, run.data.train_order, options.accept_data_order_change,
                     session.world_rank() == 0);
  }
  if (!options.init_from.empty()) run.init_from = resolve_checkpoint(options.init_from);
  // Checkpoints serve the context of the model the run started from (a
  // Llama-family model's positions are not parameters), not only seq_len.
  const std::string& source = run.resume_from.empty() ? run.init_from : run.resume_from;
  if (!source.empty() && run.model.config.architecture == Architecture::kLlama) {
    const TransformerConfig saved = read_checkpoint_config(source);
    if (saved.architecture == Architecture::kLlama)
      run.model.config.max_positions = std::max(saved.seq_len, saved.max_positions);
  }
  const bool hellaswag_text = is_hellaswag_text(options.hellaswag);
  if (!options.tokenizer.empty() && options.checkpoint_dir.empty() && !hellaswag_text)
    throw std::runtime_error(
        "--tokenizer needs --checkpoint-dir (it is kept beside each "
        "checkpoint) or a --hellaswag .jsonl (it encodes the text)");
  run.hellaswag_path = options.hellaswag;
  if (!options.hellaswag.empty())
    run.hellaswag =
        open_multiple_choice_rows(options.hellaswag, options.tokenizer,
                                  run.resume_from.empty() ? run.init_from : run.resume_from,
                                  run.model.config.seq_len, run.model.config.vocab_size);
  if (!options.checkpoint_dir.empty() && session.world_rank() == 0)
    run.tokenizer = tokenizer_for_checkpoints(
        options.tokenizer, run.resume_from.empty() ? run.init_from : run.resume_from,
        run.model.config.vocab_size, options.plan_path);
  return run;
}

// The weights a run starts from (resumed, --init-from, or initialized) and
// the step and sample it starts at.
TrainState starting_state(const RunInputs& run, RankState& rank, bool leader) {
  const schema::Training& training = *run.loaded.plan().training();
  TrainState state{.step = 0, .next_train_sample = 0, .seed = training.seed()};
  if (!run.resume_from.empty()) {
    state = load_distributed_checkpoint(run.resume_from, *rank.stage, *rank.optimizer);
    if (leader)
      std::cout << "resumed from " << run.resume_from << " at step " << state.step << std::endl;
  } else if (!run.init_from.empty()) {
    load_distributed_weights(run.init_from, *rank.stage, *rank.optimizer);
    if (leader) std::cout << "weights from " << run.init_from << std::endl;
  } else {
    initialize_parameters(rank, training.seed());
  }
  return state;
}

// The run's first lines: the model, the mesh, the batch and the steps; the
// data; and a cut of eval_batches to one pass, if any.
void print_run(const RunInputs& run, const RankState& rank, int world_size, int64_t first_step) {
  const schema::Training& training = *run.loaded.plan().training();
  const TransformerConfig& config = run.model.config;
  const MeshCoordinates& mesh = run.mesh;
  std::cout << "paraplan train: " << config.num_layers << " layers, d_model " << config.d_model
            << ", " << parameter_count(config) << " parameters, backend "
            << kernels::backend_name(rank.ops->backend()) << ", " << world_size << " rank(s) (pp "
            << mesh.pipeline_size << " x dp " << mesh.data_size
            << (mesh.context_size > 1 ? " x cp " + std::to_string(mesh.context_size) : "")
            << " x tp " << mesh.tensor_size << "), global batch " << training.global_batch_size()
            << " x seq " << config.seq_len << " = "
            << int64_t{training.global_batch_size()} * config.seq_len << " tokens/step, steps "
            << first_step << " -> " << run.last_step << std::endl
            << "data: " << describe(*run.data.train) << std::endl;
  if (run.hellaswag) std::cout << describe(*run.hellaswag, run.hellaswag_path) << std::endl;
  if (run.data.validation) {
    const std::string note = evaluation_batches_note(
        training, run.data.validation->samples_per_epoch(), run.data.validation_name);
    if (!note.empty()) std::cout << note << std::endl;
  }
}

// The test suites' injected faults at one rank's steps (injected_fault_step):
// a throw, a stall, a SIGSTOP. They hit the first attempt only: a run resumed
// from a checkpoint (as `launch --max-restarts` resumes) carries on past them.
class InjectedFaults {
 public:
  explicit InjectedFaults(int world_rank)
      : failure_(injected_fault_step("PARAPLAN_FAIL_RANK_AT_STEP", world_rank)),
        stall_(injected_fault_step("PARAPLAN_STALL_RANK_AT_STEP", world_rank)),
        stop_(injected_fault_step("PARAPLAN_STOP_RANK_AT_STEP", world_rank)) {}
  void before(int step) const {
    if (step == failure_)
      throw std::runtime_error("injected failure at step " + std::to_string(step) +
                               " (PARAPLAN_FAIL_RANK_AT_STEP)");
    if (step == stall_) std::this_thread::sleep_for(std::chrono::hours(1));
    if (step == stop_) raise(SIGSTOP);
  }

 private:
  int failure_, stall_, stop_;
};

using SteadyClock = std::chrono::steady_clock;

// The figures every step of a run uses.
struct StepConstants {
  LrSchedule lr_schedule;
  int64_t tokens_per_step = 0;
  float loss_scale = 0;
  double flops_per_token = 0, peak_flops = 0;
  uint64_t capacity = 0;  // the device's allocatable memory, 0 unknown
  int eval_interval = 0, eval_batches = 0;
};

StepConstants step_constants_of(const RunInputs& run) {
  const schema::Plan& plan = run.loaded.plan();
  const schema::Training& training = *plan.training();
  const TransformerConfig& config = run.model.config;
  StepConstants constants;
  constants.lr_schedule = lr_schedule_of(*training.optimizer());
  constants.tokens_per_step = static_cast<int64_t>(training.global_batch_size()) * config.seq_len;
  constants.loss_scale = 1.0f / static_cast<float>(constants.tokens_per_step);
  constants.flops_per_token = training_flops_per_token(config);
  const schema::Cluster* cluster = plan.predictions() ? plan.predictions()->cluster() : nullptr;
  constants.peak_flops = cluster ? cluster->peak_flops() : 0.0;
  constants.capacity = cluster ? allocatable_device_memory_bytes(*cluster) : 0;
  constants.eval_interval = training.eval_interval();
  constants.eval_batches =
      run.data.validation ? evaluation_batches(training, run.data.validation->samples_per_epoch())
                          : 0;
  return constants;
}

// A step trained and timed: its metrics but the validation loss, and whether
// a checkpoint is due by time (every rank agrees).
struct TimedStep {
  StepMetrics metrics;
  bool checkpoint_due_by_time = false;
  double checkpoint_progress = 0;  // the job's background save (RunCheckpoints::progress)
};

// Step `step` + 1, from the state's next sample; the state moves past its batch.
TimedStep train_one_step(const RunInputs& run, RankState& rank, const StepConstants& constants,
                         TrainState& state, int step, SteadyClock::time_point step_start,
                         SteadyClock::time_point last_checkpoint, double checkpoint_every_seconds,
                         const RunCheckpoints& checkpoints, int world_size) {
  const schema::Training& training = *run.loaded.plan().training();
  const TrainingData& data = run.data;
  TimedStep timed;
  StepMetrics& metrics = timed.metrics;
  metrics.learning_rate = constants.lr_schedule.at(step);
  TrainingStep trained;
  try {
    trained = run_training_step(rank, *data.train, state.next_train_sample, constants.loss_scale,
                                metrics.learning_rate, step + 1);
  } catch (const std::out_of_range& error) {  // a bad target: the data's, named
    throw std::runtime_error(data.train_name + ": step " + std::to_string(step + 1) + ": " +
                             error.what());
  }
  metrics.grad_norm = trained.grad_norm;
  const double loss_sum = job_loss_sum(rank, trained.loss_sum);
  const uint64_t synchronizations_before = rank.sync_counter->synchronizations();
  rank.ops->synchronize();
  metrics.bytes_zeroed = trained.bytes_zeroed;
  metrics.host_synchronizations = trained.host_synchronizations +
                                  (rank.sync_counter->synchronizations() - synchronizations_before);
  state.next_train_sample += training.global_batch_size();
  const auto step_end = SteadyClock::now();
  const double seconds = std::chrono::duration<double>(step_end - step_start).count();

  metrics.step = step + 1;
  metrics.loss = loss_sum / static_cast<double>(constants.tokens_per_step);
  metrics.step_seconds = seconds;
  // Per device, as torchtitan reports it.
  metrics.tokens_per_second = constants.tokens_per_step / seconds / world_size;
  metrics.tflops = constants.flops_per_token * metrics.tokens_per_second / 1e12;
  metrics.mfu = constants.peak_flops > 0
                    ? constants.flops_per_token * metrics.tokens_per_second / constants.peak_flops
                    : 0;
  // One all-reduce for all three: the peak memory, the longest any rank saw
  // since the last checkpoint (so every rank agrees whether one is due), and
  // how far the slowest writer of a background save is.
  double maxima[3] = {static_cast<double>(rank.memory->peak_total()),
                      std::chrono::duration<double>(SteadyClock::now() - last_checkpoint).count(),
                      checkpoints.progress()};
  rank.groups.world->all_reduce(maxima, 3, ReduceOp::kMax);
  const double peak = maxima[0];
  timed.checkpoint_due_by_time =
      checkpoint_every_seconds > 0 && maxima[1] >= checkpoint_every_seconds;
  timed.checkpoint_progress = maxima[2];
  metrics.peak_memory_bytes = static_cast<uint64_t>(peak);
  metrics.memory_capacity_bytes = constants.capacity;
  if (!std::isfinite(metrics.loss))
    throw std::runtime_error("step " + std::to_string(step + 1) + ": the loss is not finite (" +
                             std::to_string(metrics.loss) +
                             "); lower training.learning_rate or check the data");
  return timed;
}

// The run on a built rank state: its starting weights, the steps with
// evaluation, logging and checkpoints, and the memory report.
TrainSummary train_steps(RunInputs& run, RankState& rank, const TrainOptions& options,
                         MpiSession& session) {
  const schema::Training& training = *run.loaded.plan().training();
  const TrainingData& data = run.data;
  const int last_step = run.last_step;
  const bool leader = session.world_rank() == 0;
  TrainState state = starting_state(run, rank, leader);
  const StepConstants constants = step_constants_of(run);

  if (leader) print_run(run, rank, session.world_size(), state.step);

  // Only the leader writes the log; the others keep quiet.
  StepLogger logger(leader ? options.log_json : "", options.resume,
                    leader ? options.tensorboard_dir : "");
  const InjectedFaults faults(options.resume ? -1 : session.world_rank());
  TrainSummary summary;
  summary.first_step = static_cast<int>(state.step);
  // A step's time runs from the end of the one before (after its wait for the
  // device) to its own end, so work still in flight at a step's end (ZeRO-1's
  // parameter all-gathers, which the next forward waits for) is in the next
  // interval rather than in none.
  auto step_start = SteadyClock::now();
  auto last_checkpoint = step_start;
  RunCheckpoints checkpoints({.plan = run.loaded,
                              .train_order = run.data.train_order,
                              .lock = run.checkpoint_lock.get(),
                              .leader = leader,
                              .ranks_on_node = session.local_size(),
                              .failing_write_step = injected_fault_step(
                                  "PARAPLAN_FAIL_CHECKPOINT_WRITE_AT_STEP", session.world_rank()),
                              .slow_write_step = injected_fault_step(
                                  "PARAPLAN_SLOW_CHECKPOINT_WRITE_AT_STEP", session.world_rank()),
                              .tokenizer = run.tokenizer},
                             rank, options);
  for (int step = static_cast<int>(state.step); step < last_step; ++step) {
    faults.before(step + 1);
    TimedStep timed =
        train_one_step(run, rank, constants, state, step, step_start, last_checkpoint,
                       options.checkpoint_every_seconds, checkpoints, session.world_size());
    checkpoints.conclude(timed.checkpoint_progress);
    StepMetrics& metrics = timed.metrics;
    const bool last = step + 1 == last_step;
    if (data.validation &&
        (last || (constants.eval_interval > 0 && (step + 1) % constants.eval_interval == 0))) {
      metrics.validation_loss =
          evaluate(rank, *data.validation, training, constants.eval_batches, data.validation_name);
      summary.final_validation_loss = metrics.validation_loss;
    }
    if (run.hellaswag &&
        (last || (constants.eval_interval > 0 && (step + 1) % constants.eval_interval == 0))) {
      metrics.hellaswag = evaluate_multiple_choice(rank, *run.hellaswag, training,
                                                   "--hellaswag " + options.hellaswag)
                              .score;
      summary.final_hellaswag = metrics.hellaswag;
    }
    if (leader) logger.log(metrics);
    summary.losses.push_back(metrics.loss);
    summary.host_synchronizations.push_back(metrics.host_synchronizations);
    if (!options.checkpoint_dir.empty() &&
        (last || timed.checkpoint_due_by_time ||
         (options.checkpoint_every > 0 && (step + 1) % options.checkpoint_every == 0))) {
      checkpoints.save(step + 1, state, last);
      last_checkpoint = SteadyClock::now();
    }
    // Evaluation, logging and checkpoints are not the next step's time.
    step_start = SteadyClock::now();
  }
  summary.last_step = last_step;
  const std::string report = memory_report(run.loaded, *rank.memory, rank.groups);
  if (leader) std::cout << report;
  return summary;
}

TrainSummary train_on_this_rank(const TrainOptions& options, MpiSession& session) {
  RunInputs run = validate_run(options, session);
  RankBuildOptions build{.backend = options.backend,
                         .transport = options.transport,
                         .wrap_groups = {},
                         .wrap_ops = {},
                         .collective_timeout_seconds = options.collective_timeout_seconds,
                         .max_positions = run.model.config.max_positions};
  if (const char* emulate = std::getenv("PARAPLAN_TEST_NCCL_TEARDOWN");
      emulate != nullptr && std::string(emulate) == "1")
    build.wrap_groups = [](ProcessGroups& groups, kernels::Ops&) {
      for (std::unique_ptr<Communicator>* group :
           {&groups.world, &groups.tensor, &groups.data, &groups.zero, &groups.zero_replicas,
            &groups.embedding})
        if (*group) *group = std::make_unique<NcclLikeTeardownCommunicator>(std::move(*group));
    };
  RankState rank = build_rank_state(run.loaded, run.model, run.mesh, session, build);
  try {
    return train_steps(run, rank, options, session);
  } catch (const std::exception& error) {
    // The job ends here, while `rank` lives: unwinding would destroy its
    // communicators, and NCCL's destroy (and the stream synchronization
    // before it) waits for peers that wait for this rank, so the job would
    // end only at the peers' collective timeout, with their error instead of
    // this one (nccl_like_teardown.h).
    if (session.world_size() > 1) MpiSession::abort_job(error.what());
    throw;
  }
}

}  // namespace

TrainSummary train(const TrainOptions& options) {
  MpiSession session;
  try {
    return train_on_this_rank(options, session);
  } catch (const std::exception& error) {
    // One rank's failure ends the whole job; returning would hang the others.
    if (session.world_size() > 1) MpiSession::abort_job(error.what());
    throw;
  }
}

}  // namespace paraplan

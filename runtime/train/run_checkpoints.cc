// run_checkpoints.cc: a training run's checkpoints (run_checkpoints.h).
#include "runtime/train/run_checkpoints.h"

#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "common/atomic_file.h"
#include "common/bounded_file.h"
#include "runtime/checkpoint/checkpoint_retention.h"
#include "runtime/tokenizer/bpe_tokenizer.h"

namespace paraplan {
namespace {

// "1.23 s".
std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f s", seconds);
  return text;
}

}  // namespace

RunCheckpoints::RunCheckpoints(RunCheckpointInputs inputs, RankState& rank,
                               const TrainOptions& options)
    : inputs_(std::move(inputs)), rank_(rank), options_(options) {}

RunCheckpoints::~RunCheckpoints() {
  if (!removal_.joinable()) return;
  // A job ending with an error must not wait for a removal (its peers wait
  // in a collective meanwhile); the thread holds only copies.
  if (std::uncaught_exceptions() > 0)
    removal_.detach();
  else
    removal_.join();
}

double RunCheckpoints::progress() const {
  return pending_ ? static_cast<double>(pending_->progress()) : 0.0;
}

void RunCheckpoints::conclude(double job_progress) {
  using Progress = PendingCheckpoint::Progress;
  if (!pending_ || job_progress == static_cast<double>(Progress::kWriting)) return;
  if (job_progress == static_cast<double>(Progress::kFailed))
    throw std::runtime_error(pending_->job_failure(*rank_.groups.world));
  const std::string written = pending_->publish(fence());
  if (inputs_.leader) {
    const double since = std::chrono::duration<double>(Clock::now() - pending_started_).count();
    announce(written, pending_->step(),
             " (written in the background: " + seconds_text(loop_seconds_) +
                 " in the training loop, published " + seconds_text(since) + " after it began)");
  }
  pending_.reset();
}

void RunCheckpoints::save(int step, const TrainState& state, bool last) {
  if (pending_) {
    pending_->wait();
    double job_progress = progress();
    rank_.groups.world->all_reduce(&job_progress, 1, ReduceOp::kMax);
    conclude(job_progress);
  }
  const TrainState saved{.step = step,
                         .next_train_sample = state.next_train_sample,
                         .seed = state.seed,
                         .data_order = inputs_.train_order};
  const auto started = Clock::now();
  if (options_.checkpoint_async && !last) {
    pending_ =
        start_distributed_checkpoint(options_.checkpoint_dir, inputs_.plan, *rank_.stage,
                                     *rank_.optimizer, rank_.groups, saved, background_write(step));
    if (!pending_->in_line_note().empty())
      std::cout << "checkpoint: " << pending_->in_line_note() << std::endl;
    pending_started_ = started;
    loop_seconds_ = std::chrono::duration<double>(Clock::now() - started).count();
    return;
  }
  const std::string written =
      save_distributed_checkpoint(options_.checkpoint_dir, inputs_.plan, *rank_.stage,
                                  *rank_.optimizer, rank_.groups, saved, fence());
  if (inputs_.leader)
    announce(written, step,
             " (saved in line in " +
                 seconds_text(std::chrono::duration<double>(Clock::now() - started).count()) + ")");
}

std::optional<CheckpointTokenizer> tokenizer_for_checkpoints(const std::string& given,
                                                             const std::string& started_from,
                                                             int64_t vocab_size,
                                                             const std::string& plan_path) {
  // A given file is checked; one carried from where the run started is kept
  // as it is (a model's tokenizer paraplan cannot read still belongs with it).
  // A given tiktoken file is kept as the tokenizer.json it amounts to, which
  // transformers' AutoTokenizer loads beside the checkpoint's config.json.
  if (!given.empty()) {
    const BpeTokenizer tokenizer = load_tokenizer_for_model(given, vocab_size, plan_path);
    if (std::filesystem::path(given).extension() != ".json")
      return CheckpointTokenizer{.name = "tokenizer.json",
                                 .bytes = tokenizer.to_hugging_face_json()};
  }
  const std::string path =
      given.empty() && !started_from.empty() ? tokenizer_file_in(started_from) : given;
  if (path.empty()) return std::nullopt;
  // Under a name of its own, so that it cannot replace a checkpoint's file.
  const bool json = std::filesystem::path(path).extension() == ".json";
  return CheckpointTokenizer{.name = json ? "tokenizer.json" : "tokenizer.tiktoken",
                             .bytes = read_bounded_file(path, kTokenizerFile)};
}

std::function<void()> RunCheckpoints::fence() const {
  return [lock = inputs_.lock] {
    if (lock) lock->check_still_held();
  };
}

BackgroundWrite RunCheckpoints::background_write(int step) const {
  BackgroundWrite background{.ranks_on_node = inputs_.ranks_on_node, .before_writing = {}};
  if (step == inputs_.slow_write_step)
    background.before_writing = [] { std::this_thread::sleep_for(std::chrono::seconds(2)); };
  if (step == inputs_.failing_write_step)
    background.before_writing = [step] {
      throw std::runtime_error("injected failure writing the checkpoint of step " +
                               std::to_string(step) + " (PARAPLAN_FAIL_CHECKPOINT_WRITE_AT_STEP)");
    };
  return background;
}

void RunCheckpoints::announce(const std::string& written, int64_t step, const std::string& how) {
  std::cout << "checkpoint: " << written << how << std::endl;
  // After the publish: the checkpoint is whole without it, so a failure is
  // said and the run goes on.
  if (inputs_.tokenizer) try {
      write_file_atomically(std::filesystem::path(written) / inputs_.tokenizer->name,
                            inputs_.tokenizer->bytes);
    } catch (const std::exception& error) {
      std::cout << "warning: the tokenizer was not kept beside " << written << ": " << error.what()
                << std::endl;
    }
  published_.insert(std::filesystem::path(written).filename().string());
  if (options_.checkpoint_keep_latest > 0) remove_old(step);
}

// On a thread, so that removing a terabyte does not hold the training loop;
// one removal at a time. A failure to remove is said and the run goes on:
// the checkpoints are whole, and ending a run for them would lose work.
void RunCheckpoints::remove_old(int64_t step) {
  if (removal_.joinable()) removal_.join();
  fence()();  // a run whose directory another run took removes nothing
  std::optional<std::set<std::string>> only;
  if (!options_.resume) only = published_;
  removal_ = std::thread([directory = options_.checkpoint_dir, step,
                          keep = options_.checkpoint_keep_latest, only = std::move(only)] {
    std::string line;
    try {
      const std::vector<std::string> removed =
          remove_old_checkpoints(directory, step, keep, only ? &*only : nullptr);
      if (removed.empty()) return;
      std::string names;
      for (const std::string& name : removed) names += (names.empty() ? "" : ", ") + name;
      line = "checkpoint: removed " + names + " (--checkpoint-keep-latest " + std::to_string(keep) +
             ")\n";
    } catch (const std::exception& error) {
      line =
          "checkpoint: warning: " + std::string(error.what()) + "; it stays, and the run goes on\n";
    }
    std::cout << line << std::flush;  // one write: the step lines may come between
  });
}

}  // namespace paraplan

// trainer.cc: the training loop of `paraplan train`.
#include "runtime/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <stdexcept>

#include "runtime/checkpoint.h"
#include "runtime/data_loader.h"
#include "runtime/executor.h"
#include "runtime/gpt_model.h"
#include "runtime/lr_schedule.h"
#include "runtime/optimizer.h"
#include "runtime/plan_model.h"
#include "runtime/step_logger.h"
#include "runtime/token_file.h"
#include "schema/plan_io.h"

namespace paraplan {

namespace {

std::unique_ptr<kernels::Ops> make_backend(const std::string& name) {
  if (name == "cpu") return kernels::make_cpu_ops();
  if (name == "cuda") return kernels::make_cuda_ops(0);
  throw std::runtime_error("--backend: unknown backend '" + name + "'; valid: cpu, cuda");
}

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
  }
  return schedule;
}

// Mean loss over the plan's eval_batches micro-batches of the validation data,
// always the same samples (0, 1, ...), so runs are comparable.
double evaluate(GptStage& stage, kernels::Ops& ops, const DataLoader& data, int batches) {
  const int batch = stage.micro_batch_size();
  const size_t tokens = static_cast<size_t>(batch) * stage.layout().config().seq_len;
  std::vector<int32_t> inputs(tokens), targets(tokens);
  double loss_sum = 0;
  for (int i = 0; i < batches; ++i) {
    data.load(static_cast<int64_t>(i) * batch, batch, inputs.data(), targets.data());
    ops.copy_from_host(stage.tokens(0), inputs.data(), tokens * sizeof(int32_t));
    ops.copy_from_host(stage.targets(0), targets.data(), tokens * sizeof(int32_t));
    stage.forward(0, 1.0f, /*training=*/false);
    loss_sum += stage.loss_sum(0);
  }
  return loss_sum / (static_cast<double>(tokens) * batches);
}

std::vector<float> to_host(kernels::Ops& ops, const float* source, size_t count) {
  std::vector<float> host(count);
  ops.copy_to_host(host.data(), source, count * sizeof(float));
  return host;
}

}  // namespace

TrainSummary train(const TrainOptions& options) {
  // ---- validate everything before allocating anything -----------------------
  const LoadedPlan loaded = load_plan(options.plan_path);
  const schema::Plan& plan = loaded.plan();
  const PlanModel model = plan_model_for_single_process(loaded);
  const schema::Training& training = *plan.training();
  const GptConfig& config = model.config;

  const TokenFile train_tokens(options.data_path);
  train_tokens.validate_vocab(config.vocab_size);
  const DataLoader train_data(train_tokens, config.seq_len);
  std::unique_ptr<TokenFile> validation_tokens;
  std::unique_ptr<DataLoader> validation_data;
  if (!options.validation_data_path.empty()) {
    validation_tokens = std::make_unique<TokenFile>(options.validation_data_path);
    validation_tokens->validate_vocab(config.vocab_size);
    validation_data = std::make_unique<DataLoader>(*validation_tokens, config.seq_len);
  }
  const int last_step = options.steps >= 0 ? options.steps : training.optimizer()->total_steps();
  if (options.resume && options.checkpoint_dir.empty())
    throw std::runtime_error("--resume needs --checkpoint-dir (the directory to resume from)");
  if (options.checkpoint_every < 0)
    throw std::runtime_error("--checkpoint-every: must be >= 0 (0 saves only at the end)");
  std::string resume_from;
  if (options.resume) resume_from = resolve_checkpoint(options.checkpoint_dir);

  // ---- build ------------------------------------------------------------------
  std::unique_ptr<kernels::Ops> ops = make_backend(options.backend);
  MemoryTracker memory(*ops);
  const GptLayout layout(config, model.stage);
  const schema::StageSchedule& schedule = *plan.schedule()->stages()->Get(0);
  GptStage stage(layout, *ops, memory, training.micro_batch_size(),
                 StageExecutor::slots_needed(schedule), model.recompute);
  const schema::Optimizer& optimizer_plan = *training.optimizer();
  AdamW optimizer(layout, *ops, memory,
                  AdamWSettings{.beta1 = optimizer_plan.beta1(),
                                .beta2 = optimizer_plan.beta2(),
                                .epsilon = optimizer_plan.epsilon(),
                                .weight_decay = optimizer_plan.weight_decay(),
                                .grad_clip = optimizer_plan.grad_clip()});
  StageExecutor executor(schedule, stage, *ops, training.num_micro_batches(), 0);

  TrainState state{.step = 0, .next_train_sample = 0, .seed = training.seed()};
  if (!resume_from.empty()) {
    std::vector<float> params(layout.num_elements()), first(layout.num_elements()),
        second(layout.num_elements());
    state = load_checkpoint(resume_from, layout, params.data(), first.data(), second.data());
    const size_t bytes = layout.num_elements() * sizeof(float);
    ops->copy_from_host(stage.parameters(), params.data(), bytes);
    ops->copy_from_host(optimizer.first_moment(), first.data(), bytes);
    ops->copy_from_host(optimizer.second_moment(), second.data(), bytes);
    std::cout << "resumed from " << resume_from << " at step " << state.step << std::endl;
  } else {
    std::vector<float> params(layout.num_elements());
    layout.initialize(params.data(), training.seed());
    ops->copy_from_host(stage.parameters(), params.data(), params.size() * sizeof(float));
  }

  const LrSchedule lr_schedule = lr_schedule_of(optimizer_plan);
  const int64_t tokens_per_step =
      static_cast<int64_t>(training.global_batch_size()) * config.seq_len;
  const float loss_scale = 1.0f / static_cast<float>(tokens_per_step);
  const double flops_per_token = training_flops_per_token(config);
  const schema::Cluster* cluster = plan.predictions() ? plan.predictions()->cluster() : nullptr;
  const double peak_flops = cluster ? cluster->peak_flops() : 0.0;
  const uint64_t capacity = cluster ? cluster->device_memory_bytes() : 0;
  const int eval_interval = training.eval_interval();
  const int eval_batches = std::max(1, training.eval_batches());

  std::cout << "paraplan train: " << config.num_layers << " layers, d_model " << config.d_model
            << ", " << config.num_parameters() << " parameters, backend "
            << kernels::backend_name(ops->backend()) << ", global batch "
            << training.global_batch_size() << " x seq " << config.seq_len << " = "
            << tokens_per_step << " tokens/step, steps " << state.step << " -> " << last_step
            << std::endl;

  StepLogger logger(options.log_json, options.resume);
  auto save = [&](int step) {
    if (options.checkpoint_dir.empty()) return;
    const size_t n = layout.num_elements();
    const std::string written = save_checkpoint(
        options.checkpoint_dir, layout, to_host(*ops, stage.parameters(), n).data(),
        to_host(*ops, optimizer.first_moment(), n).data(),
        to_host(*ops, optimizer.second_moment(), n).data(),
        TrainState{.step = step, .next_train_sample = state.next_train_sample, .seed = state.seed});
    std::cout << "checkpoint: " << written << std::endl;
  };

  TrainSummary summary;
  summary.first_step = static_cast<int>(state.step);
  for (int step = static_cast<int>(state.step); step < last_step; ++step) {
    const auto start = std::chrono::steady_clock::now();
    ops->fill_zero(stage.gradients(), layout.num_elements());
    StepMetrics metrics;
    metrics.learning_rate = lr_schedule.at(step);
    ExecutorHooks hooks;
    hooks.optimizer_step = [&] {
      metrics.grad_norm = optimizer.gradient_norm(stage.gradients());
      optimizer.clip(stage.gradients(), metrics.grad_norm);
      optimizer.step(stage.parameters(), stage.gradients(),
                     static_cast<float>(metrics.learning_rate), step + 1);
    };
    const double loss_sum =
        executor.run_step(train_data, state.next_train_sample, loss_scale, hooks);
    ops->synchronize();
    state.next_train_sample += training.global_batch_size();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    metrics.step = step + 1;
    metrics.loss = loss_sum / static_cast<double>(tokens_per_step);
    metrics.step_seconds = seconds;
    metrics.tokens_per_second = tokens_per_step / seconds;
    metrics.tflops = flops_per_token * metrics.tokens_per_second / 1e12;
    metrics.mfu = peak_flops > 0 ? flops_per_token * metrics.tokens_per_second / peak_flops : 0;
    metrics.peak_memory_bytes = memory.peak_total();
    metrics.memory_capacity_bytes = capacity;
    if (!std::isfinite(metrics.loss))
      throw std::runtime_error("step " + std::to_string(step + 1) + ": the loss is not finite (" +
                               std::to_string(metrics.loss) +
                               "); lower training.learning_rate or check the data");
    const bool last = step + 1 == last_step;
    if (validation_data && (last || (eval_interval > 0 && (step + 1) % eval_interval == 0))) {
      metrics.validation_loss = evaluate(stage, *ops, *validation_data, eval_batches);
      summary.final_validation_loss = metrics.validation_loss;
    }
    logger.log(metrics);
    summary.losses.push_back(metrics.loss);
    if (last || (options.checkpoint_every > 0 && (step + 1) % options.checkpoint_every == 0))
      save(step + 1);
  }
  summary.last_step = last_step;
  return summary;
}

}  // namespace paraplan

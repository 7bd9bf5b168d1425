// evaluation.cc: the validation loss of `paraplan train` (evaluation.h).
#include "runtime/train/evaluation.h"

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <vector>

#include "kernels/dtype.h"
#include "runtime/comm/communicator.h"
#include "runtime/pipeline/schedule_executor.h"

namespace paraplan {

namespace {

// Forwards `batches` global batches of `data`, the same samples under every
// plan: split over data-parallel ranks and micro-batches as training splits a
// step, each micro-batch through the pipeline. After each forward of the
// chunk with the head, after_head (if set) gets the micro-batch's first
// sample, its index among this rank's micro-batches of the global batch, and
// the chunk (its slot 0).
void forward_global_batches(RankState& rank, const SampleSource& data,
                            const schema::Training& training, int batches,
                            const std::function<void(int64_t, int, ModelStage&)>& after_head) {
  rank.optimizer->wait_for_parameters();
  ModelStage& stage = *rank.stage;
  const MeshCoordinates& mesh = rank.groups.mesh;
  const int batch = training.micro_batch_size(), micro_batches = training.num_micro_batches();
  const size_t tokens = static_cast<size_t>(batch) * stage.layout().config().seq_len;
  const size_t activations = stage.activation_elements();
  const int chunks = stage.num_chunks();
  std::vector<int32_t> inputs(tokens), targets(tokens);
  for (int step = 0; step < batches; ++step) {
    for (int micro_batch = 0; micro_batch < micro_batches; ++micro_batch) {
      const int64_t sample =
          static_cast<int64_t>(step) * training.global_batch_size() +
          static_cast<int64_t>(mesh.data_rank * micro_batches + micro_batch) * batch;
      // Through this rank's chunks in their order (each before the next in
      // model order): every rank takes the micro-batches in the same order,
      // so the transfers meet. A neighbour chunk on this rank (ZB-V's turn)
      // gets the output by a copy.
      const PipelineLayout layout = rank.pipeline.layout(chunks);
      for (int c = 0; c < chunks; ++c) {
        ModelStage& chunk = stage.chunk(c);
        if (chunk.has_embedding() || chunk.has_head()) {
          data.load(sample, batch, inputs.data(), targets.data());
          chunk.load_micro_batch(0, inputs.data(), targets.data());
        }
        const int local_input = layout.local_neighbour(mesh.pipeline_rank, c, false);
        if (local_input >= 0) {
          const ModelStage& from = stage.chunk(local_input);
          rank.ops->copy(chunk.input(0), from.output(0),
                         activations * kernels::dtype_bytes(stage.dtype()));
        } else if (!chunk.has_embedding()) {
          rank.groups.peers->send_receive(nullptr, 0, -1, chunk.input(0), activations,
                                          previous_virtual_stage_rank(rank.pipeline, c, chunks),
                                          stage.dtype(),
                                          previous_link_tag(rank.pipeline, c, chunks));
        }
        chunk.forward(0, 1.0f, /*training=*/false);
        if (chunk.has_head() && after_head) after_head(sample, micro_batch, chunk);
        if (!chunk.has_head() && layout.local_neighbour(mesh.pipeline_rank, c, true) < 0)
          rank.groups.peers->send_receive(
              chunk.output(0), activations, next_virtual_stage_rank(rank.pipeline, c, chunks),
              nullptr, 0, -1, stage.dtype(), next_link_tag(rank.pipeline, c, chunks));
      }
    }
  }
}

// The validation loss over `batches` global batches of the validation data:
// the mean loss per token (the same on every rank).
double evaluate_unchecked(RankState& rank, const SampleSource& data,
                          const schema::Training& training, int batches) {
  forward_global_batches(rank, data, training, batches, {});
  ModelStage& stage = *rank.stage;
  const int chunks = stage.num_chunks();
  // The forwards' losses, summed on the device (on the chunk with the head).
  double stage_loss = 0;
  for (int c = 0; c < chunks; ++c) stage_loss += stage.chunk(c).take_loss_sum();
  // A bad target the loss kernels found here is this data's, not the next
  // training step's (the CUDA backend reports it late).
  rank.ops->check_deferred_errors();
  rank.memory->sample_backend();  // scratch its forwards grew counts in the peak
  const double loss_sum = job_loss_sum(rank, stage_loss);
  const double total_tokens =
      static_cast<double>(batches) * training.global_batch_size() * stage.layout().config().seq_len;
  return loss_sum / total_tokens;
}

// Every row's summed loss over its scored span: each head rank of tensor
// rank 0 adds its tokens' (its micro-batches' rows; with context parallelism,
// its positions of them), and one all-reduce over the world sums them. The
// micro-batches' losses are gathered on the device and read back once per
// global batch (one host synchronization, not one per micro-batch).
std::vector<double> row_loss_sums(RankState& rank, const MultipleChoiceRows& rows,
                                  const schema::Training& training) {
  const int global_batch = training.global_batch_size();
  const int64_t batches = (rows.num_rows() + global_batch - 1) / global_batch;
  std::vector<double> sums(static_cast<size_t>(batches * global_batch), 0.0);
  const ContextShard& context = rank.stage->context();
  const std::vector<int32_t> positions = context.positions_of(context.rank);
  const int local_length = context.local_length(), batch = training.micro_batch_size();
  const int micro_batches = training.num_micro_batches();
  const bool scores = rank.groups.mesh.tensor_rank == 0;  // every tensor rank has the losses
  const size_t micro_batch_losses = static_cast<size_t>(batch) * local_length;
  const size_t bytes = micro_batch_losses * micro_batches * sizeof(float);
  float* gathered = nullptr;  // on the rank whose chunk has the head, at its first forward
  std::vector<float> losses(micro_batch_losses * micro_batches);
  std::vector<int64_t> first_samples(micro_batches);
  const auto add_rows = [&] {
    rank.ops->copy_to_host(losses.data(), gathered, bytes);
    for (int m = 0; m < micro_batches; ++m)
      for (int b = 0; b < batch; ++b) {
        const int64_t row = first_samples[m] + b;
        if (row >= rows.num_rows()) break;
        const MultipleChoiceRows::Span span = rows.scored_span(row);
        const float* row_losses =
            losses.data() + m * micro_batch_losses + static_cast<size_t>(b) * local_length;
        double sum = 0;
        for (int i = 0; i < local_length; ++i)
          if (positions[i] >= span.begin && positions[i] < span.end) sum += row_losses[i];
        sums[static_cast<size_t>(row)] += sum;
      }
  };
  try {
    forward_global_batches(
        rank, rows, training, static_cast<int>(batches),
        [&](int64_t first_sample, int micro_batch, ModelStage& head) {
          if (!scores) return;
          if (gathered == nullptr)
            gathered =
                static_cast<float*>(rank.memory->allocate(bytes, MemoryCategory::kWorkspace));
          rank.ops->copy(gathered + micro_batch * micro_batch_losses, head.token_losses(0),
                         micro_batch_losses * sizeof(float));
          first_samples[micro_batch] = first_sample;
          if (micro_batch + 1 == micro_batches) add_rows();
        });
  } catch (...) {
    if (gathered != nullptr) rank.memory->release(gathered);
    throw;
  }
  if (gathered != nullptr) rank.memory->release(gathered);
  // The forwards also summed their losses on the device: not a training
  // step's, dropped.
  for (int c = 0; c < rank.stage->num_chunks(); ++c) rank.stage->chunk(c).take_loss_sum();
  rank.ops->check_deferred_errors();
  rank.memory->sample_backend();
  rank.groups.world->all_reduce(sums.data(), sums.size(), ReduceOp::kSum);
  return sums;
}

}  // namespace

MultipleChoiceEvaluation evaluate_multiple_choice(RankState& rank, const MultipleChoiceRows& rows,
                                                  const schema::Training& training,
                                                  const std::string& name) {
  try {
    const std::vector<double> sums = row_loss_sums(rank, rows, training);
    return MultipleChoiceEvaluation{rows.score(sums), rows.mean_losses(sums)};
  } catch (const std::out_of_range& error) {
    throw std::runtime_error(name + ": " + error.what() +
                             " (every token must be below the model's vocab_size)");
  }
}

int evaluation_batches(const schema::Training& training, int64_t samples_per_pass) {
  const int64_t whole_batches = samples_per_pass / std::max(1, training.global_batch_size());
  return static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(training.eval_batches(), whole_batches)));
}

std::string evaluation_batches_note(const schema::Training& training, int64_t samples_per_pass,
                                    const std::string& data_name) {
  const int64_t global_batch = std::max(1, training.global_batch_size());
  const std::string samples = std::to_string(samples_per_pass) + " samples";
  // Less than one global batch: the one batch read wraps around the data,
  // the least an evaluation can read without changing the batch's split.
  if (samples_per_pass < global_batch)
    return "evaluation: " + data_name + " holds " + samples + ", fewer than one global batch of " +
           std::to_string(global_batch) +
           ": each evaluation reads 1 batch, which wraps around them";
  const int batches = evaluation_batches(training, samples_per_pass);
  if (batches >= training.eval_batches()) return "";
  return "evaluation: training.eval_batches = " + std::to_string(training.eval_batches()) +
         " asks for more than one pass over " + data_name + " (" + samples + " = " +
         std::to_string(samples_per_pass / global_batch) + " global batches of " +
         std::to_string(global_batch) + "): each evaluation reads " + std::to_string(batches) +
         " batch(es), one pass";
}

double evaluate(RankState& rank, const SampleSource& data, const schema::Training& training,
                int batches, const std::string& data_name) {
  try {
    return evaluate_unchecked(rank, data, training, batches);
  } catch (const std::out_of_range& error) {
    throw std::runtime_error(data_name + ": " + error.what() +
                             " (evaluation; every token must be below the model's vocab_size)");
  }
}

}  // namespace paraplan

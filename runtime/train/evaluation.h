// evaluation.h: what `paraplan train` and `paraplan evaluate` measure of a
// model: the validation loss over eval_batches global batches of the
// validation data (at most one pass over it), and the accuracy on a
// multiple-choice set (HellaSwag; runtime/data/multiple_choice.h). Both read
// the same samples under every plan, split over data-parallel ranks and
// micro-batches as training splits a step, each micro-batch forwarded
// through the pipeline.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/data/multiple_choice.h"
#include "runtime/data/sample_source.h"
#include "runtime/pipeline/rank_state.h"
#include "schema/plan_io.h"

namespace paraplan {

// The global batches one evaluation reads: the plan's eval_batches, but at
// most one pass over the validation data's samples_per_pass (and at least
// one batch, which wraps around data smaller than a global batch): a typo in
// eval_batches cannot make every evaluation read the data over and over.
int evaluation_batches(const schema::Training& training, int64_t samples_per_pass);

// The line `train` prints once when evaluation_batches cut eval_batches
// down, or when the data holds less than one global batch (the one batch
// read wraps around it); empty otherwise.
std::string evaluation_batches_note(const schema::Training& training, int64_t samples_per_pass,
                                    const std::string& data_name);

// The mean loss per token over `batches` global batches, the same on every
// rank. A target outside the vocabulary, found here by either backend (the
// CUDA one reports it at the end), throws std::runtime_error naming data_name
// ("--val-data FILE").
double evaluate(RankState& rank, const SampleSource& data, const schema::Training& training,
                int batches, const std::string& data_name);

// The score on every row of `rows` (whole global batches; the rows past the
// last are zeros, forwarded and ignored), the same on every rank. A token
// outside the vocabulary throws std::runtime_error naming `name`.
MultipleChoiceEvaluation evaluate_multiple_choice(RankState& rank, const MultipleChoiceRows& rows,
                                                  const schema::Training& training,
                                                  const std::string& name);

}  // namespace paraplan

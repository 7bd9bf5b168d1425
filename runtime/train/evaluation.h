// evaluation.h: the validation loss of `paraplan train`: eval_batches global
// batches of the validation data (at most one pass over it), the same samples
// under every plan, split
// over data-parallel ranks and micro-batches as training splits a step, each
// micro-batch forwarded through the pipeline.
#pragma once

#include <cstdint>
#include <string>

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

}  // namespace paraplan

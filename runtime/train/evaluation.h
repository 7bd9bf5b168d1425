// evaluation.h: the validation loss of `paraplan train`: eval_batches global
// batches of the validation data, the same samples under every plan, split
// over data-parallel ranks and micro-batches as training splits a step, each
// micro-batch forwarded through the pipeline.
#pragma once

#include <string>

#include "runtime/data/sample_source.h"
#include "runtime/pipeline/rank_state.h"
#include "schema/plan_io.h"

namespace paraplan {

// The mean loss per token, the same on every rank. A target outside the
// vocabulary, found here by either backend (the CUDA one reports it at the
// end), throws std::runtime_error naming data_name ("--val-data FILE").
double evaluate(RankState& rank, const SampleSource& data, const schema::Training& training,
                const std::string& data_name);

}  // namespace paraplan

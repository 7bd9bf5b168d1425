// model_from.h: `--model-from DIR` of `paraplan plan`, `autotune` and
// `profile`: the job's [model] from a Hugging Face model directory's
// config.json (GPT-2, Llama, Mistral, Qwen 2: what `train --init-from` and
// `evaluate` load), given to the planner as overrides of the job file, so the
// plan's model is the one the weights fit and nobody copies twelve numbers
// by hand.
//
// The job keeps the training context and the precision: [model] seq_len
// (required for the Llama family, at most max_position_embeddings and any
// sliding window; GPT-2's learned positions fix it at n_positions, the
// default) and dtype. Any other [model] key in the job file or on the command
// line is refused naming it, as two sources of one model would disagree.
#pragma once

#include <string>
#include <vector>

#include "planner/job/job_config.h"

namespace paraplan {

// overrides preceded by the model's keys from model_dir/config.json (or the
// config.json given itself); overrides as they are when model_dir is empty.
// job_path is the job file, read for its [model] keys. Throws
// std::runtime_error naming the file and the key.
std::vector<ConfigOverride> with_model_from(const std::string& model_dir,
                                            const std::string& job_path,
                                            const std::vector<ConfigOverride>& overrides);

}  // namespace paraplan

// data_loader.cc: samples by global index through blend, epochs and shuffle
// (data_loader.h).
#include "runtime/data/data_loader.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace paraplan {

namespace {

std::vector<double> weights_of(const std::vector<DataSource>& sources, const std::string& what) {
  if (sources.empty()) throw std::runtime_error(what + ": no dataset named");
  std::vector<double> weights;
  for (size_t d = 0; d < sources.size(); ++d) {
    if (!(sources[d].weight > 0) || !std::isfinite(sources[d].weight))
      throw std::runtime_error(what + " '" + sources[d].paths + "': weight " +
                               std::to_string(sources[d].weight) +
                               " must be a positive finite number (weights are normalized)");
    weights.push_back(sources[d].weight);
  }
  return weights;
}

// "--data 'train_*.bin'", or a blend's datasets one after the other.
std::string name_of(const std::vector<DataSource>& sources, const std::string& what) {
  std::string name = what;
  for (size_t d = 0; d < sources.size(); ++d) name += (d ? ", '" : " '") + sources[d].paths + "'";
  return name;
}

}  // namespace

DataLoader::DataLoader(const std::vector<DataSource>& sources, int seq_len, int vocab_size,
                       DataOrder order, const std::string& what)
    : name_(name_of(sources, what)),
      seq_len_(seq_len),
      vocab_size_(vocab_size),
      order_(order),
      blend_(weights_of(sources, what)) {
  for (const DataSource& source : sources) {
    datasets_.push_back(std::make_unique<TokenDataset>(source.paths, seq_len, what));
    if (datasets_.back()->format() != datasets_.front()->format())
      throw std::runtime_error(what + ": " + datasets_.front()->shard(0).path() + " and " +
                               datasets_.back()->shard(0).path() +
                               " hold tokens of different widths (uint16 and uint32); one run's "
                               "data must come from one tokenizer and format");
  }
}

DataLoader::DataLoader(const std::string& paths, int seq_len, int vocab_size,
                       const std::string& what)
    : DataLoader({DataSource{paths, 1.0}}, seq_len, vocab_size, DataOrder{}, what) {}

int64_t DataLoader::samples_per_epoch() const {
  int64_t samples = 0;
  for (const auto& dataset : datasets_) samples += dataset->num_samples();
  return samples;
}

DataLoader::Location DataLoader::locate(int64_t k) const {
  return locate(k, 0);
}

DataLoader::Location DataLoader::locate(int64_t first, int offset) const {
  // The dataset's own draw: first + offset itself for a lone dataset, the
  // blend's otherwise.
  int dataset = 0;
  int64_t draw_first = first, draw_offset = offset;
  if (datasets_.size() > 1) {
    if (first > std::numeric_limits<int64_t>::max() - offset)
      throw std::runtime_error(name_ + ": sample index " + std::to_string(first) + " + " +
                               std::to_string(offset) + " is beyond int64's range");
    const BlendSchedule::Draw draw = blend_.draw(first + offset);
    dataset = draw.dataset;
    draw_first = draw.index;
    draw_offset = 0;
  }
  const int64_t samples = datasets_[static_cast<size_t>(dataset)]->num_samples();
  // Reduced before adding, so no index of int64's range overflows; the epoch
  // is unsigned, so it wraps rather than overflows at int64's end.
  const int64_t past = draw_first % samples + draw_offset;
  const int64_t position = past % samples;
  if (!order_.shuffle) return {dataset, position};
  const uint64_t epoch =
      static_cast<uint64_t>(draw_first / samples) + static_cast<uint64_t>(past / samples);
  return {dataset, permute(position, samples, shuffle_key(order_.seed, dataset, epoch))};
}

void DataLoader::load(int64_t first_sample, int count, int32_t* inputs, int32_t* targets) const {
  if (first_sample < 0 || count < 0)
    throw std::runtime_error(name_ + ": cannot load " + std::to_string(count) +
                             " samples from index " + std::to_string(first_sample) +
                             "; both must be non-negative");
  for (int i = 0; i < count; ++i) {
    const Location at = locate(first_sample, i);
    datasets_[static_cast<size_t>(at.dataset)]->read_sample(
        at.sample, vocab_size_, inputs + static_cast<int64_t>(i) * seq_len_,
        targets + static_cast<int64_t>(i) * seq_len_);
  }
}

}  // namespace paraplan

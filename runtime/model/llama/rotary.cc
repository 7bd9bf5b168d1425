// rotary.cc: the inverse frequencies (with Llama 3.1's scaling) and the
// cos/sin tables, in fp32 operation by operation as transformers computes them
// (modeling_rope_utils: _compute_default_rope_parameters and
// _compute_llama3_parameters; LlamaRotaryEmbedding.forward).
#include "runtime/model/llama/rotary.h"

#include <cmath>

namespace paraplan::llama {

std::vector<float> rotary_inverse_frequencies(const TransformerConfig& config) {
  const int dim = config.head_dim();
  std::vector<float> inverse(dim / 2);
  for (int i = 0; i < dim / 2; i++) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inverse[i] = 1.0f / std::pow(config.rope_theta, exponent);
  }
  const RopeScaling& scaling = config.rope_scaling;
  if (scaling.factor <= 0.0f) return inverse;
  // Wavelengths longer than the original context / low_freq_factor are slowed
  // by factor, shorter than original / high_freq_factor kept, and those in
  // between interpolated smoothly.
  const float old_context = static_cast<float>(scaling.original_max_positions);
  const float low_freq_wavelength = old_context / scaling.low_freq_factor;
  const float high_freq_wavelength = old_context / scaling.high_freq_factor;
  constexpr float kTwoPi = static_cast<float>(2.0 * 3.141592653589793);
  for (float& frequency : inverse) {
    const float wavelength = kTwoPi / frequency;
    const float slowed = wavelength > low_freq_wavelength ? frequency / scaling.factor : frequency;
    const bool medium = !(wavelength < high_freq_wavelength) && !(wavelength > low_freq_wavelength);
    if (medium) {
      const float smooth = (old_context / wavelength - scaling.low_freq_factor) /
                           (scaling.high_freq_factor - scaling.low_freq_factor);
      frequency = (1.0f - smooth) * slowed / scaling.factor + smooth * slowed;
    } else {
      frequency = slowed;
    }
  }
  return inverse;
}

RotaryTables rotary_tables(const TransformerConfig& config) {
  const std::vector<float> inverse = rotary_inverse_frequencies(config);
  const size_t half = inverse.size();
  RotaryTables tables{std::vector<float>(config.seq_len * half),
                      std::vector<float>(config.seq_len * half)};
  for (int t = 0; t < config.seq_len; t++) {
    for (size_t i = 0; i < half; i++) {
      // The fp32 product transformers forms (inv_freq @ positions), then its
      // cosine and sine rounded to fp32.
      const float angle = inverse[i] * static_cast<float>(t);
      tables.cos[t * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      tables.sin[t * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  return tables;
}

}  // namespace paraplan::llama

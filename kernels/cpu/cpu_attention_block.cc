// cpu_attention_block.cc: attention by blocks for the CPU backend
// (kernels/ops.h, Ops::attention_block_forward/backward): a rank's queries
// against one block of keys and values, query i seeing key j when
// kv_positions[j] <= q_positions[i] and, with documents, both positions lie
// in the same document. It serves context parallelism (the ring's blocks,
// folded together by log-sum-exp) and document masking.
//
// Tiled as cpu_attention.cc: per (batch, query head, query tile), the key
// tiles in order, the products through sgemm on strided views of q and kv
// (never copied; a query head reads its KV head in place). The positions
// need not be sorted, so each (query tile, key tile) pair is classified from
// the tiles' ranges of positions and documents: nothing visible (skipped, no
// sgemm), everything visible (no mask applied), or a mix (the element mask
// computed, and the tile skipped if it turns out empty).
//   forward:  S = Q K^T * scale, masked scores -inf; an online softmax per row
//             into a local accumulator (m, l, acc); then the block's result
//             (acc / l, m + log l) is folded into out_accumulator and
//             logsumexp (in double, so the fold adds no error worth naming).
//             A row that saw no key (l = 0) is left as it was (first: 0, -inf).
//   backward: D_i = dout_i . out_i per row, then per tile P = exp(S - lse)
//             (masked: 0), dP = dOut V^T, dS = P (dP - D), and
//             dV += P^T dOut, dQ += dS K * scale, dK += dS^T Q * scale into
//             the fp32 accumulators.
// Deterministic: the tile size depends on the shape alone and every loop runs
// in a fixed order (a KV head's dK and dV take its query heads in ascending
// order), so for a fixed OpenBLAS thread count the result is bitwise
// reproducible and does not depend on the batch size.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/openblas_library.h"

namespace paraplan::kernels::cpu {

namespace {

using Shape = Ops::AttentionBlockShape;

// As cpu_attention.cc: 64 rows and keys per tile, 128 for long blocks. A
// function of the shape alone, so the bits do not depend on the batch.
int tile_size(const Shape& shape) {
  return std::max(shape.q_len, shape.kv_len) >= 512 ? 128 : 64;
}

// False for an empty problem; throws for a shape that cannot be read.
bool valid_shape(const Shape& s, const int32_t* documents) {
  if (s.num_kv_heads <= 0 || s.num_heads % s.num_kv_heads != 0)
    throw std::invalid_argument("attention_block: num_kv_heads " + std::to_string(s.num_kv_heads) +
                                " must divide num_heads " + std::to_string(s.num_heads));
  if (s.batch < 0 || s.q_len < 0 || s.kv_len < 0 || s.head_dim < 0)
    throw std::invalid_argument("attention_block: negative size");
  if (s.q_row_stride < s.num_heads * s.head_dim || s.kv_value_offset < 0 ||
      s.kv_row_stride < s.kv_value_offset + s.num_kv_heads * s.head_dim)
    throw std::invalid_argument("attention_block: row strides or value offset too small");
  if (documents != nullptr && s.seq_len <= 0)
    throw std::invalid_argument("attention_block: documents need seq_len > 0");
  return s.batch > 0 && s.q_len > 0 && s.head_dim > 0;
}

enum class Visibility { kNone, kSome, kAll };

// Ranges of positions and documents over one tile of queries or keys.
struct TileRange {
  int32_t min_position, max_position, min_document, max_document;
};

// The mask for one batch entry at a time: each query's and key's position
// and document (0 for all without documents), and their ranges per tile.
class BlockMask {
 public:
  BlockMask(const Shape& shape, const int32_t* q_positions, const int32_t* kv_positions,
            const int32_t* documents, int tile)
      : shape_(shape),
        q_positions_(q_positions),
        kv_positions_(kv_positions),
        documents_(documents),
        tile_(tile),
        q_documents_(shape.q_len, 0),
        kv_documents_(shape.kv_len, 0) {
    if (documents_ != nullptr) {
      check_positions(q_positions_, shape_.q_len);
      check_positions(kv_positions_, shape_.kv_len);
    }
    select_batch(0);
  }

  // Takes batch entry b's documents.
  void select_batch(int b) {
    if (documents_ != nullptr) {
      const int32_t* row = documents_ + static_cast<size_t>(b) * shape_.seq_len;
      for (int i = 0; i < shape_.q_len; i++) q_documents_[i] = row[q_positions_[i]];
      for (int j = 0; j < shape_.kv_len; j++) kv_documents_[j] = row[kv_positions_[j]];
    }
    ranges(q_positions_, q_documents_, q_ranges_);
    ranges(kv_positions_, kv_documents_, kv_ranges_);
  }

  // Which queries [row0, row0 + rows) see which keys [col0, col0 + cols);
  // for kSome, mask[i * cols + j] is 1 where query row0 + i sees key col0 + j.
  Visibility classify(int row0, int rows, int col0, int cols, uint8_t* mask) const {
    const TileRange& q = q_ranges_[row0 / tile_];
    const TileRange& k = kv_ranges_[col0 / tile_];
    if (k.min_position > q.max_position || k.min_document > q.max_document ||
        k.max_document < q.min_document)
      return Visibility::kNone;
    if (k.max_position <= q.min_position && q.min_document == q.max_document &&
        k.min_document == k.max_document && q.min_document == k.min_document)
      return Visibility::kAll;
    int visible = 0;
    for (int i = 0; i < rows; i++) {
      const int32_t position = q_positions_[row0 + i], document = q_documents_[row0 + i];
      uint8_t* mask_row = mask + static_cast<size_t>(i) * cols;
      for (int j = 0; j < cols; j++) {
        mask_row[j] =
            kv_positions_[col0 + j] <= position && kv_documents_[col0 + j] == document ? 1 : 0;
        visible += mask_row[j];
      }
    }
    if (visible == 0) return Visibility::kNone;
    return visible == rows * cols ? Visibility::kAll : Visibility::kSome;
  }

 private:
  void check_positions(const int32_t* positions, int n) const {
    for (int i = 0; i < n; i++) {
      if (positions[i] < 0 || positions[i] >= shape_.seq_len)
        throw std::out_of_range("attention_block: position " + std::to_string(positions[i]) +
                                " outside the sequence [0, " + std::to_string(shape_.seq_len) +
                                ")");
    }
  }
  void ranges(const int32_t* positions, const std::vector<int32_t>& documents,
              std::vector<TileRange>& out) const {
    const int n = static_cast<int>(documents.size());
    out.clear();
    for (int start = 0; start < n; start += tile_) {
      TileRange range{positions[start], positions[start], documents[start], documents[start]};
      for (int i = start + 1; i < std::min(n, start + tile_); i++) {
        range.min_position = std::min(range.min_position, positions[i]);
        range.max_position = std::max(range.max_position, positions[i]);
        range.min_document = std::min(range.min_document, documents[i]);
        range.max_document = std::max(range.max_document, documents[i]);
      }
      out.push_back(range);
    }
  }

  const Shape& shape_;
  const int32_t *q_positions_, *kv_positions_, *documents_;
  int tile_;
  std::vector<int32_t> q_documents_, kv_documents_;
  std::vector<TileRange> q_ranges_, kv_ranges_;
};

// Where one (batch, query head)'s operands start, and the strides.
struct HeadView {
  size_t q_offset;      // row 0 of the head's Q in q (and dq_accumulator's, by out_offset)
  size_t key_offset;    // row 0 of its KV head's K in kv
  size_t value_offset;  // row 0 of its V in kv
  size_t dkv_offset;    // row 0 of its KV head's dK in dkv_accumulator (dV: + Hkv D)
  size_t out_offset;    // row 0 of the head in out, dout, out_accumulator, dq_accumulator
  size_t row_offset;    // its first row in logsumexp
};

HeadView head_view(const Shape& s, int b, int h) {
  const size_t D = s.head_dim, kv_head = h / (s.num_heads / s.num_kv_heads);
  const size_t kv_row0 = static_cast<size_t>(b) * s.kv_len;
  const size_t q_row0 = static_cast<size_t>(b) * s.q_len;
  const size_t key_offset = kv_row0 * s.kv_row_stride + kv_head * D;
  return {q_row0 * s.q_row_stride + h * D,  key_offset,
          key_offset + s.kv_value_offset,   kv_row0 * 2 * s.num_kv_heads * D + kv_head * D,
          q_row0 * s.num_heads * D + h * D, (static_cast<size_t>(b) * s.num_heads + h) * s.q_len};
}

// Per-call buffers: a tile of scores (and of their gradient), the element
// mask, and the forward's local accumulator and row state.
struct Scratch {
  explicit Scratch(int tile, int head_dim)
      : scores(static_cast<size_t>(tile) * tile),
        dscores(static_cast<size_t>(tile) * tile),
        mask(static_cast<size_t>(tile) * tile),
        accumulator(static_cast<size_t>(tile) * head_dim),
        row_max(tile),
        row_sum(tile) {}
  std::vector<float> scores, dscores;
  std::vector<uint8_t> mask;
  std::vector<float> accumulator, row_max, row_sum;  // row_sum doubles as the backward's D
};

// One online-softmax step of a row over a tile of scaled scores p (masked:
// -inf), turning them into probabilities relative to the new running max.
void online_softmax_step(float* p, int cols, float& row_max, float& row_sum, float* acc, int D) {
  const float new_max = std::max(row_max, max_of(p, cols));
  // A row that has seen nothing yet keeps exact zeros (exp(-inf - 0) = 0), not NaN.
  const float shift = new_max == -INFINITY ? 0.0f : new_max;
  const float tile_sum = exp_sum_of<true>(p, p, shift, cols);
  const float rescale = exp_approx(row_max - shift);  // 0 when nothing was seen before
  row_sum = row_sum * rescale + tile_sum;
  for (int d = 0; d < D; d++) acc[d] *= rescale;
  row_max = new_max;
}

// Folds one row's block result (acc / l, m + log l) into out and lse.
void fold_row(float* out, float& lse, const float* acc, float m, float l, int D, bool first) {
  if (l == 0.0f) {  // no key of this block: unchanged; a first block's result is 0, -inf
    if (first) {
      std::fill_n(out, D, 0.0f);
      lse = -INFINITY;
    }
    return;
  }
  if (first || lse == -INFINITY) {
    const float inverse_sum = 1.0f / l;
    for (int d = 0; d < D; d++) out[d] = acc[d] * inverse_sum;
    lse = m + std::log(l);
    return;
  }
  // lse' = log(e^lse + e^lse_b); the weights e^(lse - lse') and e^(lse_b - lse') / l.
  const double block_lse = static_cast<double>(m) + std::log(static_cast<double>(l));
  const double top = std::max<double>(lse, block_lse);
  const double old_weight = std::exp(lse - top), block_weight = std::exp(block_lse - top);
  const double total = old_weight + block_weight;
  const float old_scale = static_cast<float>(old_weight / total);
  const float block_scale = static_cast<float>(block_weight / (total * l));
  for (int d = 0; d < D; d++) out[d] = out[d] * old_scale + acc[d] * block_scale;
  lse = static_cast<float>(top + std::log(total));
}

// The forward of queries [row0, row0 + rows) of one (b, h) against the block.
void forward_rows(const Shape& s, const HeadView& head, const BlockMask& mask, int row0, int rows,
                  float* out_accumulator, float* logsumexp, const float* q, const float* kv,
                  bool first, Scratch& scratch) {
  const int D = s.head_dim, tile = tile_size(s), C = s.num_heads * D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const float* query = q + head.q_offset + static_cast<size_t>(row0) * s.q_row_stride;
  float* scores = scratch.scores.data();
  float* acc = scratch.accumulator.data();
  std::fill_n(acc, static_cast<size_t>(rows) * D, 0.0f);
  std::fill_n(scratch.row_max.data(), rows, -INFINITY);
  std::fill_n(scratch.row_sum.data(), rows, 0.0f);
  for (int col0 = 0; col0 < s.kv_len; col0 += tile) {
    const int cols = std::min(tile, s.kv_len - col0);
    const Visibility visibility = mask.classify(row0, rows, col0, cols, scratch.mask.data());
    if (visibility == Visibility::kNone) continue;
    const size_t chunk = static_cast<size_t>(col0) * s.kv_row_stride;
    openblas_library().cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, D, scale,
                                   query, s.q_row_stride, kv + head.key_offset + chunk,
                                   s.kv_row_stride, 0.0f, scores, cols);
    for (int i = 0; i < rows; i++) {
      float* p = scores + static_cast<size_t>(i) * cols;
      if (visibility == Visibility::kSome) {
        const uint8_t* visible = scratch.mask.data() + static_cast<size_t>(i) * cols;
        for (int j = 0; j < cols; j++) p[j] = visible[j] ? p[j] : -INFINITY;
      }
      online_softmax_step(p, cols, scratch.row_max[i], scratch.row_sum[i],
                          acc + static_cast<size_t>(i) * D, D);
    }
    // acc += P V[chunk].
    openblas_library().cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, D, cols, 1.0f,
                                   scores, cols, kv + head.value_offset + chunk, s.kv_row_stride,
                                   1.0f, acc, D);
  }
  for (int i = 0; i < rows; i++) {
    fold_row(out_accumulator + head.out_offset + static_cast<size_t>(row0 + i) * C,
             logsumexp[head.row_offset + row0 + i], acc + static_cast<size_t>(i) * D,
             scratch.row_max[i], scratch.row_sum[i], D, first);
  }
}

// The pointers of one backward call.
struct BackwardTensors {
  float* dq_accumulator;
  float* dkv_accumulator;
  const float *dout, *out, *logsumexp, *q, *kv;
};

// P = exp(S - lse) and dS = P (dP - D) of one tile, in place of S and dP; masked entries 0.
void probabilities_and_dscores(float* p, float* ds, const float* lse, const float* row_dot,
                               const uint8_t* mask, Visibility visibility, int rows, int cols) {
  for (int i = 0; i < rows; i++) {
    float* p_row = p + static_cast<size_t>(i) * cols;
    float* ds_row = ds + static_cast<size_t>(i) * cols;
    // A row with lse = -inf sees no key anywhere: every entry of it is masked.
    scaled_exp(p_row, p_row, lse[i], 1.0f, cols);
    const float term = row_dot[i];
    for (int j = 0; j < cols; j++) ds_row[j] = p_row[j] * (ds_row[j] - term);
    if (visibility == Visibility::kSome) {
      const uint8_t* visible = mask + static_cast<size_t>(i) * cols;
      for (int j = 0; j < cols; j++) {
        p_row[j] = visible[j] ? p_row[j] : 0.0f;
        ds_row[j] = visible[j] ? ds_row[j] : 0.0f;
      }
    }
  }
}

// The backward of queries [row0, row0 + rows) of one (b, h) against the block.
void backward_rows(const Shape& s, const HeadView& head, const BlockMask& mask, int row0, int rows,
                   const BackwardTensors& t, Scratch& scratch) {
  const int D = s.head_dim, tile = tile_size(s), C = s.num_heads * D;
  const int dkv_stride = 2 * s.num_kv_heads * D, value_column = s.num_kv_heads * D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const float* query = t.q + head.q_offset + static_cast<size_t>(row0) * s.q_row_stride;
  const size_t out_rows = head.out_offset + static_cast<size_t>(row0) * C;
  const float* dout_block = t.dout + out_rows;
  float* dquery = t.dq_accumulator + out_rows;
  const float* lse = t.logsumexp + head.row_offset + row0;
  float* row_dot = scratch.row_sum.data();  // D_i = dOut_i . out_i
  for (int i = 0; i < rows; i++) {
    const size_t row = static_cast<size_t>(i) * C;
    row_dot[i] = dot_of(dout_block + row, t.out + out_rows + row, D);
  }
  float* p = scratch.scores.data();
  float* ds = scratch.dscores.data();
  for (int col0 = 0; col0 < s.kv_len; col0 += tile) {
    const int cols = std::min(tile, s.kv_len - col0);
    const Visibility visibility = mask.classify(row0, rows, col0, cols, scratch.mask.data());
    if (visibility == Visibility::kNone) continue;
    const float* key = t.kv + head.key_offset + static_cast<size_t>(col0) * s.kv_row_stride;
    const float* value = t.kv + head.value_offset + static_cast<size_t>(col0) * s.kv_row_stride;
    float* dkey = t.dkv_accumulator + head.dkv_offset + static_cast<size_t>(col0) * dkv_stride;
    openblas_library().cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, D, scale,
                                   query, s.q_row_stride, key, s.kv_row_stride, 0.0f, p, cols);
    openblas_library().cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, D, 1.0f,
                                   dout_block, C, value, s.kv_row_stride, 0.0f, ds, cols);
    probabilities_and_dscores(p, ds, lse, row_dot, scratch.mask.data(), visibility, rows, cols);
    // dV += P^T dOut; dQ += dS K * scale; dK += dS^T Q * scale.
    openblas_library().cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, D, rows, 1.0f, p,
                                   cols, dout_block, C, 1.0f, dkey + value_column, dkv_stride);
    openblas_library().cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, D, cols, scale,
                                   ds, cols, key, s.kv_row_stride, 1.0f, dquery, C);
    openblas_library().cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, D, rows, scale,
                                   ds, cols, query, s.q_row_stride, 1.0f, dkey, dkv_stride);
  }
}

}  // namespace

void attention_block_forward(float* out_accumulator, float* logsumexp, const float* q,
                             const float* kv, const int32_t* q_positions,
                             const int32_t* kv_positions, const int32_t* documents,
                             const Ops::AttentionBlockShape& shape, bool first) {
  if (!valid_shape(shape, documents)) return;
  const int tile = tile_size(shape);
  BlockMask mask(shape, q_positions, kv_positions, documents, tile);
  Scratch scratch(tile, shape.head_dim);
  for (int b = 0; b < shape.batch; b++) {
    mask.select_batch(b);
    for (int h = 0; h < shape.num_heads; h++) {
      const HeadView head = head_view(shape, b, h);
      for (int row0 = 0; row0 < shape.q_len; row0 += tile) {
        forward_rows(shape, head, mask, row0, std::min(tile, shape.q_len - row0), out_accumulator,
                     logsumexp, q, kv, first, scratch);
      }
    }
  }
}

void attention_block_backward(float* dq_accumulator, float* dkv_accumulator, const float* dout,
                              const float* out, const float* logsumexp, const float* q,
                              const float* kv, const int32_t* q_positions,
                              const int32_t* kv_positions, const int32_t* documents,
                              const Ops::AttentionBlockShape& shape) {
  if (!valid_shape(shape, documents) || shape.kv_len == 0) return;
  const int tile = tile_size(shape);
  BlockMask mask(shape, q_positions, kv_positions, documents, tile);
  Scratch scratch(tile, shape.head_dim);
  const BackwardTensors tensors{dq_accumulator, dkv_accumulator, dout, out, logsumexp, q, kv};
  for (int b = 0; b < shape.batch; b++) {
    mask.select_batch(b);
    for (int h = 0; h < shape.num_heads; h++) {
      const HeadView head = head_view(shape, b, h);
      for (int row0 = 0; row0 < shape.q_len; row0 += tile)
        backward_rows(shape, head, mask, row0, std::min(tile, shape.q_len - row0), tensors,
                      scratch);
    }
  }
}

}  // namespace paraplan::kernels::cpu

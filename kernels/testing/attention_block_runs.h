// attention_block_runs.h: test support for the attention-by-blocks ops
// (kernels/ops.h: attention_block_forward/backward, copy_rows), on any
// backend: the load-balanced context-parallel layout (the sequence cut into
// 2 cp chunks, rank r holding chunks r and 2 cp - 1 - r), documents from
// separator tokens, the ring run the runtime makes (each rank's queries
// against every rank's block in ring order, its own first and read in place
// from its qkv, the others packed by copy_rows; out_accumulator stored as
// `out` for the backward), and the references it is compared with:
// attention_forward/backward over the whole sequence, or over each document
// separately. Results are assembled over the whole sequence ([B, T, H D]
// out, [B, H, T] logsumexp, [B, T, (H + 2 Hkv) D] dqkv) so every layout
// compares with the same reference. Used by kernels/cpu/
// cpu_attention_block_test.cc and kernels/cuda/cuda_attention_block_test.cc.
// Test code only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/ops.h"

namespace paraplan::kernels::attention_block_testing {

// Problem sizes: qkv [B, T, (H + 2 Hkv) D].
struct Dims {
  int batch, seq_len, heads, kv_heads, head_dim;
  int width() const { return (heads + 2 * kv_heads) * head_dim; }  // a qkv row
  int channels() const { return heads * head_dim; }                // an out row
  int kv_width() const { return 2 * kv_heads * head_dim; }         // a packed key/value row
  size_t qkv_elements() const { return static_cast<size_t>(batch) * seq_len * width(); }
  size_t out_elements() const { return static_cast<size_t>(batch) * seq_len * channels(); }
  size_t lse_elements() const { return static_cast<size_t>(batch) * heads * seq_len; }
};

// out [B, T, H D] (fp32 accumulator values), logsumexp [B, H, T], dqkv [B, T, (H + 2 Hkv) D].
struct Result {
  std::vector<float> out, logsumexp, dqkv;
};

// Backend memory for one run, freed at the end; storage tensors converted
// from and to floats (bf16: rounded to nearest even).
class Memory {
 public:
  explicit Memory(Ops& ops) : ops_(ops) {}
  ~Memory() {
    for (void* pointer : owned_) ops_.deallocate(pointer);
  }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  void* allocate(size_t bytes) {
    owned_.push_back(ops_.allocate(bytes));
    return owned_.back();
  }
  template <typename T>
  T* upload(const std::vector<T>& host) {
    T* pointer = static_cast<T*>(allocate(host.size() * sizeof(T)));
    ops_.copy_from_host(pointer, host.data(), host.size() * sizeof(T));
    return pointer;
  }
  template <typename T>
  std::vector<T> download(const T* pointer, size_t n) {
    std::vector<T> host(n);
    ops_.copy_to_host(host.data(), pointer, n * sizeof(T));
    return host;
  }
  void* upload_storage(const std::vector<float>& host) {
    std::vector<unsigned char> converted(ops_.storage_bytes(host.size()));
    host_from_float(converted.data(), host.data(), ops_.storage_dtype(), host.size());
    void* pointer = allocate(converted.size());
    ops_.copy_from_host(pointer, converted.data(), converted.size());
    return pointer;
  }
  std::vector<float> download_storage(const void* pointer, size_t n) {
    std::vector<unsigned char> raw(ops_.storage_bytes(n));
    ops_.copy_to_host(raw.data(), pointer, raw.size());
    std::vector<float> host(n);
    host_to_float(host.data(), raw.data(), ops_.storage_dtype(), n);
    return host;
  }

 private:
  Ops& ops_;
  std::vector<void*> owned_;
};

// ---- layouts --------------------------------------------------------------------------------

// Rank r's positions in the load-balanced layout: chunks r and 2 cp - 1 - r
// of the 2 cp chunks of T (T a multiple of 2 cp).
inline std::vector<std::vector<int32_t>> load_balanced_ranks(int seq_len, int cp) {
  const int chunk = seq_len / (2 * cp);
  std::vector<std::vector<int32_t>> ranks(cp);
  for (int r = 0; r < cp; r++) {
    for (int c : {r, 2 * cp - 1 - r})
      for (int p = c * chunk; p < (c + 1) * chunk; p++) ranks[r].push_back(p);
  }
  return ranks;
}

// The document of each position: the number of separators before it (a
// separator ends its document). [B, T].
inline std::vector<int32_t> documents_from_separators(const std::vector<int32_t>& tokens, int batch,
                                                      int seq_len, int32_t separator) {
  std::vector<int32_t> documents(tokens.size());
  for (int b = 0; b < batch; b++) {
    int32_t document = 0;
    for (int p = 0; p < seq_len; p++) {
      const size_t i = static_cast<size_t>(b) * seq_len + p;
      documents[i] = document;
      if (tokens[i] == separator) document++;
    }
  }
  return documents;
}

// Row indices b * T + p of positions in every batch entry.
inline std::vector<size_t> batch_rows(const Dims& d, const std::vector<int32_t>& positions) {
  std::vector<size_t> rows;
  for (int b = 0; b < d.batch; b++)
    for (int32_t p : positions) rows.push_back(static_cast<size_t>(b) * d.seq_len + p);
  return rows;
}

// Columns [column, column + count) of the given rows of x (rows `width` apart), packed.
inline std::vector<float> gather(const std::vector<float>& x, size_t width,
                                 const std::vector<size_t>& rows, size_t column = 0,
                                 size_t count = 0) {
  if (count == 0) count = width;
  std::vector<float> out;
  out.reserve(rows.size() * count);
  for (size_t row : rows)
    out.insert(out.end(), x.begin() + row * width + column,
               x.begin() + row * width + column + count);
  return out;
}

// The inverse: packed rows of `count` values into columns [column, ...) of x's rows.
inline void scatter(std::vector<float>& x, size_t width, const std::vector<size_t>& rows,
                    const std::vector<float>& packed, size_t column = 0, size_t count = 0) {
  if (count == 0) count = width;
  for (size_t i = 0; i < rows.size(); i++)
    std::copy_n(packed.begin() + i * count, count, x.begin() + rows[i] * width + column);
}

// logsumexp [B, H, len] of `positions` into [B, H, T].
inline void scatter_lse(std::vector<float>& lse, const Dims& d,
                        const std::vector<int32_t>& positions, const std::vector<float>& local) {
  const size_t len = positions.size();
  for (size_t bh = 0; bh < static_cast<size_t>(d.batch) * d.heads; bh++)
    for (size_t i = 0; i < len; i++) lse[bh * d.seq_len + positions[i]] = local[bh * len + i];
}

inline Ops::AttentionBlockShape block_shape(const Dims& d, int q_len, int kv_len,
                                            int kv_row_stride) {
  Ops::AttentionBlockShape shape;
  shape.batch = d.batch;
  shape.q_len = q_len;
  shape.kv_len = kv_len;
  shape.seq_len = d.seq_len;
  shape.num_heads = d.heads;
  shape.num_kv_heads = d.kv_heads;
  shape.head_dim = d.head_dim;
  shape.q_row_stride = d.width();
  shape.kv_row_stride = kv_row_stride;
  shape.kv_value_offset = d.kv_heads * d.head_dim;
  return shape;
}

// ---- runs -----------------------------------------------------------------------------------

// The ring over ranks (positions per rank; documents [B, T] or empty): each
// rank holds its rows of qkv and dout (storage); its queries meet every
// rank's block in ring order r, r - 1, ... (its own first, read in place
// from its qkv; the others packed [B len, 2 Hkv D] by copy_rows, as received
// from a peer); out_accumulator (round_out: rounded to bf16 on the way, as a
// bf16 backend stores it) is the backward's out. dQ per rank and dK/dV per
// block accumulate in fp32 and are assembled into dqkv.
inline Result ring_attention(Ops& ops, const Dims& d, const std::vector<float>& qkv,
                             const std::vector<float>& dout, const std::vector<int32_t>& documents,
                             const std::vector<std::vector<int32_t>>& ranks,
                             bool round_out = false) {
  Memory m(ops);
  const int cp = static_cast<int>(ranks.size()), W = d.width(), C = d.channels();
  const int KW = d.kv_width();
  const int32_t* device_documents = documents.empty() ? nullptr : m.upload(documents);
  std::vector<void*> local_qkv(cp), packed(cp);
  std::vector<const int32_t*> positions(cp);
  std::vector<float*> dkv(cp);
  for (int r = 0; r < cp; r++) {
    const std::vector<size_t> rows = batch_rows(d, ranks[r]);
    local_qkv[r] = m.upload_storage(gather(qkv, W, rows));
    positions[r] = m.upload(ranks[r]);
    packed[r] = m.allocate(ops.storage_bytes(rows.size() * KW));
    ops.copy_rows(packed[r], ops.storage_bytes(KW),
                  element_at(local_qkv[r], static_cast<size_t>(C), ops.storage_dtype()),
                  ops.storage_bytes(W), rows.size(), ops.storage_bytes(KW));
    dkv[r] = m.upload(std::vector<float>(rows.size() * KW, 0.0f));
  }
  Result result{std::vector<float>(d.out_elements()), std::vector<float>(d.lse_elements()),
                std::vector<float>(d.qkv_elements())};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int r = 0; r < cp; r++) {
    const int len = static_cast<int>(ranks[r].size());
    const std::vector<size_t> rows = batch_rows(d, ranks[r]);
    // The first block overwrites both: start them as garbage.
    float* out_accumulator = m.upload(std::vector<float>(rows.size() * C, nan));
    float* lse = m.upload(std::vector<float>(static_cast<size_t>(d.batch) * d.heads * len, nan));
    auto run_blocks = [&](auto&& run) {
      for (int k = 0; k < cp; k++) {
        const int s = (r - k + cp) % cp;
        const void* kv = k == 0
                             ? element_at(local_qkv[r], static_cast<size_t>(C), ops.storage_dtype())
                             : packed[s];
        run(k, s, kv, block_shape(d, len, static_cast<int>(ranks[s].size()), k == 0 ? W : KW));
      }
    };
    run_blocks([&](int k, int s, const void* kv, const Ops::AttentionBlockShape& shape) {
      ops.attention_block_forward(out_accumulator, lse, local_qkv[r], kv, positions[r],
                                  positions[s], device_documents, shape, k == 0);
    });
    std::vector<float> host_out = m.download(out_accumulator, rows.size() * C);
    scatter(result.out, C, rows, host_out);
    scatter_lse(result.logsumexp, d, ranks[r],
                m.download(lse, static_cast<size_t>(d.batch) * d.heads * len));
    if (round_out)
      for (float& value : host_out) value = round_to_bfloat16(value);
    const void* out = m.upload_storage(host_out);
    const void* rank_dout = m.upload_storage(gather(dout, C, rows));
    float* dq = m.upload(std::vector<float>(rows.size() * C, 0.0f));
    run_blocks([&](int, int s, const void* kv, const Ops::AttentionBlockShape& shape) {
      ops.attention_block_backward(dq, dkv[s], rank_dout, out, lse, local_qkv[r], kv, positions[r],
                                   positions[s], device_documents, shape);
    });
    scatter(result.dqkv, W, rows, m.download(dq, rows.size() * C), 0, C);
  }
  for (int s = 0; s < cp; s++) {
    const std::vector<size_t> rows = batch_rows(d, ranks[s]);
    scatter(result.dqkv, W, rows, m.download(dkv[s], rows.size() * KW), C, KW);
  }
  return result;
}

// attention_forward and attention_backward (into zeros) over the whole sequence.
inline Result full_attention(Ops& ops, const Dims& d, const std::vector<float>& qkv,
                             const std::vector<float>& dout) {
  Memory m(ops);
  const void* device_qkv = m.upload_storage(qkv);
  void* out = m.allocate(ops.storage_bytes(d.out_elements()));
  float* lse = static_cast<float*>(m.allocate(d.lse_elements() * sizeof(float)));
  ops.attention_forward(out, lse, device_qkv, d.batch, d.seq_len, d.heads, d.kv_heads, d.head_dim);
  void* dqkv = m.upload_storage(std::vector<float>(d.qkv_elements(), 0.0f));
  float* scratch = static_cast<float*>(m.allocate(d.lse_elements() * sizeof(float)));
  ops.attention_backward(dqkv, scratch, m.upload_storage(dout), device_qkv, out, lse, d.batch,
                         d.seq_len, d.heads, d.kv_heads, d.head_dim, GradientWrite::kAccumulate);
  return {m.download_storage(out, d.out_elements()), m.download(lse, d.lse_elements()),
          m.download_storage(dqkv, d.qkv_elements())};
}

// The document-masked reference: full_attention on each document's rows
// alone (documents non-decreasing along each sequence, as from separators).
inline Result per_document_attention(Ops& ops, const Dims& d, const std::vector<float>& qkv,
                                     const std::vector<float>& dout,
                                     const std::vector<int32_t>& documents) {
  const int W = d.width(), C = d.channels();
  Result result{std::vector<float>(d.out_elements()), std::vector<float>(d.lse_elements()),
                std::vector<float>(d.qkv_elements())};
  for (int b = 0; b < d.batch; b++) {
    const size_t row0 = static_cast<size_t>(b) * d.seq_len;
    for (int start = 0, end = 0; start < d.seq_len; start = end) {
      std::vector<size_t> rows;
      for (end = start; end < d.seq_len && documents[row0 + end] == documents[row0 + start]; end++)
        rows.push_back(row0 + end);
      const Dims one{1, end - start, d.heads, d.kv_heads, d.head_dim};
      const Result part = full_attention(ops, one, gather(qkv, W, rows), gather(dout, C, rows));
      scatter(result.out, C, rows, part.out);
      scatter(result.dqkv, W, rows, part.dqkv);
      for (int h = 0; h < d.heads; h++) {
        std::copy_n(
            part.logsumexp.begin() + static_cast<size_t>(h) * one.seq_len, one.seq_len,
            result.logsumexp.begin() + (static_cast<size_t>(b) * d.heads + h) * d.seq_len + start);
      }
    }
  }
  return result;
}

}  // namespace paraplan::kernels::attention_block_testing

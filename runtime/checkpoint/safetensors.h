// safetensors.h: the Hugging Face safetensors format. A file is an 8-byte
// little-endian header length N, N bytes of JSON (padded with spaces to a
// multiple of 8) mapping each tensor name to {"dtype", "shape",
// "data_offsets": [begin, end]} plus an optional "__metadata__" string map,
// then the tensors' bytes, contiguous, offsets relative to the end of the
// header. Files written here load with Python's safetensors and
// transformers' from_pretrained; files read here are validated as strictly as
// the Rust reference does.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace paraplan {

enum class Dtype {
  kBool,
  kU8,
  kI8,
  kF8E4M3,
  kF8E5M2,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kI64,
  kU64,
  kF64
};

const char* dtype_name(Dtype dtype);  // "F32", "BF16", ...
size_t dtype_bytes(Dtype dtype);
std::string shape_string(const std::vector<int64_t>& shape);  // "[768, 2304]"

class AtomicFileWriter;
class SafetensorsStream;

class SafetensorsWriter {
 public:
  // Copies `data` (prod(shape) floats), stored as `dtype` (kF32 or kBF16,
  // rounded to nearest even). Tensors are laid out in the order added.
  void add(const std::string& name, const std::vector<int64_t>& shape, const float* data,
           Dtype dtype = Dtype::kF32);
  // Stores F32 without copying: `data` must stay valid until write() returns.
  void add_view(const std::string& name, const std::vector<int64_t>& shape, const float* data);
  // An F32 tensor whose data comes later, through open_stream(): a writer of
  // a large file holds one tensor at a time, not the file.
  void declare(const std::string& name, const std::vector<int64_t>& shape);
  // "__metadata__" entries; transformers requires {"format": "pt"} to load a model.
  void set_metadata(const std::string& key, const std::string& value);

  // The JSON header as written, padding included.
  std::string header() const;
  // Writes the file atomically: temporary file, fsync, rename, fsync of the directory.
  // Refused if a tensor was only declared.
  void write(const std::string& path) const;
  // Starts the file at `path` (temporary name) with the header; the tensors'
  // data then follow through the stream, every tensor declared, in order.
  // Refused if a tensor was added with its data.
  SafetensorsStream open_stream(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    Dtype dtype;
    std::vector<int64_t> shape;
    const void* view = nullptr;  // borrowed bytes, or
    std::vector<uint8_t> owned;  // copied bytes
    bool streamed = false;       // declared: the data comes through a SafetensorsStream
    size_t bytes = 0;
  };
  Entry& new_entry(const std::string& name, const std::vector<int64_t>& shape, Dtype dtype);

  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// The data part of a file SafetensorsWriter::open_stream started.
class SafetensorsStream {
 public:
  SafetensorsStream(SafetensorsStream&&) noexcept;
  SafetensorsStream& operator=(SafetensorsStream&&) noexcept;
  ~SafetensorsStream();  // uncommitted: the temporary file goes

  const std::string& path() const { return path_; }
  // The next declared tensor's prod(shape) floats; throws naming the tensor
  // expected if `name` is another.
  void append(const std::string& name, const float* data);
  // fsync, rename into place, fsync of the directory; throws naming the
  // tensors not yet appended.
  void commit();

 private:
  friend class SafetensorsWriter;
  SafetensorsStream() = default;

  std::string path_;
  std::vector<std::pair<std::string, size_t>> pending_;  // (name, bytes) in file order
  size_t next_ = 0;
  std::unique_ptr<AtomicFileWriter> file_;
};

struct SafetensorsTensor {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data after the header
  int64_t num_elements() const;
};

// A validated safetensors file, opened for reading tensors on demand.
class SafetensorsFile {
 public:
  // Throws std::runtime_error naming the file (and the tensor) if the file is
  // missing, shorter than its header, has invalid JSON, an unknown dtype,
  // offsets out of range, overlapping, leaving gaps, or not matching the
  // shape.
  static SafetensorsFile open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // header order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t data_start() const { return data_start_; }  // 8 + header length

  bool has(const std::string& name) const;
  const SafetensorsTensor& tensor(const std::string& name) const;  // throws if absent
  const std::vector<int64_t>& shape(const std::string& name) const { return tensor(name).shape; }

  // Reads tensor `name` as floats (from F32, BF16 or F16) into `out`, after
  // checking its shape equals expected_shape; errors name both shapes.
  void read(const std::string& name, float* out, const std::vector<int64_t>& expected_shape) const;
  // Elements [first, first + count) of the tensor (row-major) the same way:
  // a rank reads only its slice of a large tensor.
  void read_range(const std::string& name, const std::vector<int64_t>& expected_shape, size_t first,
                  size_t count, float* out) const;

 private:
  SafetensorsFile() = default;

  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace paraplan

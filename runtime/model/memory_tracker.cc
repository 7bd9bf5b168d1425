// memory_tracker.cc: allocation bookkeeping by category.
#include "runtime/model/memory_tracker.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace paraplan {

const char* memory_category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::kWeights:
      return "weights";
    case MemoryCategory::kGradients:
      return "gradients";
    case MemoryCategory::kOptimizerState:
      return "optimizer_state";
    case MemoryCategory::kGathered:
      return "gathered";
    case MemoryCategory::kActivations:
      return "activations";
    case MemoryCategory::kWorkspace:
      return "workspace";
  }
  return "unknown";
}

MemoryTracker::~MemoryTracker() {
  for (auto& [pointer, entry] : live_) ops_.deallocate(pointer);
}

void MemoryTracker::sample_backend() {
  const uint64_t now = ops_.internal_bytes();
  if (now == backend_bytes_) return;
  const int i = index(MemoryCategory::kWorkspace);
  current_[i] = current_[i] - backend_bytes_ + now;
  current_total_ = current_total_ - backend_bytes_ + now;
  backend_bytes_ = now;
  peak_[i] = std::max(peak_[i], current_[i]);
  peak_total_ = std::max(peak_total_, current_total_);
}

void* MemoryTracker::allocate(size_t bytes, MemoryCategory category) {
  sample_backend();
  if (capacity_ > 0 && current_total_ + bytes > capacity_) {
    const double mib = 1024.0 * 1024.0;
    char message[256];
    std::snprintf(message, sizeof message,
                  "out of device memory: %.1f MiB of %s with %.1f MiB in use exceeds the "
                  "device's %.1f MiB",
                  bytes / mib, memory_category_name(category), current_total_ / mib,
                  capacity_ / mib);
    throw OutOfDeviceMemory(message);
  }
  void* pointer = ops_.allocate(bytes);
  live_[pointer] = {bytes, category};
  const int i = index(category);
  current_[i] += bytes;
  peak_[i] = std::max(peak_[i], current_[i]);
  current_total_ += bytes;
  peak_total_ = std::max(peak_total_, current_total_);
  return pointer;
}

void MemoryTracker::release(void* pointer) {
  auto it = live_.find(pointer);
  if (it == live_.end()) throw std::logic_error("MemoryTracker::release of an unknown pointer");
  current_[index(it->second.second)] -= it->second.first;
  current_total_ -= it->second.first;
  ops_.deallocate(pointer);
  live_.erase(it);
  sample_backend();
}

std::string gibibytes_text(double bytes) {
  char text[48];
  std::snprintf(text, sizeof text, "%.3g GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return text;
}

double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<double>(pages) * static_cast<double>(page_size)
                                    : 0;
}

double available_memory_bytes() {
  double available = 0;
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  double kilobytes = 0;
  while (meminfo >> key >> kilobytes >> unit)
    if (key == "MemAvailable:") available = kilobytes * 1024.0;
  // A container's (cgroup v2) limit binds first: past it the job is killed
  // whatever the machine has.
  std::ifstream limit_file("/sys/fs/cgroup/memory.max"),
      usage_file("/sys/fs/cgroup/memory.current");
  std::string limit;
  double usage = 0;
  if (limit_file >> limit && limit != "max" && usage_file >> usage) {
    const double room = std::max(0.0, std::stod(limit) - usage);
    available = available > 0 ? std::min(available, room) : room;
  }
  return available;
}

void require_host_memory(double bytes, const std::string& what, const std::string& remedy) {
  const double available = physical_memory_bytes();
  if (available > 0 && bytes > available)
    throw std::runtime_error(what + " take " + gibibytes_text(bytes) + ", more than the " +
                             gibibytes_text(available) + " of memory this machine has; " + remedy);
}

}  // namespace paraplan

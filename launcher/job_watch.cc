// job_watch.cc: the launcher's view of its ranks and the messages that end a
// job (job_watch.h).
#include "launcher/job_watch.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "runtime/parallel/parallel_state.h"

namespace paraplan {
namespace {

using supervision::RankMessage;

std::string seconds(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", value);
  return text;
}

double seconds_between(JobWatch::Clock::time_point from, JobWatch::Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

std::string members_text(const std::vector<int>& members) {
  std::string text = "[";
  for (size_t i = 0; i < members.size(); ++i) {
    if (i > 0) text += ',';
    text += std::to_string(members[i]);
  }
  return text + "]";
}

// The heartbeat interval the launcher asks for: a fifth of the timeout, so a
// beat or two may be late without the rank counting as silent.
std::chrono::milliseconds interval_of(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 5, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
}

constexpr size_t kMostWaitingLines = 12;

// list + separator + item, the separator only between items.
void append_item(std::string& list, const char* separator, const std::string& item) {
  if (!list.empty()) list += separator;
  list += item;
}

}  // namespace

namespace {

// "ranks 2-3 on host node2", "rank 1 on host node1".
std::string ranks_on_host(const std::vector<int>& ranks, const std::string& host) {
  return (ranks.size() > 1 ? "ranks " : "rank ") + rank_ranges(ranks) + " on host " + host;
}

}  // namespace

std::string rank_ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string text;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    append_item(text, ",", std::to_string(ranks[i]));
    if (j > i) {
      text += '-';
      text += std::to_string(ranks[j]);
    }
    i = j + 1;
  }
  return text;
}

JobWatch::JobWatch(MeshShape mesh, std::chrono::milliseconds heartbeat_timeout,
                   std::chrono::milliseconds settle)
    : mesh_(mesh),
      timeout_(heartbeat_timeout),
      settle_(settle),
      interval_(interval_of(heartbeat_timeout)),
      ranks_(static_cast<size_t>(mesh.world())) {}

bool JobWatch::check_in(const supervision::Hello& hello, Clock::time_point now) {
  if (hello.rank < 0 || hello.rank >= static_cast<int>(ranks_.size())) return false;
  Rank& rank = ranks_[static_cast<size_t>(hello.rank)];
  if (rank.checked_in) return false;
  rank.checked_in = true;
  rank.hello = hello;
  rank.last_heard = now;
  return true;
}

void JobWatch::receive(int rank_number, const RankMessage& message, Clock::time_point now) {
  Rank& rank = ranks_.at(static_cast<size_t>(rank_number));
  rank.last_heard = now;
  switch (message.type) {
    case RankMessage::Type::kGroup:
      rank.groups[message.group.id] = message.group;
      break;
    case RankMessage::Type::kBeat:
      rank.beat = message.beat;
      break;
    case RankMessage::Type::kError:
      if (rank.error.empty()) {
        rank.error = message.error;
        rank.error_order = errors_seen_++;
      }
      break;
    case RankMessage::Type::kDone:
      rank.finished = true;
      break;
    case RankMessage::Type::kSignal:
      rank.signal = message.signal;
      break;
    case RankMessage::Type::kHello:
      break;
  }
}

void JobWatch::disconnected(int rank_number, Clock::time_point now) {
  Rank& rank = ranks_.at(static_cast<size_t>(rank_number));
  if (rank.finished || rank.lost) return;
  rank.lost = true;
  rank.lost_at = now;
}

std::string JobWatch::describe(int rank_number) const {
  const Rank& rank = ranks_[static_cast<size_t>(rank_number)];
  return "rank " + std::to_string(rank_number) + " on " + rank.hello.host + " (pid " +
         std::to_string(rank.hello.pid) + ")";
}

std::string JobWatch::placement_of(int rank_number) const {
  const MeshCoordinates at =
      mesh_coordinates(rank_number, mesh_.pipeline, mesh_.data, mesh_.tensor, mesh_.context);
  std::string text = "pipeline stage " + std::to_string(at.pipeline_rank) + " of " +
                     std::to_string(at.pipeline_size) + ", data rank " +
                     std::to_string(at.data_rank) + " of " + std::to_string(at.data_size) +
                     (at.context_size > 1 ? ", context rank " + std::to_string(at.context_rank) +
                                                " of " + std::to_string(at.context_size)
                                          : std::string()) +
                     ", tensor rank " + std::to_string(at.tensor_rank) + " of " +
                     std::to_string(at.tensor_size);
  std::string groups;
  for (const auto& [id, group] : ranks_[static_cast<size_t>(rank_number)].groups)
    if (group.name != "world" && group.members.size() > 1)
      append_item(groups, ", ", group.name + " " + members_text(group.members));
  if (ranks_[static_cast<size_t>(rank_number)].groups.empty()) {
    // Gone before it reported its groups: the mesh says what they are.
    std::vector<int> tensor, data;
    for (int t = 0; t < at.tensor_size; ++t)
      tensor.push_back(world_rank_of(at, at.pipeline_rank, at.data_rank, t));
    for (int d = 0; d < at.data_size; ++d)
      for (int c = 0; c < at.context_size; ++c)
        data.push_back(world_rank_of(at, at.pipeline_rank, d, c, at.tensor_rank));
    if (tensor.size() > 1) append_item(groups, ", ", "tensor " + members_text(tensor));
    if (data.size() > 1) append_item(groups, ", ", "data " + members_text(data));
  }
  return groups.empty() ? text : text + "; groups " + groups;
}

std::string JobWatch::state_of(int rank_number, Clock::time_point now) const {
  const Rank& rank = ranks_[static_cast<size_t>(rank_number)];
  if (!rank.checked_in) return "it has not started";
  if (rank.finished) return "it has finished";
  if (rank.lost) return "it ended without finishing";
  const double quiet = seconds_between(rank.last_heard, now);
  if (quiet > 2.0 * std::chrono::duration<double>(interval_).count())
    return "nothing heard from it for " + seconds(quiet);
  if (!rank.error.empty()) return "it failed: " + rank.error;
  if (!rank.beat.open.empty()) {
    const supervision::OpenOperation& open = rank.beat.open.front();
    return "it waits in " + open.what + " for " + seconds(open.age_ms / 1000.0);
  }
  return "it is outside communication for " + seconds(rank.beat.idle_ms / 1000.0) +
         " (computing, or stuck outside MPI)";
}

std::vector<std::string> JobWatch::not_arrived(int rank_number, Clock::time_point now,
                                               std::vector<int>* absent) const {
  std::vector<std::string> lines;
  const Rank& waiting = ranks_[static_cast<size_t>(rank_number)];
  for (const supervision::OpenOperation& open : waiting.beat.open) {
    if (open.group < 0) {  // a pipeline transfer: name the peer it receives from
      if (open.receive_from >= 0 && open.receive_from < static_cast<int>(ranks_.size())) {
        if (absent != nullptr) absent->push_back(open.receive_from);
        lines.push_back("  " + describe(rank_number) + " waits in " + open.what +
                        " for world rank " + std::to_string(open.receive_from) + ": " +
                        state_of(open.receive_from, now));
      }
      continue;
    }
    const auto group = waiting.groups.find(open.group);
    if (group == waiting.groups.end()) continue;
    for (const int member : group->second.members) {
      if (member == rank_number || member < 0 || member >= static_cast<int>(ranks_.size()))
        continue;
      const Rank& other = ranks_[static_cast<size_t>(member)];
      // The member's own id for the same group (the same name and members).
      uint64_t entered = 0;
      for (const auto& [id, candidate] : other.groups)
        if (candidate.name == group->second.name && candidate.members == group->second.members) {
          const auto count = other.beat.entered.find(id);
          if (count != other.beat.entered.end()) entered = count->second;
        }
      if (entered >= open.sequence) continue;
      if (absent != nullptr) absent->push_back(member);
      lines.push_back("  in " + open.what + " (operation " + std::to_string(open.sequence) +
                      " on that group), world rank " + std::to_string(member) + " on " +
                      other.hello.host + " has not arrived (it entered " + std::to_string(entered) +
                      "): " + state_of(member, now));
    }
  }
  return lines;
}

std::vector<std::string> JobWatch::waiting_for(const std::vector<int>& culprits) const {
  std::vector<std::string> lines;
  size_t more = 0;
  const std::set<int> at_fault(culprits.begin(), culprits.end());
  for (int number = 0; number < static_cast<int>(ranks_.size()); ++number) {
    const Rank& rank = ranks_[static_cast<size_t>(number)];
    if (at_fault.count(number) || !rank.checked_in || rank.finished || rank.lost) continue;
    for (const supervision::OpenOperation& open : rank.beat.open) {
      bool involved = at_fault.count(open.receive_from) || at_fault.count(open.send_to);
      const auto group = rank.groups.find(open.group);
      if (group != rank.groups.end())
        for (const int member : group->second.members) involved |= at_fault.count(member) > 0;
      if (!involved) continue;
      if (lines.size() < kMostWaitingLines)
        lines.push_back("  waiting for it: " + describe(number) + " in " + open.what + " for " +
                        seconds(open.age_ms / 1000.0));
      else
        ++more;
      break;
    }
  }
  if (more > 0) lines.push_back("  ... and " + std::to_string(more) + " more ranks waiting");
  return lines;
}

JobFailure JobWatch::report(JobFailure::Kind kind, const std::string& headline,
                            const std::vector<int>& culprits) const {
  JobFailure failure{kind, headline, {}};
  std::set<std::string> hosts;
  for (const int culprit : culprits) {
    failure.message += "\n  " + describe(culprit) + ": " + placement_of(culprit);
    hosts.insert(ranks_[static_cast<size_t>(culprit)].hello.host);
  }
  for (const std::string& line : waiting_for(culprits)) failure.message += "\n" + line;
  failure.hosts.assign(hosts.begin(), hosts.end());
  return failure;
}

void JobWatch::keep_whole_hosts(std::map<std::string, std::vector<int>>& lost_by_host) const {
  std::map<std::string, size_t> ranks_by_host;
  for (const Rank& rank : ranks_)
    if (rank.checked_in) ++ranks_by_host[rank.hello.host];
  std::map<std::string, std::vector<int>> whole;
  for (const auto& [host, lost] : lost_by_host)
    if (lost.size() == ranks_by_host[host]) whole.emplace(host, lost);
  if (!whole.empty()) lost_by_host = std::move(whole);
}

std::optional<std::string> JobWatch::failure(Clock::time_point now) const {
  const std::optional<JobFailure> found = diagnose(now);
  if (!found) return std::nullopt;
  return found->message;
}

std::optional<JobFailure> JobWatch::diagnose(Clock::time_point now) const {
  // 1. A rank said why it ends the job (an error, or its collective timeout).
  const Rank* first_error = nullptr;
  int first_error_rank = -1;
  for (int number = 0; number < static_cast<int>(ranks_.size()); ++number) {
    const Rank& rank = ranks_[static_cast<size_t>(number)];
    if (!rank.error.empty() &&
        (first_error == nullptr || rank.error_order < first_error->error_order)) {
      first_error = &rank;
      first_error_rank = number;
    }
  }
  if (first_error != nullptr) {
    std::string text = describe(first_error_rank) + " ended the job: " + first_error->error +
                       "\n  " + describe(first_error_rank) + ": " + placement_of(first_error_rank);
    std::vector<int> absent;
    for (const std::string& line : not_arrived(first_error_rank, now, &absent)) text += "\n" + line;
    if (absent.empty())
      return JobFailure{JobFailure::Kind::kRankError, text, {first_error->hello.host}};
    // It timed out waiting for peers (a hung device, a lost link): theirs is the fault.
    std::set<std::string> hosts;
    for (const int member : absent) hosts.insert(ranks_[static_cast<size_t>(member)].hello.host);
    return JobFailure{JobFailure::Kind::kNotArrived, text, {hosts.begin(), hosts.end()}};
  }
  // 2. Ranks whose connection ended: those that said nothing first (killed,
  // crashed, host down) are at fault, before any ended by a signal they
  // reported (mpirun ends the rest of a job that lost a daemon with
  // SIGTERM). Those lost within `settle` of the first are named together
  // (every rank of a host that died), but where a whole host is among them
  // only the whole hosts: on a loaded machine a rank mpirun then ends may
  // be gone before its SIGTERM report arrives, and a host that died takes
  // every rank it had.
  for (const bool signalled : {false, true}) {
    std::optional<Clock::time_point> first_lost;
    for (const Rank& rank : ranks_)
      if (rank.lost && (rank.signal != 0) == signalled &&
          (!first_lost || rank.lost_at < *first_lost))
        first_lost = rank.lost_at;
    if (!first_lost) continue;
    if (now - *first_lost < settle_) return std::nullopt;
    std::map<std::string, std::vector<int>> lost_by_host;
    for (int number = 0; number < static_cast<int>(ranks_.size()); ++number) {
      const Rank& rank = ranks_[static_cast<size_t>(number)];
      if (!rank.lost || (rank.signal != 0) != signalled || rank.lost_at - *first_lost > settle_)
        continue;
      lost_by_host[rank.hello.host].push_back(number);
    }
    keep_whole_hosts(lost_by_host);
    std::vector<int> culprits;
    for (const auto& [host, lost] : lost_by_host)
      culprits.insert(culprits.end(), lost.begin(), lost.end());
    std::sort(culprits.begin(), culprits.end());
    std::string hosts;
    for (const auto& [host, lost] : lost_by_host)
      append_item(hosts, "; ", ranks_on_host(lost, host));
    JobFailure lost =
        report(JobFailure::Kind::kLost,
               "lost " + hosts +
                   (signalled ? ": the process was ended by SIGTERM (from mpirun or a user); "
                                "ending the job"
                              : ": the process ended without finishing (killed, crashed, or "
                                "its host went down); ending the job"),
               culprits);
    lost.by_signal = signalled;
    return lost;
  }
  // 3. Ranks silent past the timeout: stopped, hung, or cut off the network.
  // Once one is past it, every rank quiet for two beats is named with it.
  bool timed_out = false;
  for (const Rank& rank : ranks_)
    if (rank.checked_in && !rank.finished && !rank.lost && now - rank.last_heard > timeout_)
      timed_out = true;
  if (!timed_out) return std::nullopt;
  std::map<std::string, std::vector<int>> silent_by_host;
  std::vector<int> culprits;
  double longest = 0;
  for (int number = 0; number < static_cast<int>(ranks_.size()); ++number) {
    const Rank& rank = ranks_[static_cast<size_t>(number)];
    if (!rank.checked_in || rank.finished || rank.lost || now - rank.last_heard <= 2 * interval_)
      continue;
    silent_by_host[rank.hello.host].push_back(number);
    culprits.push_back(number);
    longest = std::max(longest, seconds_between(rank.last_heard, now));
  }
  std::string hosts;
  for (const auto& [host, silent] : silent_by_host)
    append_item(hosts, "; ", ranks_on_host(silent, host));
  return report(JobFailure::Kind::kSilent,
                hosts + ": nothing heard for " + seconds(longest) + " (heartbeat timeout " +
                    seconds(timeout_.count() / 1000.0) +
                    "): stopped (SIGSTOP), hung, or the host is cut off the network; ending "
                    "the job",
                culprits);
}

bool JobWatch::all_checked_in() const {
  return std::all_of(ranks_.begin(), ranks_.end(),
                     [](const Rank& rank) { return rank.checked_in; });
}

bool JobWatch::all_finished() const {
  return std::all_of(ranks_.begin(), ranks_.end(), [](const Rank& rank) { return rank.finished; });
}

std::optional<std::string> JobWatch::placement() const {
  std::vector<std::string> hosts;  // in order of their first rank
  std::map<std::string, std::vector<int>> ranks_on;
  std::set<std::vector<int>> tensor_groups;
  for (int number = 0; number < static_cast<int>(ranks_.size()); ++number) {
    const Rank& rank = ranks_[static_cast<size_t>(number)];
    if (!rank.checked_in) return std::nullopt;
    bool has_tensor = false;
    for (const auto& [id, group] : rank.groups)
      if (group.name == "tensor") {
        tensor_groups.insert(group.members);
        has_tensor = true;
      }
    if (!has_tensor) return std::nullopt;
    if (!ranks_on.count(rank.hello.host)) hosts.push_back(rank.hello.host);
    ranks_on[rank.hello.host].push_back(number);
  }
  std::string text = "placement:";
  for (const std::string& host : hosts)
    text += " " + host + " ranks " + rank_ranges(ranks_on[host]) + ";";
  std::vector<std::string> spanning;
  for (const std::vector<int>& group : tensor_groups) {
    std::set<std::string> on;
    for (const int member : group) on.insert(ranks_[static_cast<size_t>(member)].hello.host);
    if (on.size() > 1) {
      std::string where;
      for (const std::string& host : on) append_item(where, ", ", host);
      spanning.push_back("tensor group " + members_text(group) + " spans " + where);
    }
  }
  if (spanning.empty()) return text + " every tensor group within one host";
  for (const std::string& line : spanning)
    text += " " + line + " (its all-reduces cross the network);";
  return text;
}

std::vector<long> JobWatch::pids_on(const std::string& host) const {
  std::vector<long> pids;
  for (const Rank& rank : ranks_)
    if (rank.checked_in && rank.hello.host == host) pids.push_back(rank.hello.pid);
  return pids;
}

}  // namespace paraplan

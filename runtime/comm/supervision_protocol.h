// supervision_protocol.h: the messages a rank and `paraplan launch` exchange
// over one TCP connection while a job runs (heartbeat.h is the rank's side,
// launcher/supervisor.h the launcher's). One JSON object per line.
//
// rank -> launcher:
//   {"type":"hello","token":T,"rank":R,"pid":P,"host":H}      first, before MPI_Init
//   {"type":"group","id":I,"name":"tensor","members":[0,1]}    once per process group
//   {"type":"beat","idle_ms":..,"entered":{"I":n,..},"open":[..]}  every interval
//   {"type":"error","message":M}   this rank is ending the job with message M
//   {"type":"done"}                this rank finished normally
//   {"type":"signal","signal":S}   this rank is being ended by signal S (SIGTERM)
// launcher -> rank:
//   {"type":"welcome","interval_ms":..,"timeout_ms":..}        the answer to hello
//   {"type":"beat"}                every interval
//   {"type":"stop"}                the job is over: exit now
//
// A beat says what the rank is doing: for each group, how many operations it
// has entered on it ("entered"), the operations it waits in now ("open": group,
// sequence number, age, description, pipeline peers), and how long it has been
// outside any communication ("idle_ms"). From the beats of every member the
// launcher tells which rank has not arrived in a collective.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace paraplan::supervision {

// The variables `paraplan launch` sets for every rank.
constexpr const char* kAddressVariable = "PARAPLAN_SUPERVISOR";      // host:port
constexpr const char* kTokenVariable = "PARAPLAN_SUPERVISOR_TOKEN";  // the job's token

struct Hello {
  std::string token;
  int rank = -1;
  long pid = 0;
  std::string host;
};

struct GroupInfo {
  int id = -1;
  std::string name;
  std::vector<int> members;  // world ranks, in group rank order
};

struct OpenOperation {
  int group = -1;  // -1: a pipeline transfer
  uint64_t sequence = 0;
  int64_t age_ms = 0;
  std::string what;  // "all_reduce of 3072 floats on group 'tensor' (rank 0 of 2)"
  int send_to = -1, receive_from = -1;
};

struct Beat {
  int64_t idle_ms = 0;
  std::map<int, uint64_t> entered;  // group id -> operations entered on it
  std::vector<OpenOperation> open;
};

struct Welcome {
  int interval_ms = 0, timeout_ms = 0;
};

// One parsed line from a rank.
struct RankMessage {
  enum class Type { kHello, kGroup, kBeat, kError, kDone, kSignal } type = Type::kDone;
  Hello hello;
  GroupInfo group;
  Beat beat;
  std::string error;
  int signal = 0;
};

// One parsed line from the launcher.
struct LauncherMessage {
  enum class Type { kWelcome, kBeat, kStop } type = Type::kBeat;
  Welcome welcome;
};

// Each returns one line, newline included.
std::string encode_hello(const Hello& hello);
std::string encode_group(const GroupInfo& group);
std::string encode_beat(const Beat& beat);
std::string encode_error(const std::string& message);
std::string encode_done();
std::string encode_signal(int signal);
std::string encode_welcome(const Welcome& welcome);
std::string encode_launcher_beat();
std::string encode_stop();

// nullopt for a line that is not a message of the protocol (never throws).
std::optional<RankMessage> parse_rank_message(const std::string& line);
std::optional<LauncherMessage> parse_launcher_message(const std::string& line);

// Splits "host:port"; nullopt unless the port is 1..65535.
std::optional<std::pair<std::string, int>> split_address(const std::string& address);

}  // namespace paraplan::supervision

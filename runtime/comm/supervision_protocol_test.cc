// supervision_protocol_test.cc: every supervision message survives encoding
// and parsing; lines that are not the protocol's parse to nothing, never throw.
#include "runtime/comm/supervision_protocol.h"

#include <gtest/gtest.h>

namespace paraplan::supervision {
namespace {

TEST(SupervisionProtocol, RankMessagesRoundTrip) {
  const auto hello = parse_rank_message(encode_hello({"c0ffee", 3, 4242, "node2"}));
  ASSERT_TRUE(hello);
  EXPECT_EQ(hello->type, RankMessage::Type::kHello);
  EXPECT_EQ(hello->hello.token, "c0ffee");
  EXPECT_EQ(hello->hello.rank, 3);
  EXPECT_EQ(hello->hello.pid, 4242);
  EXPECT_EQ(hello->hello.host, "node2");

  const auto group = parse_rank_message(encode_group({2, "tensor", {2, 3}}));
  ASSERT_TRUE(group);
  EXPECT_EQ(group->type, RankMessage::Type::kGroup);
  EXPECT_EQ(group->group.id, 2);
  EXPECT_EQ(group->group.name, "tensor");
  EXPECT_EQ(group->group.members, (std::vector<int>{2, 3}));

  Beat beat;
  beat.idle_ms = 12;
  beat.entered = {{0, 5}, {2, 41}};
  beat.open = {{2, 41, 2900, "all_reduce of 3072 floats on group 'tensor' (rank 0 of 2)", -1, -1},
               {-1, 0, 10, "pipeline send and receive of 64 floats", 4, 0}};
  const auto parsed = parse_rank_message(encode_beat(beat));
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->type, RankMessage::Type::kBeat);
  EXPECT_EQ(parsed->beat.idle_ms, 12);
  EXPECT_EQ(parsed->beat.entered, beat.entered);
  ASSERT_EQ(parsed->beat.open.size(), 2u);
  EXPECT_EQ(parsed->beat.open[0].group, 2);
  EXPECT_EQ(parsed->beat.open[0].sequence, 41u);
  EXPECT_EQ(parsed->beat.open[0].age_ms, 2900);
  EXPECT_EQ(parsed->beat.open[0].what, beat.open[0].what);
  EXPECT_EQ(parsed->beat.open[1].send_to, 4);
  EXPECT_EQ(parsed->beat.open[1].receive_from, 0);

  const auto error = parse_rank_message(encode_error("timeout: \"quoted\"\nsecond line"));
  ASSERT_TRUE(error);
  EXPECT_EQ(error->type, RankMessage::Type::kError);
  EXPECT_EQ(error->error, "timeout: \"quoted\"\nsecond line");
  EXPECT_EQ(parse_rank_message(encode_done())->type, RankMessage::Type::kDone);
  const auto signal = parse_rank_message(encode_signal(15));
  ASSERT_TRUE(signal);
  EXPECT_EQ(signal->type, RankMessage::Type::kSignal);
  EXPECT_EQ(signal->signal, 15);
}

TEST(SupervisionProtocol, EachMessageIsOneLine) {
  for (const std::string& line :
       {encode_hello({"t", 0, 1, "h"}), encode_error("a\nb"), encode_done(), encode_stop(),
        encode_welcome({500, 3000}), encode_launcher_beat()}) {
    ASSERT_FALSE(line.empty());
    EXPECT_EQ(line.back(), '\n');
    EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
  }
}

TEST(SupervisionProtocol, LauncherMessagesRoundTrip) {
  const auto welcome = parse_launcher_message(encode_welcome({500, 3000}));
  ASSERT_TRUE(welcome);
  EXPECT_EQ(welcome->type, LauncherMessage::Type::kWelcome);
  EXPECT_EQ(welcome->welcome.interval_ms, 500);
  EXPECT_EQ(welcome->welcome.timeout_ms, 3000);
  EXPECT_EQ(parse_launcher_message(encode_launcher_beat())->type, LauncherMessage::Type::kBeat);
  EXPECT_EQ(parse_launcher_message(encode_stop())->type, LauncherMessage::Type::kStop);
}

TEST(SupervisionProtocol, OtherLinesParseToNothing) {
  for (const std::string line :
       {"", "not json", "[1,2]", "{}", "{\"type\":7}", "{\"type\":\"hello\"}",
        "{\"type\":\"hello\",\"token\":1,\"rank\":0,\"pid\":1,\"host\":\"h\"}",
        "{\"type\":\"beat\",\"idle_ms\":1,\"entered\":{\"x\":1},\"open\":[]}",
        "{\"type\":\"unknown\"}", "{\"type\":\"error\",\"message\":\"\xff\xfe\"}"}) {
    EXPECT_FALSE(parse_rank_message(line)) << line;
  }
  for (const std::string line : {"", "not json", "{}", "{\"type\":\"hello\"}",
                                 "{\"type\":\"welcome\",\"interval_ms\":\"x\"}"})
    EXPECT_FALSE(parse_launcher_message(line)) << line;
}

TEST(SupervisionProtocol, SplitsHostAndPort) {
  EXPECT_EQ(split_address("10.77.0.1:41234"), std::make_pair(std::string("10.77.0.1"), 41234));
  EXPECT_EQ(split_address("node1:1"), std::make_pair(std::string("node1"), 1));
  for (const char* bad :
       {"", "node1", "node1:", ":80", "node1:0", "node1:65536", "node1:8x", "node1:123456"})
    EXPECT_FALSE(split_address(bad)) << bad;
}

}  // namespace
}  // namespace paraplan::supervision

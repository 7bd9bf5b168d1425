// network_test.cc: the network a multi-host job talks over, chosen from what
// each host reports: the subnet carrying every host's address even when a
// docker0 carries the same address everywhere, hosts on different subnets,
// and names or subnets the user gives (with the hosts that lack them).
#include "launcher/network.h"

#include <gtest/gtest.h>

namespace paraplan {
namespace {

uint32_t ip(const char* text) {
  return *parse_ipv4(text);
}

// Two hosts on 10.77.0.0/24 by eth0, each with docker0 172.17.0.1/16.
std::vector<HostNetwork> docker_hosts() {
  return {{"node1",
           {ip("10.77.0.1")},
           {{"eth0", ip("10.77.0.1"), 24}, {"docker0", ip("172.17.0.1"), 16}}},
          {"node2",
           {ip("10.77.0.2")},
           {{"docker0", ip("172.17.0.1"), 16}, {"eth0", ip("10.77.0.2"), 24}}}};
}

TEST(Network, AddressesAndSubnets) {
  EXPECT_EQ(ipv4_text(ip("10.77.0.2")), "10.77.0.2");
  EXPECT_EQ(cidr_text(ip("10.77.0.2"), 24), "10.77.0.0/24");
  EXPECT_EQ(parse_cidr("10.77.0.9/24"), std::make_pair(ip("10.77.0.0"), 24));
  EXPECT_EQ(parse_cidr("0.0.0.0/0"), std::make_pair(0u, 0));
  for (const char* bad : {"10.77.0.0", "10.77.0.0/33", "10.77.0/24", "eth0", "10.0.0.0/x", "/24"})
    EXPECT_FALSE(parse_cidr(bad)) << bad;
  EXPECT_TRUE(in_subnet(ip("10.77.0.200"), ip("10.77.0.0"), 24));
  EXPECT_FALSE(in_subnet(ip("10.77.1.2"), ip("10.77.0.0"), 24));
  EXPECT_EQ(resolve_ipv4("127.0.0.1"), std::vector<uint32_t>{ip("127.0.0.1")});
  EXPECT_EQ(source_address_towards(ip("127.0.0.1")), ip("127.0.0.1"));
}

TEST(Network, AutoPicksTheSubnetCarryingEveryHostsAddressNotDocker0) {
  const NetworkChoice choice = choose_network("auto", docker_hosts());
  EXPECT_EQ(choice.mpi, "10.77.0.0/24");
  EXPECT_EQ(choice.nccl_socket_ifname, "=eth0");
  EXPECT_TRUE(choice.problems.empty());
  EXPECT_EQ(choice.reason,
            "network: 10.77.0.0/24 (auto: it carries every host's address) for Open MPI "
            "(btl_tcp_if_include, oob_tcp_if_include) and NCCL (NCCL_SOCKET_IFNAME==eth0)");
  // Where the ranks reach the launcher on node1: its address on that subnet.
  EXPECT_EQ(launcher_address(choice, docker_hosts(), docker_hosts()[0].interfaces), "10.77.0.1");
}

TEST(Network, InterfacesNamedDifferentlyOnEachHostShareTheSubnet) {
  std::vector<HostNetwork> hosts = docker_hosts();
  hosts[1].interfaces[1].name = "ens5";
  const NetworkChoice choice = choose_network("auto", hosts);
  EXPECT_EQ(choice.mpi, "10.77.0.0/24");
  EXPECT_EQ(choice.nccl_socket_ifname, "=ens5,eth0");
}

TEST(Network, HostsOnDifferentSubnetsAreNotRestrictedAndTheLogSaysWhy) {
  std::vector<HostNetwork> hosts = docker_hosts();
  hosts[1].addresses = {ip("10.78.0.2")};
  hosts[1].interfaces[1] = {"eth0", ip("10.78.0.2"), 24};
  const NetworkChoice choice = choose_network("auto", hosts);
  EXPECT_EQ(choice.mpi, "");
  EXPECT_EQ(choice.nccl_socket_ifname, "");
  EXPECT_EQ(choice.reason,
            "network: not restricted (the hosts are on different subnets: node1 on 10.77.0.0/24; "
            "node2 on 10.78.0.0/24); pass --network-interface if the job hangs");
}

TEST(Network, ThisMachineNamedByALoopbackAddressFollowsTheOthers) {
  std::vector<HostNetwork> hosts = docker_hosts();
  hosts[0].addresses = {ip("127.0.1.1")};  // Debian maps its own name so
  EXPECT_EQ(choose_network("auto", hosts).mpi, "10.77.0.0/24");
  hosts[1].addresses = {ip("127.0.0.1")};
  EXPECT_EQ(choose_network("auto", hosts).reason,
            "network: not restricted (every host is this machine)");
}

TEST(Network, NamesAndSubnetsGivenAreUsedAndHostsLackingThemNamed) {
  const NetworkChoice named = choose_network("eth0", docker_hosts());
  EXPECT_EQ(named.mpi, "eth0");
  EXPECT_EQ(named.nccl_socket_ifname, "=eth0");
  EXPECT_TRUE(named.problems.empty());

  const NetworkChoice missing = choose_network("ib0", docker_hosts());
  EXPECT_EQ(missing.problems,
            (std::vector<std::string>{
                "node1: no interface named ib0 (it has: docker0, eth0); name one every host has, "
                "or give a subnet (10.0.0.0/16)",
                "node2: no interface named ib0 (it has: docker0, eth0); name one every host has, "
                "or give a subnet (10.0.0.0/16)"}));

  const NetworkChoice subnet = choose_network("10.77.0.0/16", docker_hosts());
  EXPECT_EQ(subnet.mpi, "10.77.0.0/16");
  EXPECT_EQ(subnet.nccl_socket_ifname, "=eth0");
  EXPECT_TRUE(subnet.problems.empty());
  EXPECT_EQ(choose_network("192.168.0.0/16", docker_hosts()).problems.size(), 2u);

  const NetworkChoice none = choose_network("none", docker_hosts());
  EXPECT_EQ(none.mpi, "");
  EXPECT_EQ(none.reason, "network: not restricted (--network-interface none)");
}

}  // namespace
}  // namespace paraplan

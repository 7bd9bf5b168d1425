// network.h: which network a multi-host job talks over. Open MPI (its TCP
// transport and its daemons' wire-up) and NCCL's bootstrap use every
// interface they find; an interface that carries the same address on every
// host (Docker's docker0 does) makes them connect each host to itself and the
// job hangs before its first step. `paraplan launch` therefore names one
// network: Open MPI's btl_tcp_if_include and oob_tcp_if_include, and NCCL's
// NCCL_SOCKET_IFNAME, all from one choice.
//
// auto: the subnet of the interfaces that carry each host's address (the
// address its hostfile name resolves to here); when the hosts are on one
// subnet that subnet is chosen (as CIDR, which Open MPI matches on every host
// whatever the interface is called), else nothing is restricted and the log
// says why. A name ("eth0", "ib0,eth0") or a subnet ("10.0.0.0/16") given by
// the user is used as it is; "none" restricts nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace paraplan {

// An IPv4 address of an interface that is up (loopback excluded).
struct InterfaceAddress {
  std::string name;
  uint32_t address = 0;  // host byte order
  int prefix = 32;
  bool operator==(const InterfaceAddress&) const = default;
};

std::vector<InterfaceAddress> this_host_interfaces();

std::string ipv4_text(uint32_t address);
std::optional<uint32_t> parse_ipv4(const std::string& text);
// "10.77.0.0/24" -> (network, prefix); nullopt unless a valid IPv4 CIDR.
std::optional<std::pair<uint32_t, int>> parse_cidr(const std::string& text);
std::string cidr_text(uint32_t address, int prefix);  // the network of address/prefix
bool in_subnet(uint32_t address, uint32_t network, int prefix);

// The IPv4 addresses `host` resolves to on this machine (empty if none).
std::vector<uint32_t> resolve_ipv4(const std::string& host);
// The address this machine would send from to reach `address` (a UDP
// socket's route lookup; no packet is sent), or nullopt.
std::optional<uint32_t> source_address_towards(uint32_t address);

// A host of the job as the network choice sees it.
struct HostNetwork {
  std::string host;                          // as the hostfile names it
  std::vector<uint32_t> addresses;           // what the name resolves to on this machine
  std::vector<InterfaceAddress> interfaces;  // the host's own (from its preflight)
};

struct NetworkChoice {
  std::string mpi;                 // btl/oob_tcp_if_include value; "" leaves Open MPI to choose
  std::string nccl_socket_ifname;  // NCCL_SOCKET_IFNAME value ("=eth0"); "" leaves NCCL to choose
  std::string reason;              // one line for the log: what was chosen and why
  std::vector<std::string> problems;  // "node2: no interface named ib0 (it has: eth0)"
};

// requested: "auto", "none", interface names (comma-separated) or a CIDR.
NetworkChoice choose_network(const std::string& requested, const std::vector<HostNetwork>& hosts);

// Where ranks reach the launcher: this machine's address on the chosen
// network, else the one it uses towards the first host, else 127.0.0.1.
std::string launcher_address(const NetworkChoice& choice, const std::vector<HostNetwork>& hosts,
                             const std::vector<InterfaceAddress>& this_host);

}  // namespace paraplan

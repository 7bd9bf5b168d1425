// network.cc: interfaces, addresses and the job's network choice (network.h).
#include "launcher/network.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace paraplan {
namespace {

uint32_t mask_of(int prefix) {
  return prefix <= 0 ? 0 : ~uint32_t{0} << (32 - prefix);
}

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> names;
  std::stringstream stream(text);
  for (std::string name; std::getline(stream, name, ',');)
    if (!name.empty()) names.push_back(name);
  return names;
}

std::string join(const std::vector<std::string>& words, const std::string& separator) {
  std::string text;
  for (const std::string& word : words) {
    if (!text.empty()) text += separator;
    text += word;
  }
  return text;
}

// The interface of `host` that carries one of its resolved addresses.
const InterfaceAddress* interface_carrying(const HostNetwork& host) {
  for (const InterfaceAddress& interface : host.interfaces)
    if (std::find(host.addresses.begin(), host.addresses.end(), interface.address) !=
        host.addresses.end())
      return &interface;
  return nullptr;
}

std::string interface_names(const HostNetwork& host) {
  std::set<std::string> names;
  for (const InterfaceAddress& interface : host.interfaces) names.insert(interface.name);
  return names.empty() ? "none" : join({names.begin(), names.end()}, ", ");
}

// NCCL_SOCKET_IFNAME for the interfaces (by name) each host has in the subnet.
std::string nccl_names_in_subnet(const std::vector<HostNetwork>& hosts, uint32_t network,
                                 int prefix) {
  std::set<std::string> names;
  for (const HostNetwork& host : hosts)
    for (const InterfaceAddress& interface : host.interfaces)
      if (in_subnet(interface.address, network, prefix)) names.insert(interface.name);
  if (names.empty()) return "";
  std::string exact = "=";  // NCCL: match these names exactly, not as prefixes
  exact += join({names.begin(), names.end()}, ",");
  return exact;
}

bool is_loopback(uint32_t address) {
  return (address >> 24) == 127;
}

NetworkChoice choose_automatically(const std::vector<HostNetwork>& hosts) {
  NetworkChoice choice;
  std::map<std::string, std::vector<std::string>> subnets;  // CIDR -> hosts on it
  std::vector<std::string> unplaced;
  for (const HostNetwork& host : hosts) {
    // This machine named by a loopback address (Debian maps its own name to
    // 127.0.1.1): the others decide, and it joins them over the same subnet.
    if (!host.addresses.empty() &&
        std::all_of(host.addresses.begin(), host.addresses.end(), is_loopback))
      continue;
    const InterfaceAddress* carrying = interface_carrying(host);
    if (carrying == nullptr) {
      unplaced.push_back(host.host);
      continue;
    }
    subnets[cidr_text(carrying->address, carrying->prefix)].push_back(host.host);
  }
  if (!unplaced.empty()) {
    choice.reason = "network: not restricted (no interface of " + join(unplaced, ", ") +
                    " carries the address its name resolves to here); pass "
                    "--network-interface if the job hangs before its first step";
    return choice;
  }
  if (subnets.empty()) {
    choice.reason = "network: not restricted (every host is this machine)";
    return choice;
  }
  if (subnets.size() != 1) {
    std::vector<std::string> each;
    for (const auto& [subnet, on] : subnets) each.push_back(join(on, ", ") + " on " + subnet);
    choice.reason =
        "network: not restricted (the hosts are on different subnets: " + join(each, "; ") +
        "); pass --network-interface if the job hangs";
    return choice;
  }
  choice.mpi = subnets.begin()->first;
  const auto [network, prefix] = *parse_cidr(choice.mpi);
  choice.nccl_socket_ifname = nccl_names_in_subnet(hosts, network, prefix);
  choice.reason =
      "network: " + choice.mpi + " (auto: it carries every host's address) for " +
      "Open MPI (btl_tcp_if_include, oob_tcp_if_include) and NCCL (NCCL_SOCKET_IFNAME=" +
      choice.nccl_socket_ifname + ")";
  return choice;
}

}  // namespace

std::vector<InterfaceAddress> this_host_interfaces() {
  std::vector<InterfaceAddress> interfaces;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return interfaces;
  for (const ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    if (!(entry->ifa_flags & IFF_UP) || (entry->ifa_flags & IFF_LOOPBACK)) continue;
    const auto* address = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr);
    const auto* mask = reinterpret_cast<const sockaddr_in*>(entry->ifa_netmask);
    const int prefix = mask ? __builtin_popcount(ntohl(mask->sin_addr.s_addr)) : 32;
    interfaces.push_back({entry->ifa_name, ntohl(address->sin_addr.s_addr), prefix});
  }
  freeifaddrs(list);
  return interfaces;
}

std::string ipv4_text(uint32_t address) {
  return std::to_string(address >> 24) + "." + std::to_string((address >> 16) & 255) + "." +
         std::to_string((address >> 8) & 255) + "." + std::to_string(address & 255);
}

std::optional<uint32_t> parse_ipv4(const std::string& text) {
  in_addr parsed{};
  if (inet_pton(AF_INET, text.c_str(), &parsed) != 1) return std::nullopt;
  return ntohl(parsed.s_addr);
}

std::optional<std::pair<uint32_t, int>> parse_cidr(const std::string& text) {
  const size_t slash = text.find('/');
  if (slash == std::string::npos) return std::nullopt;
  const std::optional<uint32_t> address = parse_ipv4(text.substr(0, slash));
  const std::string prefix_text = text.substr(slash + 1);
  if (!address || prefix_text.empty() || prefix_text.size() > 2 ||
      prefix_text.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  const int prefix = std::stoi(prefix_text);
  if (prefix > 32) return std::nullopt;
  return std::make_pair(*address & mask_of(prefix), prefix);
}

std::string cidr_text(uint32_t address, int prefix) {
  return ipv4_text(address & mask_of(prefix)) + "/" + std::to_string(prefix);
}

bool in_subnet(uint32_t address, uint32_t network, int prefix) {
  return (address & mask_of(prefix)) == (network & mask_of(prefix));
}

std::vector<uint32_t> resolve_ipv4(const std::string& host) {
  std::vector<uint32_t> addresses;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return addresses;
  for (const addrinfo* entry = found; entry != nullptr; entry = entry->ai_next) {
    const uint32_t address =
        ntohl(reinterpret_cast<const sockaddr_in*>(entry->ai_addr)->sin_addr.s_addr);
    if (std::find(addresses.begin(), addresses.end(), address) == addresses.end())
      addresses.push_back(address);
  }
  freeaddrinfo(found);
  return addresses;
}

std::optional<uint32_t> source_address_towards(uint32_t address) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(9);  // any port: connect() on UDP only picks a route
  peer.sin_addr.s_addr = htonl(address);
  std::optional<uint32_t> source;
  sockaddr_in local{};
  socklen_t length = sizeof local;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&peer), sizeof peer) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0)
    source = ntohl(local.sin_addr.s_addr);
  close(fd);
  return source;
}

NetworkChoice choose_network(const std::string& requested, const std::vector<HostNetwork>& hosts) {
  if (requested == "auto") return choose_automatically(hosts);
  NetworkChoice choice;
  if (requested == "none") {
    choice.reason = "network: not restricted (--network-interface none)";
    return choice;
  }
  choice.mpi = requested;
  if (const auto subnet = parse_cidr(requested)) {
    // Named copies, not structured bindings: clang 14 cannot capture those.
    const auto network = subnet->first;
    const auto prefix = subnet->second;
    for (const HostNetwork& host : hosts) {
      const bool has = std::any_of(host.interfaces.begin(), host.interfaces.end(),
                                   [&](const InterfaceAddress& interface) {
                                     return in_subnet(interface.address, network, prefix);
                                   });
      if (!has)
        choice.problems.push_back(host.host + ": no interface in " + requested +
                                  " (it has: " + interface_names(host) +
                                  "); pass the subnet every host is on to --network-interface");
    }
    choice.nccl_socket_ifname = nccl_names_in_subnet(hosts, network, prefix);
  } else {
    const std::vector<std::string> names = split_names(requested);
    for (const HostNetwork& host : hosts) {
      const bool has = std::any_of(names.begin(), names.end(), [&](const std::string& name) {
        return std::any_of(
            host.interfaces.begin(), host.interfaces.end(),
            [&](const InterfaceAddress& interface) { return interface.name == name; });
      });
      if (!has)
        choice.problems.push_back(host.host + ": no interface named " + requested +
                                  " (it has: " + interface_names(host) +
                                  "); name one every host has, or give a subnet (10.0.0.0/16)");
    }
    choice.nccl_socket_ifname = "=" + join(names, ",");
  }
  choice.reason = "network: " + requested + " (--network-interface) for Open MPI " +
                  "(btl_tcp_if_include, oob_tcp_if_include) and NCCL (NCCL_SOCKET_IFNAME=" +
                  choice.nccl_socket_ifname + ")";
  return choice;
}

std::string launcher_address(const NetworkChoice& choice, const std::vector<HostNetwork>& hosts,
                             const std::vector<InterfaceAddress>& this_host) {
  if (const auto subnet = parse_cidr(choice.mpi)) {
    for (const InterfaceAddress& interface : this_host)
      if (in_subnet(interface.address, subnet->first, subnet->second))
        return ipv4_text(interface.address);
  } else if (!choice.mpi.empty()) {
    const std::vector<std::string> names = split_names(choice.mpi);
    for (const InterfaceAddress& interface : this_host)
      if (std::find(names.begin(), names.end(), interface.name) != names.end())
        return ipv4_text(interface.address);
  }
  for (const HostNetwork& host : hosts)
    for (const uint32_t address : host.addresses)
      if (const auto source = source_address_towards(address)) return ipv4_text(*source);
  return "127.0.0.1";
}

}  // namespace paraplan

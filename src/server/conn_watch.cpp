#include "server/conn_watch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace minfer::server {

namespace {

int port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

}  // namespace

namespace {

// Calls fn(fd) for every socket descriptor of this process until it returns true.
template <typename Fn>
int scan_sockets(Fn&& fn) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const std::string name = e.path().filename().string();
    char* end = nullptr;
    const long fd = std::strtol(name.c_str(), &end, 10);
    if (!end || *end != '\0' || fd < 0) continue;
    struct stat st {};
    if (::fstat(int(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (fn(int(fd))) return int(fd);
  }
  return -1;
}

}  // namespace

int find_connection_socket(int local_port, int remote_port) {
  if (local_port <= 0 || remote_port <= 0) return -1;
  return scan_sockets([&](int fd) {
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof(local), pl = sizeof(peer);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) return false;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) return false;
    return port_of(local) == local_port && port_of(peer) == remote_port;
  });
}

bool raise_listen_backlog(int port, int backlog) {
  const int fd = scan_sockets([&](int fd) {
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening)
      return false;
    sockaddr_storage local{};
    socklen_t ll = sizeof(local);
    return ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) == 0 &&
           port_of(local) == port;
  });
  return fd >= 0 && ::listen(fd, backlog) == 0;  // listen() again only resizes the queue
}

bool peer_closed(int fd) {
  if (fd < 0) return false;
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;  // orderly shutdown by the peer
  if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  return false;  // data waiting (a pipelined request): still there
}

}  // namespace minfer::server

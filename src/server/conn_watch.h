// Noticing that an HTTP client went away while its request is still being generated, and
// the listen backlog fix-up (below).
//
// cpp-httplib (0.11) gives handlers no socket and reports a closed connection only when a write
// fails, so a client that disconnects during prefill, or during a non-streaming request, would
// otherwise hold its slot to the end. find_connection_socket() finds the handler's socket among
// this process's descriptors by its (local port, peer port) pair, which identifies one TCP
// connection; peer_closed() peeks at it without blocking.
//
// Ownership: the descriptor stays owned by httplib; use it only inside the handler (it is open
// until the handler returns). Thread safety: both functions are reentrant. Failure: -1 when no
// socket matches (then the caller relies on failed writes); peer_closed(-1) is false. Cost:
// find_* lists /proc/self/fd once per request (a few syscalls per open descriptor); peer_closed
// is one recv().
#pragma once

namespace minfer::server {

int find_connection_socket(int local_port, int remote_port);
// Debian's libcpp-httplib is built with a listen backlog of 5: a burst of connections
// overflows it and clients see their SYN dropped (a 1 s retransmit) or a reset. Finds this
// process's listening socket on `port` and calls listen() on it again with `backlog`
// (Linux resizes the accept queue). Returns false when no such socket was found.
bool raise_listen_backlog(int port, int backlog);
bool peer_closed(int fd);

}  // namespace minfer::server

#include "k8s/probe_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/time/clock.h"

#include "base/log.h"
#include "base/strings.h"

namespace prism::k8s {
namespace {

constexpr char kLog[] = "probe-server";
constexpr int kListenBacklog = 1024;
// What one poll round does for one client at most, so that no client holds the thread every probe
// is answered on: input read after a reply (a client that keeps sending is cut off, not drained),
// and connections accepted (a connect flood waits for the next round, after the others).
constexpr size_t kMaxDrainBytes = 64 * 1024;
constexpr int kMaxAcceptsPerRound = 256;

std::string_view Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

std::string Response(const ProbeReply& reply, bool head) {
  std::string out = StrCat("HTTP/1.1 ", reply.status, " ", Reason(reply.status),
                           "\r\nContent-Type: ", reply.content_type,
                           "\r\nContent-Length: ", reply.body.size(), "\r\nConnection: close\r\n");
  if (reply.status == 405) out.append("Allow: GET, HEAD\r\n");
  out.append("\r\n");
  if (!head) out.append(reply.body);
  return out;
}

// The end of the request's headers in `in`, or npos while incomplete.
size_t HeadersEnd(std::string_view in) {
  const size_t crlf = in.find("\r\n\r\n");
  if (crlf != std::string_view::npos) return crlf + 4;
  const size_t lf = in.find("\n\n");  // Bare LF line ends, as lenient servers accept.
  return lf == std::string_view::npos ? lf : lf + 2;
}

}  // namespace

class ProbeServer::Loop {
 public:
  Loop(const Options& options, const std::map<std::string, Route>& routes, int listen_fd,
       int wake_read, int wake_write)
      : options_(options),
        routes_(routes),
        listen_fd_(listen_fd),
        wake_read_(wake_read),
        wake_write_(wake_write),
        worker_([this] { Work(); }) {}
  ~Loop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_.store(true);
    }
    cv_.notify_all();
    worker_.join();
    for (auto& [id, c] : conns_) ::close(c.fd);
    ::close(listen_fd_);
    ::close(wake_read_);
    ::close(wake_write_);
  }

  void Stop() {
    stop_.store(true);
    Wake();
  }

  Counters counters() const {
    return Counters{slow_refused_.load(std::memory_order_relaxed),
                    slow_abandoned_.load(std::memory_order_relaxed)};
  }

  void Run() {
    std::vector<pollfd> fds;
    std::vector<uint64_t> polled;
    while (!stop_.load()) {
      const absl::Time now = absl::Now();
      fds.clear();
      polled.clear();
      fds.push_back({wake_read_, POLLIN, 0});
      const bool accepting = now >= accept_paused_until_;
      fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
      absl::Time next = now + absl::Seconds(1);
      if (!accepting) next = std::min(next, accept_paused_until_);
      for (const auto& [id, c] : conns_) {
        // A connection waiting for the worker is read too: a client that hangs up (EOF is no
        // POLLHUP) has its job dropped instead of rendered for nobody.
        const short events = c.writing ? POLLOUT : POLLIN;
        fds.push_back({c.fd, events, 0});
        polled.push_back(id);
        next = std::min(next, c.deadline);
      }
      const int timeout_ms =
          static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(next - now) + 1));
      if (::poll(fds.data(), fds.size(), timeout_ms) < 0) {
        if (errno == EINTR) continue;
        LogError(kLog, "poll: ", std::strerror(errno));
        break;
      }
      if (fds[0].revents != 0) {
        char drain[64];
        while (::read(wake_read_, drain, sizeof(drain)) > 0) {
        }
      }
      for (size_t i = 0; i < polled.size(); ++i) {
        const short ev = fds[i + 2].revents;
        if (ev == 0) continue;
        auto it = conns_.find(polled[i]);
        if (it == conns_.end()) continue;
        Conn& c = it->second;
        bool open = true;
        if ((ev & POLLNVAL) != 0 || (c.waiting && (ev & (POLLHUP | POLLERR)) != 0)) {
          open = false;
        } else if (c.writing) {
          open = (ev & POLLOUT) != 0 ? Write(c) : (ev & (POLLHUP | POLLERR)) == 0;
        } else if (c.waiting) {
          open = ReadWhileWaiting(c);
        } else {
          open = Read(it->first, c);
        }
        if (!open) Close(it);
      }
      Deliver();
      const absl::Time after = absl::Now();
      for (auto it = conns_.begin(); it != conns_.end();) {
        auto here = it++;
        // Too slow to send its request or to take the reply, or its handler too slow.
        if (here->second.deadline <= after) Close(here);
      }
      if ((fds[1].revents & POLLIN) != 0) Accept(after);
    }
  }

 private:
  struct Conn {
    int fd = -1;
    std::string in;
    std::string out;
    size_t sent = 0;
    bool waiting = false;  // For the worker to run its handler.
    bool writing = false;
    bool slow = false;  // Holds one of max_slow_requests (queued, rendering, or its reply unsent).
    absl::Time deadline;
  };
  struct Job {
    uint64_t conn = 0;
    const Handler* handler = nullptr;
    std::string path;
    bool head = false;
  };
  struct Done {
    uint64_t conn = 0;
    ProbeReply reply;
    bool head = false;
  };

  void Wake() {
    const char byte = 1;
    // The pipe holds far more than one byte; a failed write means it is full, which wakes too.
    (void)!::write(wake_write_, &byte, 1);
  }

  void Close(std::map<uint64_t, Conn>::iterator it) {
    if (it->second.waiting) {
      // Its job, if the worker has not taken it yet, would render for nobody.
      std::lock_guard<std::mutex> lock(mu_);
      auto job = std::find_if(jobs_.begin(), jobs_.end(),
                              [id = it->first](const Job& j) { return j.conn == id; });
      if (job != jobs_.end()) {
        jobs_.erase(job);
        slow_abandoned_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (it->second.slow) --slow_in_flight_;
    ::close(it->second.fd);
    conns_.erase(it);
  }

  void Accept(absl::Time now) {
    for (int accepted = 0; accepted < kMaxAcceptsPerRound; ++accepted) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE) {
          // Out of descriptors: the oldest connection makes room; with none of ours to close,
          // wait a moment rather than spin on a listening socket that stays readable.
          if (!conns_.empty()) {
            Close(conns_.begin());
            continue;
          }
          accept_paused_until_ = now + absl::Milliseconds(100);
        }
        return;  // EAGAIN: nothing more to accept.
      }
      // At the bound, the oldest connection goes (IDs grow, so the map's first is the oldest): a
      // probe has just connected and sends its request at once, while what has lingered longest
      // is the likeliest to be idle.
      if (conns_.size() >= options_.max_connections) Close(conns_.begin());
      Conn c;
      c.fd = fd;
      c.deadline = now + options_.request_timeout;
      conns_.emplace(next_id_++, std::move(c));
    }
  }

  // Input on a connection whose request the worker has: only a hangup is expected. False: the
  // client left (or sends more than a request), so close it.
  bool ReadWhileWaiting(Conn& c) {
    char buf[4096];
    const ssize_t n = ::recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) return false;  // EOF: nobody will read the reply.
    if (n < 0) return errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK;
    c.in.append(buf, static_cast<size_t>(n));  // Pipelined requests: counted, not answered.
    return c.in.size() <= options_.max_request_bytes;
  }

  // Reads what has arrived; answers once the headers are complete. False: close it.
  bool Read(uint64_t id, Conn& c) {
    char buf[4096];
    bool eof = false;
    while (true) {
      const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
      if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
        if (c.in.size() > options_.max_request_bytes) break;
        continue;
      }
      if (n == 0) {
        eof = true;  // The peer closed, or half-closed after its request.
        break;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return false;
    }
    const size_t end = HeadersEnd(c.in);
    if (end == std::string::npos) {
      if (c.in.size() > options_.max_request_bytes) {
        return Reply(c, ProbeReply{431, "text/plain", "request too large\n"}, false);
      }
      return !eof;  // Without a complete request, a closed peer has nothing to read back.
    }
    return Answer(id, c, std::string_view(c.in).substr(0, end));
  }

  bool Answer(uint64_t id, Conn& c, std::string_view request) {
    const size_t line_end = request.find('\n');
    std::string_view line = request.substr(0, line_end);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || line.substr(sp2 + 1).rfind("HTTP/", 0) != 0) {
      return Reply(c, ProbeReply{400, "text/plain", "bad request\n"}, false);
    }
    const std::string_view method = line.substr(0, sp1);
    std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    target = target.substr(0, target.find('?'));
    const bool head = method == "HEAD";
    auto it = routes_.find(std::string(target));
    if (it == routes_.end()) {
      return Reply(c, ProbeReply{404, "text/plain", StrCat("no such path: ", target, "\n")}, head);
    }
    if (method != "GET" && !head) {
      return Reply(c, ProbeReply{405, "text/plain", "only GET and HEAD\n"}, false);
    }
    if (!it->second.slow) return Reply(c, Call(it->second.handler, target), head);
    if (slow_in_flight_ >= options_.max_slow_requests) {
      // Queued renders and unsent replies are work and memory: bounded, and a scraper retries.
      slow_refused_.fetch_add(1, std::memory_order_relaxed);
      return Reply(c, ProbeReply{503, "text/plain", "too many requests in flight\n"}, head);
    }
    ++slow_in_flight_;
    c.slow = true;
    c.waiting = true;
    c.deadline = absl::Now() + options_.write_timeout;
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(Job{id, &it->second.handler, std::string(target), head});
    }
    cv_.notify_one();
    return true;
  }

  // Handlers are Prism's own and report problems in their reply; anything thrown is a bug, and
  // must not end the threads every probe depends on.
  static ProbeReply Call(const Handler& handler, std::string_view path) {
    try {
      return handler();
    } catch (const std::exception& e) {
      LogError(kLog, "GET ", path, ": unhandled exception: ", e.what());
    } catch (...) {
      LogError(kLog, "GET ", path, ": unhandled exception");
    }
    return ProbeReply{500, "text/plain", "internal error\n"};
  }

  // The worker: slow handlers, one at a time, off the thread that answers the probes.
  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [this] { return !jobs_.empty() || stop_.load(); });
      if (stop_.load()) return;
      Job job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      Done done{job.conn, Call(*job.handler, job.path), job.head};
      lock.lock();
      done_.push_back(std::move(done));
      Wake();
    }
  }

  // Replies the worker finished, to connections still open (a closed one's is dropped).
  void Deliver() {
    std::vector<Done> done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done.swap(done_);
    }
    for (Done& d : done) {
      auto it = conns_.find(d.conn);
      if (it == conns_.end() || !it->second.waiting) continue;
      it->second.waiting = false;
      if (!Reply(it->second, d.reply, d.head)) Close(it);
    }
  }

  bool Reply(Conn& c, const ProbeReply& reply, bool head) {
    c.out = Response(reply, head);
    c.sent = 0;
    c.writing = true;
    c.deadline = absl::Now() + options_.write_timeout;
    return Write(c);
  }

  // Sends what the socket takes. False once all is sent (the connection is done) or on error.
  bool Write(Conn& c) {
    while (c.sent < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n > 0) {
        c.sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      return false;
    }
    // Done. Closing with unread input would reset the connection and could discard the reply
    // at the client, so read what is left first; but only what a request may hold (and a
    // little): a client that keeps sending would otherwise hold this thread.
    ::shutdown(c.fd, SHUT_WR);
    char buf[4096];
    for (size_t drained = 0; drained < kMaxDrainBytes;) {
      const ssize_t n = ::recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n <= 0) break;
      drained += static_cast<size_t>(n);
    }
    return false;
  }

  const Options options_;
  const std::map<std::string, Route>& routes_;
  const int listen_fd_;
  const int wake_read_;
  const int wake_write_;
  std::atomic<bool> stop_{false};
  // Server thread only.
  std::map<uint64_t, Conn> conns_;  // By ID: oldest first.
  uint64_t next_id_ = 1;
  size_t slow_in_flight_ = 0;  // Connections with `slow` set.
  absl::Time accept_paused_until_ = absl::InfinitePast();
  // Shared with the worker.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::vector<Done> done_;
  // Read by counters() from any thread.
  std::atomic<uint64_t> slow_refused_{0};
  std::atomic<uint64_t> slow_abandoned_{0};
  std::thread worker_;  // Last: started once everything above exists.
};

absl::StatusOr<int> ListenTcp(const std::string& host, int port, int* bound_port) {
  const std::string where = StrCat(host, ":", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int gai =
      ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  if (gai != 0) {
    return absl::UnavailableError(StrCat("cannot listen on ", where, ": ", ::gai_strerror(gai)));
  }
  int fd = -1;
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, kListenBacklog) != 0) {
      error = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) return absl::UnavailableError(StrCat("cannot listen on ", where, ": ", error));
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
    *bound_port = bound.ss_family == AF_INET6
                      ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
                      : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  }
  return fd;
}

ProbeServer::ProbeServer(Options options) : options_(std::move(options)) {}

ProbeServer::~ProbeServer() { Stop(); }

void ProbeServer::Handle(const std::string& path, Handler handler, bool slow) {
  routes_[path] = Route{std::move(handler), slow};
}

absl::Status ProbeServer::Start() {
  if (loop_ != nullptr) return absl::FailedPreconditionError("probe server already started");
  absl::StatusOr<int> listening = ListenTcp(options_.host, options_.port, &port_);
  if (!listening.ok()) return listening.status();
  const int fd = *listening;
  int wake[2];
  if (::pipe2(wake, O_NONBLOCK | O_CLOEXEC) != 0) {
    ::close(fd);
    return absl::InternalError(StrCat("probe server: pipe: ", std::strerror(errno)));
  }
  loop_ = std::make_unique<Loop>(options_, routes_, fd, wake[0], wake[1]);
  thread_ = std::thread([loop = loop_.get()] { loop->Run(); });
  return absl::OkStatus();
}

ProbeServer::Counters ProbeServer::counters() const {
  return loop_ == nullptr ? Counters{} : loop_->counters();
}

void ProbeServer::Stop() {
  if (loop_ == nullptr) return;
  loop_->Stop();
  if (thread_.joinable()) thread_.join();
  loop_.reset();
}

}  // namespace prism::k8s

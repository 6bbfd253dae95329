#include "extender/http_front.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"

#include "base/log.h"
#include "base/strings.h"
#include "k8s/probe_server.h"

namespace prism::extender {
namespace {

constexpr char kLog[] = "http-front";
// A TLS record's plaintext is at most 16 KiB: a read this large takes a whole record, so none is
// left decrypted inside OpenSSL where epoll cannot see it.
constexpr size_t kReadChunk = 16 * 1024 + 256;
// What one connection may read per round before the others get their turn.
constexpr size_t kMaxReadPerTurn = 256 * 1024;
constexpr int kMaxAcceptsPerRound = 256;
constexpr int kMaxEvents = 256;
constexpr size_t kMaxHeaderLines = 100;
// Deadlines are checked this often (so they hold to about this much).
constexpr absl::Duration kSweepInterval = absl::Milliseconds(100);
// After a refusal that left input unread: how long, and how much, is read and dropped before
// closing (closing with unread input resets the connection, which can discard the reply).
constexpr absl::Duration kLingerTime = absl::Seconds(1);
constexpr size_t kMaxLingerBytes = size_t{1} << 20;
// Epoll keys that are no connection's.
constexpr uint64_t kListenKey = 0;
constexpr uint64_t kWakeKey = 1;
constexpr uint64_t kFirstConnKey = 2;

std::string_view Reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return status < 400 ? "OK" : "Error";
  }
}

HttpReply ErrorReply(int status, std::string_view why) {
  // The text may quote the client (a path): bounded, and escaped by the JSON encoder.
  return HttpReply{status, nlohmann::json{{"Error", std::string(why.substr(0, 512))}}.dump(),
                   "application/json"};
}

std::string AddressText(const sockaddr_storage& addr) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr, text, sizeof(text));
  } else if (addr.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr, text,
              sizeof(text));
  } else {
    return "unknown";
  }
  return text;
}

// The end of the request head (after its empty line) in `in`, or npos while incomplete. `from`:
// where to look from (what was searched before, less 3: a trickled head is not searched again).
size_t HeadEnd(std::string_view in, size_t from) {
  from = from > 3 ? from - 3 : 0;
  const size_t crlf = in.find("\r\n\r\n", from);
  const size_t lf = in.find("\n\n", from);  // Bare LF line ends, as lenient servers accept.
  const size_t a = crlf == std::string_view::npos ? crlf : crlf + 4;
  const size_t b = lf == std::string_view::npos ? lf : lf + 2;
  return std::min(a, b);
}

struct RequestHead {
  std::string method;
  std::string path;  // The target without its query string.
  uint64_t length = 0;
  bool has_length = false;
  bool transfer_encoding = false;
  bool close = false;
  bool expect_continue = false;
};

bool IsDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Parses a request head (request line and header lines, up to its empty line). 0, or the status
// to refuse it with and why.
int ParseHead(std::string_view head, RequestHead* r, std::string* why) {
  std::vector<std::string_view> lines;
  for (size_t at = 0; at < head.size();) {
    size_t end = head.find('\n', at);
    if (end == std::string_view::npos) end = head.size();
    std::string_view line = head.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) break;
    lines.push_back(line);
    at = end + 1;
  }
  if (lines.empty()) {
    *why = "no request line";
    return 400;
  }
  if (lines.size() > kMaxHeaderLines + 1) {
    *why = StrCat("more than ", kMaxHeaderLines, " header lines");
    return 431;
  }
  const std::string_view line = lines[0];
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    *why = "malformed request line";
    return 400;
  }
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (method.empty() || method.size() > 16 ||
      !std::all_of(method.begin(), method.end(), [](char c) { return c >= 'A' && c <= 'Z'; })) {
    *why = "malformed method";
    return 400;
  }
  if (target.empty() || target[0] != '/') {
    *why = "the request target is not a path";
    return 400;
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    *why = "only HTTP/1.1 and HTTP/1.0";
    return 505;
  }
  r->method = std::string(method);
  r->path = std::string(target.substr(0, target.find('?')));
  r->close = version == "HTTP/1.0";  // No keep-alive negotiation for HTTP/1.0 clients.
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view h = lines[i];
    const size_t colon = h.find(':');
    if (h[0] == ' ' || h[0] == '\t' || colon == 0 || colon == std::string_view::npos) {
      *why = "malformed header line";  // Obsolete line folding included (RFC 9112 5.2).
      return 400;
    }
    const std::string_view name = h.substr(0, colon);
    if (name.find_first_of(" \t") != std::string_view::npos) {
      *why = "whitespace in a header name";  // RFC 9112 5.1: refused.
      return 400;
    }
    const std::string_view value = StripWhitespace(h.substr(colon + 1));
    if (EqualsIgnoreAsciiCase(name, "Content-Length")) {
      uint64_t n = 0;
      if (!IsDigits(value) || value.size() > 18) {
        *why = "Content-Length is not a number";
        return 400;
      }
      for (char c : value) n = n * 10 + static_cast<uint64_t>(c - '0');
      if (r->has_length && n != r->length) {
        *why = "two different Content-Length values";
        return 400;
      }
      r->has_length = true;
      r->length = n;
    } else if (EqualsIgnoreAsciiCase(name, "Transfer-Encoding")) {
      r->transfer_encoding = true;
    } else if (EqualsIgnoreAsciiCase(name, "Connection")) {
      for (std::string_view token : StrSplit(value, ',')) {
        if (EqualsIgnoreAsciiCase(StripWhitespace(token), "close")) r->close = true;
      }
    } else if (EqualsIgnoreAsciiCase(name, "Expect")) {
      r->expect_continue = EqualsIgnoreAsciiCase(value, "100-continue");
    }
  }
  return 0;
}

// Workers for handlers: `min` kept, another started while a job waits and none is idle, up to
// `max`. A job goes to the worker idle for the shortest time: one client's requests in sequence
// run on one thread, whose caches and malloc arena are warm (a body freed on a worker that never
// saw one before would leave its arena holding the pages).
class Pool {
 public:
  Pool(size_t min, size_t max) : min_(std::max<size_t>(1, min)), max_(std::max(min_, max)) {}
  ~Pool() { Shutdown(); }

  void Run(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return;
    if (!idle_.empty()) {
      Worker* w = idle_.back();
      idle_.pop_back();
      w->job = std::move(fn);
      w->wake.notify_one();
      return;
    }
    jobs_.push_back(std::move(fn));
    if (threads_.size() < max_) SpawnLocked();
  }
  void Start() {
    std::lock_guard<std::mutex> lock(mu_);
    while (threads_.size() < min_) SpawnLocked();
  }
  // Jobs not started are dropped; running ones finish. Idempotent.
  void Shutdown() {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
      jobs_.clear();
      threads.swap(threads_);
      for (const auto& w : workers_) w->wake.notify_one();
    }
    for (std::thread& t : threads) t.join();
  }

 private:
  struct Worker {
    std::condition_variable wake;
    std::function<void()> job;  // Handed over by Run.
  };

  void SpawnLocked() {
    workers_.push_back(std::make_unique<Worker>());
    threads_.emplace_back([this, w = workers_.back().get()] { Work(w); });
  }

  void Work(Worker* w) {
    std::unique_lock<std::mutex> lock(mu_);
    while (!shutdown_) {
      if (!w->job && !jobs_.empty()) {
        w->job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      if (!w->job) {
        idle_.push_back(w);
        w->wake.wait(lock, [&] { return w->job != nullptr || shutdown_; });
        continue;
      }
      std::function<void()> fn = std::move(w->job);
      w->job = nullptr;
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  const size_t min_;
  const size_t max_;
  std::mutex mu_;
  std::deque<std::function<void()>> jobs_;     // Waiting for a worker.
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<Worker*> idle_;                  // Most recently idle last.
  std::vector<std::thread> threads_;
  bool shutdown_ = false;
};

}  // namespace

class HttpFront::Loop {
 public:
  using Routes = std::map<std::string, Handler, std::less<>>;

  Loop(const Options& options, const Routes& routes, int listen_fd, int epoll_fd, int wake_fd)
      : options_(options),
        routes_(routes),
        listen_fd_(listen_fd),
        epoll_fd_(epoll_fd),
        wake_fd_(wake_fd),
        pool_(options.threads, options.max_threads) {}
  ~Loop() {
    pool_.Shutdown();
    while (!conns_.empty()) Close(conns_.begin());
    ::close(listen_fd_);
    ::close(epoll_fd_);
    ::close(wake_fd_);
  }

  void Stop() {
    stop_.store(true);
    Wake();
  }

  Counters counters() const {
    return Counters{accepted_.load(), refused_.load(), timed_out_.load(), requests_.load()};
  }

  void Run();

 private:
  enum class State {
    kHandshake,  // TLS handshake.
    kHead,       // Reading the request line and headers.
    kBody,       // Reading a body to hand to a worker.
    kDiscard,    // Reading a refused body, to drop it; `refusal` goes out after.
    kHandling,   // A worker has the request.
    kReplying,   // Writing the reply.
    kLinger,     // Reply sent, write side shut: dropping input until the client closes.
  };
  struct Conn {
    int fd = -1;
    SSL* ssl = nullptr;
    std::string client;  // The peer's address.
    State state = State::kHead;
    uint32_t events = 0;  // Registered with epoll.
    std::string in;       // Received, not yet consumed.
    std::string body;
    uint64_t body_left = 0;  // Of the body (kBody) or of what is dropped (kDiscard).
    size_t reserved = 0;     // Of max_buffered_body_bytes, for `body` while it is read.
    const Handler* handler = nullptr;  // The route of the body being read (kBody).
    std::string request;               // "METHOD path" of the request, for logs.
    HttpReply refusal;       // Sent once a dropped body is read (kDiscard).
    bool head_only = false;  // HEAD: the reply without its body.
    bool close_after = false;
    std::string out;  // To send: an interim 100 Continue, or the reply.
    size_t sent = 0;
    absl::Time since;     // Opened, or the last reply sent.
    absl::Time deadline;  // Closed at this time (not while kHandling).
    bool started = false;  // A byte of the current request arrived.
    size_t searched = 0;   // Of `in`, for the end of the head.
    size_t lingered = 0;
  };
  using ConnMap = std::map<uint64_t, Conn>;  // By key: oldest first.
  struct Done {
    uint64_t key = 0;
    size_t reserved = 0;
    HttpReply reply;
  };
  enum class Io { kProgress, kBlocked, kEof, kError };

  void Wake() {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }

  void SetInterest(uint64_t key, Conn& c, uint32_t events) {
    if (c.events == events) return;
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = key;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
    c.events = events;
  }

  // At most one warning per 10 s (a flood must not flood the log), with what was left out.
  void Note(const std::string& what) {
    const absl::Time now = absl::Now();
    if (now - last_note_ < absl::Seconds(10)) {
      ++unlogged_;
      return;
    }
    LogWarning(kLog, what,
               unlogged_ > 0 ? StrCat(" (and ", unlogged_, " more since the last warning)") : "");
    last_note_ = now;
    unlogged_ = 0;
  }

  static void InfoCallback(const SSL* ssl, int where, int ret) {
    // A fatal alert we send: a client without an acceptable certificate, say.
    if ((where & SSL_CB_WRITE_ALERT) != SSL_CB_WRITE_ALERT || (ret >> 8) != SSL3_AL_FATAL) return;
    auto* loop = static_cast<Loop*>(SSL_get_app_data(ssl));
    if (loop == nullptr || loop->current_ == nullptr) return;
    loop->Note(StrCat("TLS handshake from ", loop->current_->client,
                      " failed: ", SSL_alert_desc_string_long(ret)));
  }

  void Close(ConnMap::iterator it) {
    Conn& c = it->second;
    Release(c.reserved);
    if (auto n = per_client_.find(c.client); n != per_client_.end() && --n->second <= 0) {
      per_client_.erase(n);
    }
    if (c.ssl != nullptr) SSL_free(c.ssl);
    ::close(c.fd);  // Leaves the epoll set with it.
    conns_.erase(it);
  }
  void Close(uint64_t key) {
    if (auto it = conns_.find(key); it != conns_.end()) Close(it);
  }
  void Release(size_t n) { buffered_ -= std::min(buffered_, n); }

  void Accept(absl::Time now);
  void Sweep(absl::Time now);
  void Deliver();
  // Moves the connection on as far as it can without blocking. False: close it.
  bool Drive(uint64_t key, Conn& c);
  // Consumes buffered input; true when the state moved on.
  bool Consume(uint64_t key, Conn& c);
  void Dispatch(uint64_t key, Conn& c, const Handler* handler);
  void Reply(Conn& c, const HttpReply& reply, bool close);
  // A refusal whose body stays unread when `close` (the connection cannot go on), or is read
  // and dropped first (`drop` bytes) so the client, still sending, reads it.
  void Refuse(Conn& c, int status, std::string_view why, bool close, uint64_t drop = 0);
  Io Handshake(uint64_t key, Conn& c);
  Io Read(uint64_t key, Conn& c, size_t* budget);
  Io Write(uint64_t key, Conn& c);
  bool Linger(uint64_t key, Conn& c);
  Io SslResult(uint64_t key, Conn& c, int ret);
  void ConsumeSigpipe();

  const Options options_;
  const Routes& routes_;
  const int listen_fd_;
  const int epoll_fd_;
  const int wake_fd_;
  std::atomic<bool> stop_{false};
  // Front thread only.
  ConnMap conns_;
  uint64_t next_key_ = kFirstConnKey;
  absl::flat_hash_map<std::string, int> per_client_;
  size_t buffered_ = 0;
  std::vector<uint64_t> again_;  // Stopped at their read budget: driven again next round.
  bool accepting_ = true;
  absl::Time accept_paused_until_ = absl::InfinitePast();
  absl::Time last_note_ = absl::InfinitePast();
  uint64_t unlogged_ = 0;
  Conn* current_ = nullptr;  // The connection being driven (for TLS callbacks).
  // Shared with the workers.
  std::mutex mu_;
  std::vector<Done> done_;
  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> timed_out_{0};
  std::atomic<uint64_t> requests_{0};
  Pool pool_;  // Last: its workers use the members above.
};

void HttpFront::Loop::Run() {
  // A write to a socket the peer closed raises SIGPIPE; OpenSSL writes with write(2), without
  // MSG_NOSIGNAL. Blocked on this thread, the signal stays pending here (consumed after each
  // failed write) and the write fails with EPIPE instead.
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  pool_.Start();
  epoll_event events[kMaxEvents];
  absl::Time next_sweep = absl::Now() + kSweepInterval;
  bool draining = false;
  absl::Time drain_until;
  while (true) {
    const absl::Time now = absl::Now();
    if (stop_.load() && !draining) {
      // Stop: no new connections; those between requests close now, those with a request
      // in a handler or a reply on its way close once it is sent (at most idle_timeout).
      draining = true;
      drain_until = now + options_.idle_timeout;
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
      for (auto it = conns_.begin(); it != conns_.end();) {
        auto here = it++;
        State s = here->second.state;
        if (s == State::kHandling || s == State::kReplying) {
          here->second.close_after = true;
        } else {
          Close(here);
        }
      }
    }
    if (draining && (now >= drain_until ||
                     std::all_of(conns_.begin(), conns_.end(), [](const auto& kv) {
                       return kv.second.state == State::kLinger;  // Replied: nothing to wait for.
                     }))) {
      break;
    }
    const int timeout_ms =
        again_.empty()
            ? static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(next_sweep - now)) + 1)
            : 0;
    const int n = ::epoll_wait(epoll_fd_, events, kMaxEvents, timeout_ms);
    if (n < 0 && errno != EINTR) {
      LogError(kLog, "epoll_wait: ", std::strerror(errno));
      break;
    }
    bool accept = false;
    for (int i = 0; i < n; ++i) {
      const uint64_t key = events[i].data.u64;
      if (key == kListenKey) {
        accept = true;
        continue;
      }
      if (key == kWakeKey) {
        uint64_t count = 0;
        (void)!::read(wake_fd_, &count, sizeof(count));
        continue;
      }
      auto it = conns_.find(key);
      if (it == conns_.end()) continue;
      Conn& c = it->second;
      if (c.state == State::kHandling) {
        // Only a hangup is reported while a worker has the request: nobody will read the reply.
        if ((events[i].events & (EPOLLHUP | EPOLLERR)) != 0) Close(it);
        continue;
      }
      if (!Drive(key, c)) Close(it);
    }
    Deliver();
    if (!again_.empty()) {
      std::vector<uint64_t> again;
      again.swap(again_);
      for (uint64_t key : again) {
        auto it = conns_.find(key);
        if (it != conns_.end() && !Drive(key, it->second)) Close(it);
      }
    }
    const absl::Time after = absl::Now();
    if (after >= next_sweep) {
      Sweep(after);
      next_sweep = after + kSweepInterval;
    }
    if (accept && !draining) Accept(after);
  }
  pool_.Shutdown();
}

void HttpFront::Loop::Accept(absl::Time now) {
  for (int i = 0; i < kMaxAcceptsPerRound; ++i) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: the oldest connection without a request in a handler makes room
        // (the likeliest to be idle or slow); with none, stop accepting for a moment rather
        // than spin on a listening socket that stays readable.
        auto victim = std::find_if(conns_.begin(), conns_.end(), [](const auto& kv) {
          return kv.second.state != State::kHandling && kv.second.state != State::kReplying;
        });
        if (victim != conns_.end()) {
          Note(StrCat("out of file descriptors: closed the oldest connection, from ",
                      victim->second.client));
          Close(victim);
          continue;
        }
        Note("out of file descriptors: accepting paused for 100 ms");
        epoll_event ev{};
        ev.data.u64 = kListenKey;
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
        accepting_ = false;
        accept_paused_until_ = now + absl::Milliseconds(100);
      }
      return;  // EAGAIN: nothing more to accept.
    }
    accepted_.fetch_add(1, std::memory_order_relaxed);
    std::string client = AddressText(addr);
    const auto open = per_client_.find(client);
    if (options_.max_connections_per_client > 0 && open != per_client_.end() &&
        open->second >= options_.max_connections_per_client) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      ::close(fd);
      Note(StrCat("refused a connection from ", client, ": it has ",
                  options_.max_connections_per_client,
                  " open (--max-connections-per-client)"));
      continue;
    }
    // Go's transport sets TCP_NODELAY; without it small replies wait for delayed ACKs (~40 ms).
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Conn c;
    c.fd = fd;
    c.client = std::move(client);
    c.since = now;
    c.deadline = now + options_.request_timeout;
    if (options_.tls != nullptr) {
      c.ssl = SSL_new(options_.tls);
      if (c.ssl == nullptr || SSL_set_fd(c.ssl, fd) != 1) {
        LogError(kLog, "TLS: cannot set up a connection");
        if (c.ssl != nullptr) SSL_free(c.ssl);
        ::close(fd);
        continue;
      }
      SSL_set_accept_state(c.ssl);
      // Partial writes (a reply goes out as the socket takes it), and no buffers kept while a
      // connection is idle (thousands of idle connections cost their descriptors, not 34 KiB
      // each).
      SSL_set_mode(c.ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_RELEASE_BUFFERS);
      SSL_set_app_data(c.ssl, this);
      SSL_set_info_callback(c.ssl, InfoCallback);
      c.state = State::kHandshake;
    }
    ++per_client_[c.client];  // Close() counts it down.
    const uint64_t key = next_key_++;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = key;
    c.events = EPOLLIN;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      LogError(kLog, "epoll_ctl: ", std::strerror(errno));
      auto it = conns_.emplace(key, std::move(c)).first;
      Close(it);
      continue;
    }
    conns_.emplace(key, std::move(c));
  }
}

void HttpFront::Loop::Sweep(absl::Time now) {
  if (!accepting_ && now >= accept_paused_until_) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenKey;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
    accepting_ = true;
  }
  for (auto it = conns_.begin(); it != conns_.end();) {
    auto here = it++;
    Conn& c = here->second;
    if (c.state == State::kHandling || c.deadline > now) continue;
    if (c.state != State::kLinger) {
      timed_out_.fetch_add(1, std::memory_order_relaxed);
      const bool idle = c.state == State::kHead && !c.started;
      Note(StrCat("closed a connection from ", c.client,
                  c.state == State::kReplying ? ": its reply was not taken in "
                  : idle                      ? ": no request in "
                                              : ": no whole request in ",
                  absl::FormatDuration(c.state == State::kReplying ? options_.request_timeout
                                                                   : c.deadline - c.since)));
    }
    Close(here);
  }
}

void HttpFront::Loop::Deliver() {
  std::vector<Done> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done.swap(done_);
  }
  for (Done& d : done) {
    Release(d.reserved);
    auto it = conns_.find(d.key);
    if (it == conns_.end() || it->second.state != State::kHandling) continue;  // It left.
    Reply(it->second, d.reply, it->second.close_after);
    if (!Drive(d.key, it->second)) Close(it);
  }
}

bool HttpFront::Loop::Drive(uint64_t key, Conn& c) {
  current_ = &c;
  size_t budget = kMaxReadPerTurn;
  bool open = true;
  while (open) {
    if (c.sent < c.out.size()) {
      const Io io = Write(key, c);
      if (io == Io::kBlocked) break;
      if (io != Io::kProgress) {
        open = false;
        break;
      }
      c.out = std::string();  // A reply may be megabytes: not kept while the connection idles.
      c.sent = 0;
      if (c.state == State::kReplying) {
        if (c.close_after) {
          // Shut the write side, then drop what the client still sends for a moment: closing
          // with unread input would reset the connection, which can discard the reply.
          if (c.ssl != nullptr) SSL_shutdown(c.ssl);  // close_notify, as far as it goes.
          ::shutdown(c.fd, SHUT_WR);
          c.state = State::kLinger;
          c.deadline = absl::Now() + kLingerTime;
          SetInterest(key, c, EPOLLIN);
          continue;
        }
        const absl::Time now = absl::Now();
        c.state = State::kHead;
        c.since = now;
        c.started = false;
        c.head_only = false;
        c.deadline = now + options_.idle_timeout;
      }
    }
    if (c.state == State::kHandling) {
      SetInterest(key, c, 0);  // Hangups are still reported.
      break;
    }
    if (c.state == State::kLinger) {
      open = Linger(key, c);
      break;
    }
    if (c.state == State::kHandshake) {
      const Io io = Handshake(key, c);
      if (io == Io::kBlocked) break;
      if (io != Io::kProgress) open = false;
      continue;
    }
    if (Consume(key, c)) continue;  // Perhaps with a reply (or 100 Continue) to send.
    if (budget == 0) {
      again_.push_back(key);
      break;
    }
    const Io io = Read(key, c, &budget);
    if (io == Io::kBlocked) break;
    // End of input before a whole request: nobody to answer.
    if (io != Io::kProgress) open = false;
  }
  current_ = nullptr;
  return open;
}

bool HttpFront::Loop::Consume(uint64_t key, Conn& c) {
  switch (c.state) {
    case State::kHead: {
      if (!c.started) {
        // Empty lines before a request line are allowed (RFC 9112 2.2).
        const size_t skip = c.in.find_first_not_of("\r\n");
        c.in.erase(0, skip == std::string::npos ? c.in.size() : skip);
        if (c.in.empty()) return false;
        c.started = true;
        c.deadline = c.since + options_.request_timeout;
      }
      const size_t end = HeadEnd(c.in, c.searched);
      c.searched = c.in.size();
      if (end == std::string::npos || end > options_.max_header_bytes) {
        if (end == std::string::npos && c.in.size() <= options_.max_header_bytes) return false;
        Refuse(c, 431, StrCat("the request head is over ", options_.max_header_bytes, " bytes"),
               /*close=*/true);
        return true;
      }
      RequestHead head;
      std::string why;
      const int status = ParseHead(std::string_view(c.in).substr(0, end), &head, &why);
      c.in.erase(0, end);
      c.searched = 0;
      if (status != 0) {
        Refuse(c, status, why, /*close=*/true);
        return true;
      }
      c.close_after = head.close;
      c.head_only = head.method == "HEAD";
      c.request = StrCat(head.method, " ", head.path.substr(0, 256));
      if (head.transfer_encoding) {
        // Go's net/http client declares the length of the bodies Kubernetes sends (see the
        // header comment); a chunked body would need a parser of its own, bounded.
        Refuse(c, 411, "a body needs Content-Length (no Transfer-Encoding)", /*close=*/true);
        return true;
      }
      const uint64_t length = head.length;
      const uint64_t max = options_.max_body_bytes;
      auto route = routes_.find(StrCat(c.head_only ? "GET" : head.method, " ", head.path));
      if (length > 2 * max) {
        Refuse(c, 413, StrCat("the request body (", length, " bytes) is over the limit of ", max,
                              " bytes"),
               /*close=*/true);
      } else if (length > max) {
        Refuse(c, 413, StrCat("the request body (", length, " bytes) is over the limit of ", max,
                              " bytes"),
               /*close=*/false, length);
      } else if (route == routes_.end()) {
        Refuse(c, 404, StrCat("no such path: ", head.path.substr(0, 256)), /*close=*/false,
               length);
      } else if (buffered_ + length > options_.max_buffered_body_bytes) {
        Refuse(c, 503, "too many request bodies are being read at once; retry", /*close=*/true);
      } else {
        buffered_ += length;
        c.reserved = static_cast<size_t>(length);
        c.body.clear();
        c.body.reserve(c.reserved);
        c.body_left = length;
        c.state = State::kBody;
        c.handler = &route->second;
        if (head.expect_continue && length > c.in.size()) {
          c.out = "HTTP/1.1 100 Continue\r\n\r\n";
          c.sent = 0;
        }
        if (length == 0) Dispatch(key, c, c.handler);
      }
      return true;
    }
    case State::kBody:
    case State::kDiscard: {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(c.body_left, c.in.size()));
      if (c.state == State::kBody) c.body.append(c.in, 0, take);
      c.in.erase(0, take);
      c.body_left -= take;
      if (c.body_left > 0) return take > 0;
      if (c.state == State::kBody) {
        Dispatch(key, c, c.handler);
      } else {
        Reply(c, c.refusal, c.close_after);
      }
      return true;
    }
    default:
      return false;
  }
}

void HttpFront::Loop::Dispatch(uint64_t key, Conn& c, const Handler* handler) {
  c.state = State::kHandling;
  c.deadline = absl::InfiniteFuture();
  requests_.fetch_add(1, std::memory_order_relaxed);
  const size_t reserved = c.reserved;
  c.reserved = 0;  // The job's now: released when its reply comes back.
  pool_.Run([this, key, reserved, handler, request = c.request, body = std::move(c.body)] {
    HttpReply reply;
    try {
      reply = (*handler)(body);
    } catch (const std::exception& e) {
      // Handlers report errors in their replies; an exception reaching here is a bug. Logged,
      // and answered without its text.
      LogError(kLog, QuoteBounded(request), ": unhandled exception: ", e.what());
      reply = ErrorReply(500, "internal error");
    } catch (...) {
      LogError(kLog, QuoteBounded(request), ": unhandled exception");
      reply = ErrorReply(500, "internal error");
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_.push_back(Done{key, reserved, std::move(reply)});
    }
    Wake();
  });
  c.body = std::string();
  if (c.in.empty()) c.in = std::string();  // Headers may have grown it to max_header_bytes.
}

void HttpFront::Loop::Reply(Conn& c, const HttpReply& reply, bool close) {
  c.close_after = close || stop_.load();
  c.out = StrCat("HTTP/1.1 ", reply.status, " ", Reason(reply.status),
                 "\r\nContent-Type: ", reply.content_type,
                 "\r\nContent-Length: ", reply.body.size(),
                 c.close_after ? "\r\nConnection: close" : "", "\r\n\r\n");
  if (!c.head_only) c.out.append(reply.body);
  c.sent = 0;
  c.state = State::kReplying;
  c.deadline = absl::Now() + options_.request_timeout;
}

void HttpFront::Loop::Refuse(Conn& c, int status, std::string_view why, bool close,
                             uint64_t drop) {
  c.body_left = drop;
  if (close || drop == 0) {
    Reply(c, ErrorReply(status, why), close || c.close_after);
    return;
  }
  c.refusal = ErrorReply(status, why);
  c.state = State::kDiscard;
}

HttpFront::Loop::Io HttpFront::Loop::SslResult(uint64_t key, Conn& c, int ret) {
  const int error = SSL_get_error(c.ssl, ret);
  if (error == SSL_ERROR_WANT_READ) {
    SetInterest(key, c, EPOLLIN);
    return Io::kBlocked;
  }
  if (error == SSL_ERROR_WANT_WRITE) {
    SetInterest(key, c, EPOLLOUT);
    return Io::kBlocked;
  }
  ERR_clear_error();
  if (error == SSL_ERROR_SYSCALL && errno == EPIPE) ConsumeSigpipe();
  return error == SSL_ERROR_ZERO_RETURN ? Io::kEof : Io::kError;
}

void HttpFront::Loop::ConsumeSigpipe() {
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  const timespec zero{};
  while (sigtimedwait(&pipe, nullptr, &zero) == SIGPIPE) {
  }
}

HttpFront::Loop::Io HttpFront::Loop::Handshake(uint64_t key, Conn& c) {
  ERR_clear_error();
  const int ret = SSL_do_handshake(c.ssl);
  if (ret == 1) {
    c.state = State::kHead;
    return Io::kProgress;
  }
  return SslResult(key, c, ret);
}

HttpFront::Loop::Io HttpFront::Loop::Read(uint64_t key, Conn& c, size_t* budget) {
  char buf[kReadChunk];
  while (true) {
    if (c.ssl != nullptr) {
      ERR_clear_error();
      const int n = SSL_read(c.ssl, buf, sizeof(buf));
      if (n <= 0) return SslResult(key, c, n);
      c.in.append(buf, static_cast<size_t>(n));
      *budget -= std::min(*budget, static_cast<size_t>(n));
      return Io::kProgress;
    }
    const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      *budget -= std::min(*budget, static_cast<size_t>(n));
      return Io::kProgress;
    }
    if (n == 0) return Io::kEof;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      SetInterest(key, c, EPOLLIN);
      return Io::kBlocked;
    }
    return Io::kError;
  }
}

HttpFront::Loop::Io HttpFront::Loop::Write(uint64_t key, Conn& c) {
  while (c.sent < c.out.size()) {
    const size_t left = c.out.size() - c.sent;
    if (c.ssl != nullptr) {
      ERR_clear_error();
      const int n = SSL_write(c.ssl, c.out.data() + c.sent,
                              static_cast<int>(std::min<size_t>(left, 1 << 30)));
      if (n <= 0) return SslResult(key, c, n);
      c.sent += static_cast<size_t>(n);
      continue;
    }
    const ssize_t n = ::send(c.fd, c.out.data() + c.sent, left, MSG_NOSIGNAL);
    if (n > 0) {
      c.sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      SetInterest(key, c, EPOLLOUT);
      return Io::kBlocked;
    }
    return Io::kError;
  }
  return Io::kProgress;
}

bool HttpFront::Loop::Linger(uint64_t key, Conn& c) {
  char buf[kReadChunk];
  while (true) {
    const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
    if (n == 0) return false;  // The client closed: done.
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        SetInterest(key, c, EPOLLIN);
        return true;
      }
      return false;
    }
    c.lingered += static_cast<size_t>(n);
    if (c.lingered > kMaxLingerBytes) return false;
  }
}

HttpFront::HttpFront(Options options) : options_(std::move(options)) {
  if (options_.tls != nullptr) SSL_CTX_up_ref(options_.tls);
}

HttpFront::~HttpFront() {
  Stop();
  if (options_.tls != nullptr) SSL_CTX_free(options_.tls);
}

void HttpFront::Handle(const std::string& method, const std::string& path, Handler handler) {
  routes_[StrCat(method, " ", path)] = std::move(handler);
}

absl::Status HttpFront::Start() {
  if (loop_ != nullptr) return absl::FailedPreconditionError("already started");
  // Each connection is a descriptor, and the soft limit is often 1,024: raise it to the hard
  // limit, as Go's runtime does at start (since Go 1.19) for the same reason.
  if (rlimit lim{}; ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  absl::StatusOr<int> listening = k8s::ListenTcp(options_.host, options_.port, &port_);
  if (!listening.ok()) return listening.status();
  const int fd = *listening;
  const int epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  const int wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event listen_ev{};
  listen_ev.events = EPOLLIN;
  listen_ev.data.u64 = kListenKey;
  epoll_event wake_ev{};
  wake_ev.events = EPOLLIN;
  wake_ev.data.u64 = kWakeKey;
  if (epoll_fd < 0 || wake_fd < 0 || ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &listen_ev) != 0 ||
      ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &wake_ev) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    if (epoll_fd >= 0) ::close(epoll_fd);
    if (wake_fd >= 0) ::close(wake_fd);
    return absl::InternalError(StrCat("cannot set up epoll: ", why));
  }
  loop_ = std::make_unique<Loop>(options_, routes_, fd, epoll_fd, wake_fd);
  thread_ = std::thread([loop = loop_.get()] { loop->Run(); });
  return absl::OkStatus();
}

HttpFront::Counters HttpFront::counters() const {
  return loop_ == nullptr ? Counters{} : loop_->counters();
}

void HttpFront::Stop() {
  if (loop_ == nullptr) return;
  loop_->Stop();
  if (thread_.joinable()) thread_.join();
  loop_.reset();
}

}  // namespace prism::extender

#include "extender/http_front.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "base/strings.h"

namespace prism::extender {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

struct Response {
  std::string head;  // Status line and headers.
  std::string body;
  bool ok = false;  // A whole response arrived.
};

// A raw HTTP/1.1 client connection: what is sent is sent as it is.
class Client {
 public:
  explicit Client(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval patience{};
    patience.tv_sec = 10;
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof(patience));
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~Client() { close(fd_); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool connected() const { return connected_; }

  void Send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return;
      data.remove_prefix(static_cast<size_t>(n));
    }
  }

  // One response (its Content-Length body; none for HEAD); what follows stays for the next.
  Response Read(bool head_request = false) {
    Response r;
    while (true) {
      const size_t end = pending_.find("\r\n\r\n");
      if (end != std::string::npos) {
        r.head = pending_.substr(0, end);
        const size_t at = r.head.find("Content-Length: ");
        const size_t length =
            at == std::string::npos || head_request ? 0 : std::stoul(r.head.substr(at + 16));
        if (pending_.size() >= end + 4 + length) {
          r.body = pending_.substr(end + 4, length);
          pending_.erase(0, end + 4 + length);
          r.ok = true;
          return r;
        }
      }
      char buf[4096];
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) return r;
      pending_.append(buf, static_cast<size_t>(n));
    }
  }

  // Whether the server closed the connection (end of file or a reset) within 10 s.
  bool Closed() {
    char buf[4096];
    while (true) {
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n == 0) return true;
      if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
    }
  }

 private:
  const int fd_;
  bool connected_ = false;
  std::string pending_;
};

std::string Post(std::string_view path, std::string_view body, std::string_view extra = "") {
  return StrCat("POST ", path, " HTTP/1.1\r\nHost: x\r\nContent-Length: ", body.size(), "\r\n",
                extra, "\r\n", body);
}

class HttpFrontTest : public ::testing::Test {
 protected:
  void Serve(HttpFront::Options o = {}) {
    o.host = "127.0.0.1";
    o.port = 0;
    front_ = std::make_unique<HttpFront>(o);
    front_->Handle("POST", "/echo", [](std::string_view body) {
      return HttpReply{200, StrCat("echo:", body), "text/plain"};
    });
    front_->Handle("GET", "/healthz", [](std::string_view) {
      return HttpReply{200, "ok", "text/plain"};
    });
    front_->Handle("POST", "/throw",
                   [](std::string_view) -> HttpReply { throw std::runtime_error("secret"); });
    front_->Handle("POST", "/slow", [this](std::string_view) {
      ++slow_started_;
      absl::SleepFor(absl::Milliseconds(300));
      return HttpReply{200, "slow", "text/plain"};
    });
    ASSERT_TRUE(front_->Start().ok());
  }

  std::unique_ptr<HttpFront> front_;
  std::atomic<int> slow_started_{0};
};

TEST_F(HttpFrontTest, KeepAlivePipeliningAndHead) {
  Serve();
  Client c(front_->port());
  ASSERT_TRUE(c.connected());
  // Two requests in one write: answered in order on the same connection.
  c.Send(Post("/echo", "one") + Post("/echo?x=1", "two"));
  Response a = c.Read();
  Response b = c.Read();
  ASSERT_TRUE(a.ok && b.ok);
  EXPECT_THAT(a.head, StartsWith("HTTP/1.1 200 OK"));
  EXPECT_EQ(a.body, "echo:one");
  EXPECT_EQ(b.body, "echo:two");
  EXPECT_THAT(a.head, Not(HasSubstr("Connection: close")));
  c.Send("HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  Response h = c.Read(/*head_request=*/true);
  ASSERT_TRUE(h.ok);
  EXPECT_THAT(h.head, HasSubstr("Content-Length: 2"));
  c.Send("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  Response g = c.Read();
  ASSERT_TRUE(g.ok);
  EXPECT_EQ(g.body, "ok");
  EXPECT_THAT(g.head, HasSubstr("Connection: close"));
  EXPECT_TRUE(c.Closed());
  EXPECT_EQ(front_->counters().requests, 4u);
}

TEST_F(HttpFrontTest, RefusalsKeepTheConnectionWhenTheBodyWasRead) {
  HttpFront::Options o;
  o.max_body_bytes = 1000;
  Serve(o);
  Client c(front_->port());
  // An unknown path, with a body: 404, the body skipped, the connection goes on.
  c.Send(Post("/nope", "abc") + "GET /nope HTTP/1.1\r\n\r\n" + Post("/echo", "x"));
  Response r = c.Read();
  ASSERT_TRUE(r.ok);
  EXPECT_THAT(r.head, StartsWith("HTTP/1.1 404"));
  EXPECT_THAT(r.body, HasSubstr("no such path: /nope"));
  EXPECT_THAT(c.Read().head, StartsWith("HTTP/1.1 404"));
  EXPECT_EQ(c.Read().body, "echo:x");
  // Over the limit, under twice it: read, dropped, 413, and the connection goes on.
  c.Send(Post("/echo", std::string(1500, 'a')) + Post("/echo", "y"));
  r = c.Read();
  EXPECT_THAT(r.head, StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(r.body, HasSubstr("over the limit of 1000 bytes"));
  EXPECT_EQ(c.Read().body, "echo:y");
  // Over twice the limit: refused before the body is read, the connection closed.
  c.Send("POST /echo HTTP/1.1\r\nContent-Length: 2001\r\n\r\n");
  r = c.Read();
  EXPECT_THAT(r.head, StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(r.head, HasSubstr("Connection: close"));
  EXPECT_TRUE(c.Closed());
}

TEST_F(HttpFrontTest, MalformedOrUnboundedRequestsAreRefusedAndClosed) {
  HttpFront::Options o;
  o.max_header_bytes = 2048;
  Serve(o);
  const std::string long_header = StrCat("GET /healthz HTTP/1.1\r\nX-A: ", std::string(4096, 'a'));
  for (const auto& [request, status] : std::vector<std::pair<std::string, std::string>>{
           {"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "411"},
           {long_header + "\r\n\r\n", "431"},
           {long_header, "431"},  // Not even complete.
           {"POST /echo HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "400"},
           {"POST /echo HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "400"},
           {"GET /healthz HTTP/1.1\r\n folded: x\r\n\r\n", "400"},
           {"GET http://x/healthz HTTP/1.1\r\n\r\n", "400"},
           {"GET /healthz HTTP/2.0\r\n\r\n", "505"},
           {"get /healthz HTTP/1.1\r\n\r\n", "400"},
       }) {
    Client c(front_->port());
    c.Send(request);
    Response r = c.Read();
    EXPECT_THAT(r.head, StartsWith("HTTP/1.1 " + status)) << request.substr(0, 60);
    EXPECT_THAT(r.head, HasSubstr("Connection: close")) << request.substr(0, 60);
    EXPECT_TRUE(c.Closed()) << request.substr(0, 60);
  }
}

TEST_F(HttpFrontTest, BodiesShareTheBufferBudget) {
  HttpFront::Options o;
  o.max_body_bytes = 1000;
  o.max_buffered_body_bytes = 1500;
  Serve(o);
  Client a(front_->port());
  a.Send(StrCat("POST /echo HTTP/1.1\r\nContent-Length: 1000\r\n\r\n", std::string(10, 'a')));
  absl::SleepFor(absl::Milliseconds(100));
  Client b(front_->port());
  b.Send(Post("/echo", std::string(600, 'b')));
  EXPECT_THAT(b.Read().head, StartsWith("HTTP/1.1 503"));
  EXPECT_TRUE(b.Closed());
  // The first finishes its body: served, and its share is back.
  a.Send(std::string(990, 'a'));
  EXPECT_THAT(a.Read().head, StartsWith("HTTP/1.1 200"));
  Client c(front_->port());
  c.Send(Post("/echo", std::string(600, 'c')));
  EXPECT_THAT(c.Read().head, StartsWith("HTTP/1.1 200"));
}

TEST_F(HttpFrontTest, ExpectContinueGetsAnInterimResponse) {
  Serve();
  Client c(front_->port());
  c.Send("POST /echo HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_THAT(c.Read().head, StartsWith("HTTP/1.1 100 Continue"));
  c.Send("abc");
  EXPECT_EQ(c.Read().body, "echo:abc");
}

TEST_F(HttpFrontTest, AHandlerExceptionIsA500WithoutItsText) {
  Serve();
  Client c(front_->port());
  c.Send(Post("/throw", "") + Post("/echo", "after"));
  Response r = c.Read();
  EXPECT_THAT(r.head, StartsWith("HTTP/1.1 500"));
  EXPECT_THAT(r.body, Not(HasSubstr("secret")));
  EXPECT_EQ(c.Read().body, "echo:after");
}

TEST_F(HttpFrontTest, DeadlinesCloseSlowAndIdleConnections) {
  HttpFront::Options o;
  o.request_timeout = absl::Seconds(1);
  o.idle_timeout = absl::Seconds(1);
  Serve(o);
  Client idle(front_->port());
  Client slow(front_->port());
  const absl::Time start = absl::Now();
  for (char ch : std::string("GET /heal")) {  // A byte every 200 ms.
    slow.Send(std::string(1, ch));
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_TRUE(idle.Closed());
  EXPECT_TRUE(slow.Closed());
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  EXPECT_EQ(front_->counters().timed_out, 2u);
}

TEST_F(HttpFrontTest, PerClientCapClosesOneMoreAtAccept) {
  HttpFront::Options o;
  o.max_connections_per_client = 2;
  Serve(o);
  auto a = std::make_unique<Client>(front_->port());
  Client b(front_->port());
  absl::SleepFor(absl::Milliseconds(100));
  Client c(front_->port());
  EXPECT_TRUE(c.Closed());
  EXPECT_EQ(front_->counters().refused_per_client, 1u);
  a.reset();
  absl::SleepFor(absl::Milliseconds(100));
  Client d(front_->port());
  d.Send(Post("/echo", "room"));
  EXPECT_EQ(d.Read().body, "echo:room");
}

TEST_F(HttpFrontTest, StopLetsARequestInAHandlerFinish) {
  Serve();
  Client c(front_->port());
  c.Send(Post("/slow", ""));
  while (slow_started_.load() == 0) absl::SleepFor(absl::Milliseconds(5));
  Client idle(front_->port());
  front_->Stop();
  Response r = c.Read();
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.body, "slow");
  EXPECT_THAT(r.head, HasSubstr("Connection: close"));
}

}  // namespace
}  // namespace prism::extender

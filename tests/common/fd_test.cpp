// Fd: one owner per descriptor, closed exactly once.
#include "common/fd.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <type_traits>
#include <utility>

using ddp::Fd;

namespace {

bool is_open(int fd) {
  return ::fcntl(fd, F_GETFD) != -1;
}

// Both ends of a fresh pipe, each owned by an Fd.
std::pair<Fd, Fd> make_pipe() {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  return {Fd(fds[0]), Fd(fds[1])};
}

}  // namespace

static_assert(!std::is_copy_constructible_v<Fd> && !std::is_copy_assignable_v<Fd>);
static_assert(std::is_nothrow_move_constructible_v<Fd> && std::is_nothrow_move_assignable_v<Fd>);

TEST_CASE("fd: an empty Fd owns nothing", "[fd]") {
  const Fd none;
  CHECK_FALSE(none.valid());
  CHECK_FALSE(static_cast<bool>(none));
  CHECK(none.get() == -1);
  CHECK(Fd(-1).get() == -1);
}

TEST_CASE("fd: the descriptor is closed when its owner goes", "[fd]") {
  int raw = -1;
  {
    auto [r, w] = make_pipe();
    raw = r.get();
    CHECK(r.valid());
    CHECK(is_open(raw));
  }
  CHECK_FALSE(is_open(raw));
}

TEST_CASE("fd: moving hands ownership over, the source owns nothing", "[fd]") {
  auto [r, w] = make_pipe();
  const int raw = r.get();
  Fd moved(std::move(r));
  CHECK(moved.get() == raw);
  CHECK_FALSE(r.valid());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  CHECK(is_open(raw));

  // Move assignment closes what the target held before.
  const int old_w = w.get();
  w = std::move(moved);
  CHECK(w.get() == raw);
  CHECK_FALSE(is_open(old_w));
  CHECK(is_open(raw));
}

TEST_CASE("fd: release gives up ownership, reset and close close", "[fd]") {
  auto [r, w] = make_pipe();
  const int raw = r.release();
  CHECK_FALSE(r.valid());
  CHECK(is_open(raw));  // not closed by release()
  r.reset(raw);         // owned again
  CHECK(r.get() == raw);
  r.reset();
  CHECK_FALSE(is_open(raw));
  CHECK_FALSE(r.valid());

  const int raw_w = w.get();
  CHECK(w.close() == 0);
  CHECK_FALSE(w.valid());
  CHECK_FALSE(is_open(raw_w));
  CHECK(w.close() == 0);  // nothing held: nothing to close
}

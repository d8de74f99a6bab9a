#include "launcher/output/console.hpp"

#include <poll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <mutex>
#include <thread>

#include "launcher/output/line_collapser.hpp"
#include "launcher/output/live_area.hpp"

namespace ddp::launcher {
namespace {

uint64_t lines_in(std::string_view text) {
  return std::max<uint64_t>(1, static_cast<uint64_t>(std::count(text.begin(), text.end(), '\n')));
}

// The terminal's size (columns, rows); 80x24 when fd is not one.
std::pair<int, int> terminal_size(int fd) {
  winsize size{};
  if (::ioctl(fd, TIOCGWINSZ, &size) != 0 || size.ws_col == 0 || size.ws_row == 0) {
    return {80, 24};
  }
  return {size.ws_col, size.ws_row};
}

}  // namespace

struct Console::Shared {
  int fd = -1;
  std::string hint;
  size_t max_queued = kConsoleQueueBytes;
  std::chrono::milliseconds stall = kConsoleStall;
  SlowConsole mode = SlowConsole::kDrop;
  std::function<void()> on_room;  // kBlock: called once a congested queue drained to half
  bool congested = false;         // kBlock: reached the bound since the last on_room
  int open_source = -1;           // the source whose line is open on the console (-1: none)
  bool pending_cr = false;        // ...and it ended with '\r', not yet written

  std::mutex mutex;
  std::condition_variable wake;      // the writer waits here for lines or the end
  std::condition_variable progress;  // drain() waits here for the writer
  std::deque<std::string> queue;
  size_t queued_bytes = 0;                            // queue plus the batch being written
  bool writing = false;                               // the writer holds a batch outside the lock
  std::chrono::steady_clock::time_point write_began;  // when the batch being written was taken
  uint64_t batches = 0;      // batches written so far: drain()'s measure of progress
  bool overflowing = false;  // dropping until the queue has drained
  bool broken = false;       // a write failed (EPIPE: nobody reads); everything is dropped
  bool closed = false;       // close() ran: later writes are dropped, the writer ends
  ConsoleDrops total;        // every drop
  ConsoleDrops unreported;   // drops no notice has told about yet
  std::atomic<bool> abandoned{false};  // close() gave up on a writer stuck in write(2)
  std::thread writer;
  // Identical lines of several ranks held for their window (null: not collapsing).
  std::unique_ptr<LineCollapser> collapser;
  GroupPrefix group_prefix;
  // The live area at the bottom of a terminal (live: kept at all).
  bool live = false;
  LiveArea area;
  std::chrono::steady_clock::time_point drawn_at;  // the live area's last redraw

  // Ends an open line of a source, the mutex held; the text that follows starts a line.
  std::string end_open_line() {
    if (open_source == -1) return "";
    open_source = -1;
    pending_cr = false;
    return "\n";
  }

  // Queues released collapsed lines, each with its group's prefix, the mutex held.
  void enqueue_collapsed(const std::vector<CollapsedLine>& lines) {
    for (const auto& line : lines) {
      std::string out = end_open_line();
      if (group_prefix) out += group_prefix(line.ranks);
      out += line.text;
      out += '\n';
      enqueue(out);
    }
  }

  // Queues text as Console::write() describes, the mutex held.
  void enqueue(std::string_view text) {
    if (text.empty()) return;
    if (broken || closed) {
      drop(text);  // nobody reads (EPIPE), or the end: no notice to give
      return;
    }
    if (overflowing || over_limit(text.size())) {
      overflowing = true;
      drop(text);
      if (queued_bytes > 0) return;  // the writer gives the notice once the queue drains
      // Nothing pending (a text longer than the whole queue): the notice goes out at once.
      overflowing = false;
      std::string notice = drop_notice(unreported, hint);
      unreported = {};
      queued_bytes += notice.size();
      queue.push_back(std::move(notice));
      wake.notify_one();
      return;
    }
    queue.emplace_back(text);
    queued_bytes += text.size();
    if (mode == SlowConsole::kBlock && queued_bytes >= max_queued) congested = true;
    wake.notify_one();
  }

  // Queues every line the collapser holds, the mutex held: before output that must not pass
  // them.
  void release_held() {
    if (collapser) enqueue_collapsed(collapser->flush());
  }

  // The live area wants a redraw by now (it changed, and the last one is old enough or this is
  // the end).
  [[nodiscard]] bool live_due(std::chrono::steady_clock::time_point now) const {
    return live && area.dirty() && (closed || now - drawn_at >= kLiveRedrawInterval);
  }

  // When the writer must look again without being woken: a held line's window ends, or the
  // live area's next redraw.
  [[nodiscard]] std::optional<std::chrono::steady_clock::time_point> next_wakeup() const {
    std::optional<std::chrono::steady_clock::time_point> next;
    if (collapser) next = collapser->next_due();
    if (live && area.dirty()) {
      const auto redraw = drawn_at + kLiveRedrawInterval;
      if (!next || redraw < *next) next = redraw;
    }
    return next;
  }

  // Empties the queue (not the batch being written), counting its lines as dropped or not.
  void clear_queue(bool count_as_dropped) {
    for (const auto& text : queue) {
      if (count_as_dropped) drop(text);
      queued_bytes -= text.size();
    }
    queue.clear();
  }

  void drop(std::string_view text) {
    ConsoleDrops lost{lines_in(text), text.size()};
    total.lines += lost.lines;
    total.bytes += lost.bytes;
    unreported.lines += lost.lines;
    unreported.bytes += lost.bytes;
  }

  // Past the bound with the reader stopped (its write(2) has taken nothing for `stall`),
  // or past the hard limit: text is dropped.
  [[nodiscard]] bool over_limit(size_t more) const {
    if (mode == SlowConsole::kBlock) return false;  // the caller holds back instead
    size_t after = queued_bytes + more;
    if (more > max_queued || after > max_queued * kConsoleBurstFactor) return true;
    if (after <= max_queued) return false;
    return writing && std::chrono::steady_clock::now() - write_began >= stall;
  }

  // write(2) until done; false when the console is gone (or close() gave up on it).
  bool write_all(std::string_view data) const {
    while (!data.empty()) {
      ssize_t n = ::write(fd, data.data(), data.size());
      if (n >= 0) {
        data.remove_prefix(static_cast<size_t>(n));
        continue;
      }
      if (errno == EINTR) continue;
      // Someone else set O_NONBLOCK on the shared file description: wait for room here.
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (abandoned.load()) return false;
        pollfd entry{fd, POLLOUT, 0};
        ::poll(&entry, 1, 100);
        continue;
      }
      return false;
    }
    return true;
  }

  // Whole lines, up to PIPE_BUF per write(2) (atomic on a pipe shared with other processes),
  // or one longer line alone; "" when nothing is queued.
  std::string take_batch() {
    std::string batch;
    if (queue.empty()) return batch;
    batch = std::move(queue.front());
    queue.pop_front();
    while (!queue.empty() && batch.size() + queue.front().size() <= PIPE_BUF) {
      batch += queue.front();
      queue.pop_front();
    }
    return batch;
  }

  void run() {
    std::unique_lock lock(mutex);
    for (;;) {
      auto now = std::chrono::steady_clock::now();
      const auto next = next_wakeup();
      if (queue.empty() && !closed && !live_due(now) && !(next && *next <= now)) {
        // Woken by anything (a line, a live line, the end) or by the deadline: look again.
        if (next) {
          wake.wait_until(lock, *next);
        } else {
          wake.wait(lock);
        }
        continue;
      }
      now = std::chrono::steady_clock::now();
      if (collapser) enqueue_collapsed(collapser->due(now));
      std::string batch = take_batch();
      const size_t taken = batch.size();
      if (batch.empty() && !live_due(now)) {
        if (closed && queue.empty()) return;
        continue;
      }
      std::string framed;
      if (live) {
        // Output scrolls above the live area: erase it, write, draw it again below.
        const auto [columns, rows] = terminal_size(fd);
        framed = area.erase();  // before draw(): it erases what was drawn last
        framed += batch;
        framed += area.draw(columns, rows);
        drawn_at = now;
      }
      writing = true;
      write_began = now;
      lock.unlock();
      bool ok = write_all(live ? framed : batch);
      lock.lock();
      writing = false;
      queued_bytes -= taken;
      ++batches;
      if (!ok && !abandoned.load()) {
        broken = true;
        if (!batch.empty()) drop(batch);
        clear_queue(/*count_as_dropped=*/true);
      }
      if (congested && queued_bytes <= max_queued / 2 && on_room) {
        congested = false;
        auto listener = on_room;
        lock.unlock();
        listener();  // outside the lock: it may ask congested()
        lock.lock();
      }
      if (queue.empty() && overflowing && !broken && !closed) {
        // Drained after an overflow: say what was lost, where the gap is.
        overflowing = false;
        std::string notice = drop_notice(unreported, hint);
        unreported = {};
        queued_bytes += notice.size();
        queue.push_back(std::move(notice));
      }
      progress.notify_all();
    }
  }
};

Console::Console(int fd, std::string hint, size_t max_queued_bytes, std::chrono::milliseconds stall,
                 SlowConsole mode)
    : shared_(std::make_shared<Shared>()) {
  shared_->mode = mode;
  shared_->fd = fd;
  shared_->hint = std::move(hint);
  shared_->max_queued = max_queued_bytes;
  shared_->stall = stall;
  // The writer takes no signals: they belong to the agent's loop (its signal_set), and a
  // SIGPIPE from a closed console must only turn into EPIPE.
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  shared_->writer = std::thread([shared = shared_] { shared->run(); });
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

Console::~Console() {
  close();
}

void Console::write(std::string_view text) {
  if (text.empty()) return;
  auto& s = *shared_;
  std::lock_guard lock(s.mutex);
  s.release_held();
  // A worker's line is open (a partial line, a progress bar): this goes below it.
  s.enqueue(s.end_open_line() + std::string(text));
}

void Console::write_segment(int source, std::string_view prefix, std::string_view body,
                            SegmentEnd end) {
  auto& s = *shared_;
  std::lock_guard lock(s.mutex);
  s.release_held();
  const bool continues = s.open_source == source;
  // A bar's leading '\r' with nothing of it shown yet: nothing to redraw.
  if (body.empty() && end == SegmentEnd::kCarriage && !continues) return;
  std::string out;
  out.reserve(prefix.size() + body.size() + 2);
  if (s.open_source != -1 && !continues) out.push_back('\n');  // end the other source's line
  if (!continues) {
    out.append(prefix);
  } else if (s.pending_cr) {
    out.push_back('\r');
    out.append(prefix);
  }
  out.append(body);
  if (end == SegmentEnd::kNewline) out.push_back('\n');
  s.open_source = end == SegmentEnd::kNewline ? -1 : source;
  s.pending_cr = end == SegmentEnd::kCarriage;
  s.enqueue(out);
}

void Console::write_line(int local_rank, int stream, std::string_view prefix,
                         std::string_view body) {
  auto& s = *shared_;
  {
    std::lock_guard lock(s.mutex);
    if (s.collapser) {
      s.enqueue_collapsed(
          s.collapser->add(local_rank, stream, body, std::chrono::steady_clock::now()));
      s.wake.notify_one();  // the writer's next wake-up may be earlier now
      return;
    }
  }
  write_segment(local_rank * 2 + stream - 1, prefix, body, SegmentEnd::kNewline);
}

void Console::begin_collapse(std::chrono::milliseconds window,
                             std::vector<std::array<bool, 2>> feeds, GroupPrefix prefix) {
  auto& s = *shared_;
  std::lock_guard lock(s.mutex);
  s.release_held();
  s.collapser = std::make_unique<LineCollapser>(window, std::move(feeds));
  s.group_prefix = std::move(prefix);
}

void Console::rank_done(int local_rank) {
  auto& s = *shared_;
  std::lock_guard lock(s.mutex);
  if (s.collapser) {
    s.enqueue_collapsed(s.collapser->rank_done(local_rank, std::chrono::steady_clock::now()));
  }
}

void Console::end_collapse() {
  auto& s = *shared_;
  std::lock_guard lock(s.mutex);
  s.release_held();
  s.collapser.reset();
  s.group_prefix = nullptr;
}

void Console::enable_live_area() {
  std::lock_guard lock(shared_->mutex);
  shared_->live = true;
}

bool Console::live_area() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->live;
}

void Console::set_live(int source, std::string line) {
  auto& s = *shared_;
  std::lock_guard lock(s.mutex);
  if (!s.live) return;
  s.area.set(source, std::move(line));
  s.wake.notify_one();
}

void Console::clear_live(int source) {
  auto& s = *shared_;
  std::lock_guard lock(s.mutex);
  if (!s.live) return;
  s.area.clear(source);
  s.wake.notify_one();
}

bool Console::congested() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->congested;
}

void Console::set_room_listener(std::function<void()> listener) {
  std::lock_guard lock(shared_->mutex);
  shared_->on_room = std::move(listener);
}

bool Console::drain(std::chrono::milliseconds stall, std::chrono::milliseconds limit) {
  auto& s = *shared_;
  std::unique_lock lock(s.mutex);
  s.release_held();
  const auto start = std::chrono::steady_clock::now();
  auto last_progress = start;
  uint64_t seen = s.batches;
  while ((!s.queue.empty() || s.writing) && !s.broken) {
    auto deadline = std::min(last_progress + stall, start + limit);
    s.progress.wait_until(lock, deadline);
    auto now = std::chrono::steady_clock::now();
    if (s.batches != seen) {
      seen = s.batches;
      last_progress = now;
    } else if (now >= deadline) {
      return false;
    }
  }
  return !s.broken;
}

std::string Console::close(std::optional<std::chrono::milliseconds> given_stall,
                           std::optional<std::chrono::milliseconds> given_limit) {
  auto& s = *shared_;
  if (!s.writer.joinable()) return "";
  const bool block = s.mode == SlowConsole::kBlock;
  const auto stall = given_stall.value_or(block ? kConsoleExitStallBlocking : kConsoleExitStall);
  // "No limit" is a year: milliseconds::max() would overflow the deadline arithmetic.
  const auto limit = given_limit.value_or(
      block ? std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::hours(24 * 365))
            : kConsoleExitLimit);
  {
    std::lock_guard lock(s.mutex);
    s.on_room = nullptr;  // its loop has ended; nobody reads the pipes any more
    if (!s.closed) {
      s.release_held();
      s.enqueue(s.end_open_line());  // the last open line gets its end
    }
  }
  bool drained = drain(stall, limit);
  std::string notice;
  {
    std::lock_guard lock(s.mutex);
    if (!drained && !s.broken) {
      s.clear_queue(/*count_as_dropped=*/true);  // the reader stopped: this is lost too
    }
    s.closed = true;
    if (s.unreported.lines > 0 && !s.broken) {
      notice = drop_notice(s.unreported, s.hint);
      s.unreported = {};
      if (drained) {  // the writer's last batch
        s.queue.push_back(notice);
        s.queued_bytes += notice.size();
      }
    }
    s.wake.notify_one();
  }
  // The notice gets the same chance as the lines before it.
  if (drained && !notice.empty() && drain(stall, limit)) notice.clear();
  bool stuck = false;
  {
    std::lock_guard lock(s.mutex);
    stuck = s.writing;
    s.abandoned = stuck;
    s.clear_queue(/*count_as_dropped=*/false);
    s.wake.notify_one();
  }
  if (stuck) {
    // In write(2) for as long as the reader pleases; the process may exit under it.
    s.writer.detach();
  } else {
    s.writer.join();
  }
  return notice;
}

ConsoleDrops Console::dropped() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->total;
}

int Console::fd() const {
  return shared_->fd;
}

std::string Console::drop_notice(ConsoleDrops drops, const std::string& hint) {
  std::string notice = "ddplaunch: console blocked: dropped " + std::to_string(drops.lines) +
                       " lines (" + std::to_string(drops.bytes) + " bytes) of output";
  if (!hint.empty()) notice += "; " + hint;
  return notice + "\n";
}

Consoles::Consoles(int out_fd, int err_fd, const std::string& hint, SlowConsole mode,
                   bool live_on_terminal)
    : out_(std::make_unique<Console>(out_fd, hint, kConsoleQueueBytes, kConsoleStall, mode)) {
  struct stat out_stat {};
  struct stat err_stat {};
  bool same = out_fd == err_fd ||
              (::fstat(out_fd, &out_stat) == 0 && ::fstat(err_fd, &err_stat) == 0 &&
               out_stat.st_dev == err_stat.st_dev && out_stat.st_ino == err_stat.st_ino);
  if (!same)
    err_ = std::make_unique<Console>(err_fd, hint, kConsoleQueueBytes, kConsoleStall, mode);
  if (!live_on_terminal) return;
  if (::isatty(out_fd) != 0) out_->enable_live_area();
  if (err_ && ::isatty(err_fd) != 0) err_->enable_live_area();
}

void Consoles::set_room_listener(const std::function<void()>& listener) {
  out_->set_room_listener(listener);
  if (err_) err_->set_room_listener(listener);
}

Consoles::~Consoles() {
  close();
}

void Consoles::close() {
  std::string lost = out_->close();
  if (!err_) return;
  if (!lost.empty()) err_->write(lost);
  err_->close();
}

}  // namespace ddp::launcher

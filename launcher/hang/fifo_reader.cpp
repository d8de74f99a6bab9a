#include "launcher/hang/fifo_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cerrno>

#include "common/error.hpp"
#include "common/log.hpp"

namespace ddp::launcher {

namespace asio = boost::asio;

void warn_through_log(const std::string& message) {
  DDP_LOG_WARN("warning: " + message);
}

std::string excerpt(std::string_view line, size_t max_bytes) {
  std::string out(line.substr(0, max_bytes));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < ' ' || c == '\x7f') c = '?';
  }
  if (line.size() > max_bytes) out += "...";
  return out;
}

struct FifoReader::State : std::enable_shared_from_this<State> {
  explicit State(asio::io_context& io) : descriptor(io) {}
  ~State() { close(); }
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  void start_read();
  void on_bytes(std::string_view bytes);
  void deliver(std::string_view line);
  void close();

  asio::posix::stream_descriptor descriptor;
  int dummy_writer = -1;  // our own writer: the read end never reaches end-of-file
  std::filesystem::path path;
  bool created = false;  // we made the FIFO, so we remove it
  dev_t device = 0;      // the FIFO we opened, so we never remove a file put in its place
  ino_t inode = 0;
  bool open = false;
  LineHandler on_line;
  WarningSink warn = warn_through_log;
  std::string partial;      // bytes after the last newline
  bool discarding = false;  // inside an over-long line: skip up to its newline
  uint64_t lines = 0;
  uint64_t dropped = 0;
  std::array<char, 16384> buffer{};
};

namespace {

// Makes a FIFO at path unless one is there; true when this call made it.
bool make_fifo(const std::filesystem::path& path) {
  struct stat st {};
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (::stat(path.c_str(), &st) == 0) {
      if (!S_ISFIFO(st.st_mode)) {
        throw Error("'" + path.string() +
                    "' exists and is not a FIFO: expected a named pipe there, or no file at all");
      }
      return false;
    }
    if (errno != ENOENT) {
      throw Error("cannot use '" + path.string() + "' as a FIFO: stat: " + errno_text(errno));
    }
    if (::mkfifo(path.c_str(), 0600) == 0) return true;
    // Another process made something there between stat and mkfifo: look again, once.
    if (errno != EEXIST) {
      throw Error("cannot create the FIFO '" + path.string() + "': mkfifo: " + errno_text(errno));
    }
  }
  throw Error("cannot create the FIFO '" + path.string() + "': it keeps changing");
}

}  // namespace

FifoReader::FifoReader(asio::io_context& io, std::filesystem::path path, LineHandler on_line)
    : state_(std::make_shared<State>(io)) {
  State& s = *state_;
  s.path = std::move(path);
  s.on_line = std::move(on_line);
  s.created = make_fifo(s.path);
  auto fail = [&](const std::string& what) {
    int err = errno;
    if (s.dummy_writer >= 0) ::close(s.dummy_writer);
    s.dummy_writer = -1;
    if (s.created) ::unlink(s.path.c_str());
    throw Error("cannot open the FIFO '" + s.path.string() + "': " + what + ": " + errno_text(err));
  };
  // O_CLOEXEC: a worker that inherited either end would hold the FIFO open (or read from it).
  int read_fd = ::open(s.path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (read_fd < 0) fail("open for reading");
  struct stat st {};
  if (::fstat(read_fd, &st) != 0 || !S_ISFIFO(st.st_mode)) {
    ::close(read_fd);
    errno = ENOTSUP;
    fail("the file opened is not a FIFO");
  }
  s.device = st.st_dev;
  s.inode = st.st_ino;
  s.descriptor.assign(read_fd);
  // With our reader open, opening a writer never blocks and never fails with ENXIO.
  s.dummy_writer = ::open(s.path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (s.dummy_writer < 0) {
    boost::system::error_code ignored;
    s.descriptor.close(ignored);
    fail("open for writing");
  }
  s.open = true;
  s.start_read();
}

FifoReader::~FifoReader() {
  state_->close();
  if (state_->created) {
    // Remove only the FIFO we made: someone may have replaced it meanwhile.
    struct stat st {};
    if (::lstat(state_->path.c_str(), &st) == 0 && st.st_dev == state_->device &&
        st.st_ino == state_->inode) {
      ::unlink(state_->path.c_str());
    }
  }
}

const std::filesystem::path& FifoReader::path() const {
  return state_->path;
}
void FifoReader::close() {
  state_->close();
}
bool FifoReader::is_open() const {
  return state_->open;
}
uint64_t FifoReader::lines() const {
  return state_->lines;
}
uint64_t FifoReader::dropped_lines() const {
  return state_->dropped;
}
void FifoReader::set_warning_sink(WarningSink sink) {
  state_->warn = sink ? std::move(sink) : warn_through_log;
}

void FifoReader::State::close() {
  open = false;
  boost::system::error_code ignored;
  descriptor.close(ignored);
  if (dummy_writer >= 0) ::close(dummy_writer);
  dummy_writer = -1;
  partial.clear();
}

void FifoReader::State::start_read() {
  descriptor.async_read_some(
      asio::buffer(buffer), [self = shared_from_this()](boost::system::error_code ec, size_t n) {
        if (!self->open) return;
        if (n > 0) self->on_bytes(std::string_view(self->buffer.data(), n));
        if (!self->open) return;  // on_line closed us
        if (ec) {
          // Our own writer rules out end-of-file; anything else would repeat forever.
          self->warn("stopped reading the FIFO '" + self->path.string() + "': " + ec.message());
          self->close();
          return;
        }
        self->start_read();
      });
}

void FifoReader::State::on_bytes(std::string_view bytes) {
  while (!bytes.empty() && open) {
    size_t newline = bytes.find('\n');
    bool complete = newline != std::string_view::npos;
    std::string_view piece = bytes.substr(0, newline);
    bytes.remove_prefix(complete ? newline + 1 : bytes.size());
    if (discarding) {
      discarding = !complete;
      continue;
    }
    if (partial.size() + piece.size() > kMaxFifoLineBytes) {
      ++dropped;
      if (dropped % 100 == 1) {
        warn("dropped a line longer than " + std::to_string(kMaxFifoLineBytes) +
             " bytes from the FIFO '" + path.string() + "' (" + std::to_string(dropped) +
             " so far; one warning per 100)");
      }
      partial.clear();
      discarding = !complete;
      continue;
    }
    if (!complete) {
      partial.append(piece);
    } else if (partial.empty()) {
      deliver(piece);
    } else {
      partial.append(piece);
      std::string line = std::move(partial);
      partial.clear();
      deliver(line);
    }
  }
}

void FifoReader::State::deliver(std::string_view line) {
  ++lines;
  if (on_line) on_line(line);
}

}  // namespace ddp::launcher

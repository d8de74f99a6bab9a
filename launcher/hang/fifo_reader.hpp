#pragma once
// A named pipe (FIFO) that local processes write lines into and the agent reads on its
// io_context, never blocking it. Writers open the FIFO O_WRONLY|O_NONBLOCK, write whole
// lines of at most PIPE_BUF bytes (atomic, so lines of different writers never interleave)
// and close it again whenever they like: the reader keeps a writer of its own open, as
// PyTorch's FileTimerServer does, so it never sees end-of-file when the last one leaves.
#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace ddp::launcher {

// Where a reader's (and its users') warnings go: one sentence, no prefix, no newline.
using WarningSink = std::function<void(const std::string& message)>;
// The default sink: the logger (common/log.hpp) at warn level, "warning: <message>", so it
// goes where the agent's other messages go and obeys DDPLAUNCH_LOG_LEVEL.
void warn_through_log(const std::string& message);
// A line quoted in a warning: cut to max_bytes ("..." added), control bytes shown as '?'.
std::string excerpt(std::string_view line, size_t max_bytes = 160);

// A line longer than this (newline not counted) is dropped, and counted.
inline constexpr size_t kMaxFifoLineBytes = size_t{64} * 1024;

// Everything runs on io's thread: call the members from there too (the agent's one loop).
class FifoReader {
 public:
  using LineHandler = std::function<void(std::string_view line)>;

  // Creates the FIFO at path (mode 0600) or reuses a FIFO already there, opens it and starts
  // reading on io. on_line gets each complete line, without its '\n', on io's thread; it may
  // call close() but must not destroy this reader. Throws ddp::Error (a std::runtime_error)
  // naming the path when a non-FIFO file is there or the FIFO cannot be made or opened.
  FifoReader(boost::asio::io_context& io, std::filesystem::path path, LineHandler on_line);
  // Closes the FIFO and removes it if this reader created it (and it is still the same file).
  ~FifoReader();
  FifoReader(const FifoReader&) = delete;
  FifoReader& operator=(const FifoReader&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const;
  // Stops reading and closes both ends; no on_line call follows. The FIFO stays on disk
  // until destruction, and writers that open it from now on get ENXIO. Idempotent.
  void close();
  [[nodiscard]] bool is_open() const;
  // Complete lines delivered to on_line so far.
  [[nodiscard]] uint64_t lines() const;
  // Lines dropped for being longer than kMaxFifoLineBytes (one warning for the first and
  // every 100th).
  [[nodiscard]] uint64_t dropped_lines() const;
  // Replaces warn_through_log as the place warnings go (e.g. the agent's notice console).
  void set_warning_sink(WarningSink sink);

 private:
  struct State;
  // Shared with the pending read, so a handler that runs after close() finds it intact.
  std::shared_ptr<State> state_;
};

}  // namespace ddp::launcher

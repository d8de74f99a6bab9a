#pragma once
// The agent's end of the progress protocol (common/progress_protocol.hpp): a FIFO, named to
// workers by $DDPLAUNCH_PROGRESS_FILE, whose lines arrive as progress::Report on the agent's
// io_context. Bad lines are counted and ignored, with one warning per 100.
#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string_view>

#include "common/progress_protocol.hpp"
#include "launcher/hang/fifo_reader.hpp"

namespace ddp::launcher {

class ProgressChannel {
 public:
  using ReportHandler = std::function<void(const progress::Report&)>;

  // Creates (or reuses) the FIFO and reads it on io; on_report runs on io's thread for every
  // good line. It may call close() but must not destroy the channel. Throws ddp::Error as
  // FifoReader does.
  ProgressChannel(boost::asio::io_context& io, std::filesystem::path fifo, ReportHandler on_report);
  ProgressChannel(const ProgressChannel&) = delete;
  ProgressChannel& operator=(const ProgressChannel&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const { return reader_.path(); }
  // Stops reading (FifoReader::close()).
  void close() { reader_.close(); }
  // Good lines delivered, and bad lines ignored, so far (blank lines count as neither).
  [[nodiscard]] uint64_t reports() const { return reports_; }
  [[nodiscard]] uint64_t bad_lines() const { return bad_lines_; }
  // Replaces warn_through_log as the place warnings go.
  void set_warning_sink(WarningSink sink);

 private:
  void on_line(std::string_view line);

  ReportHandler on_report_;
  WarningSink warn_ = warn_through_log;
  uint64_t reports_ = 0;
  uint64_t bad_lines_ = 0;
  FifoReader reader_;  // last: it calls on_line, which uses the members above
};

}  // namespace ddp::launcher

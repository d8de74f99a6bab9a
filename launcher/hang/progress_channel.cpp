#include "launcher/hang/progress_channel.hpp"

#include <string>
#include <utility>

namespace ddp::launcher {

namespace {

// One warning for the first bad line and for every kWarnEvery-th after it.
constexpr uint64_t kWarnEvery = 100;

bool blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

}  // namespace

ProgressChannel::ProgressChannel(boost::asio::io_context& io, std::filesystem::path fifo,
                                 ReportHandler on_report)
    : on_report_(std::move(on_report)),
      reader_(io, std::move(fifo), [this](std::string_view line) { on_line(line); }) {}

void ProgressChannel::set_warning_sink(WarningSink sink) {
  if (!sink) sink = warn_through_log;
  warn_ = sink;
  reader_.set_warning_sink(std::move(sink));
}

void ProgressChannel::on_line(std::string_view line) {
  if (blank(line)) return;
  std::string error;
  std::optional<progress::Report> report = progress::parse(line, &error);
  if (!report) {
    ++bad_lines_;
    if (bad_lines_ % kWarnEvery == 1) {
      warn_("ignored a bad progress line on '" + path().string() + "' (" + error + "): '" +
            excerpt(line) + "' (" + std::to_string(bad_lines_) +
            " bad so far; one warning per 100)");
    }
    return;
  }
  ++reports_;
  // Last: the handler may close the channel.
  if (on_report_) on_report_(*report);
}

}  // namespace ddp::launcher

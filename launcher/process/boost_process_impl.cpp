// Boost.Process v2 (Boost 1.81) is compiled once here: its header-only mode does not
// build with this toolchain, separate compilation does.
#include <boost/process/v2/src.hpp>

# Third-party packages (all from Debian; scripts/setup.sh installs them).
# Their headers are SYSTEM includes so their warnings never count against ours.
find_package(Threads REQUIRED)
find_package(Boost 1.81 REQUIRED COMPONENTS system filesystem)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(ZLIB REQUIRED)
find_package(BLAS REQUIRED)

# Gloo: Debian ships headers and libgloo.so without a CMake config.
find_path(GLOO_INCLUDE_DIR gloo/context.h REQUIRED)
find_library(GLOO_LIBRARY gloo REQUIRED)
add_library(ddp_gloo INTERFACE)
target_include_directories(ddp_gloo SYSTEM INTERFACE ${GLOO_INCLUDE_DIR})
target_link_libraries(ddp_gloo INTERFACE ${GLOO_LIBRARY} Threads::Threads)

add_library(ddp_boost INTERFACE)
target_link_libraries(ddp_boost INTERFACE Boost::boost Boost::system Threads::Threads)
# Boost.Process v2 uses Boost.Filesystem paths.
add_library(ddp_boost_process INTERFACE)
target_link_libraries(ddp_boost_process INTERFACE ddp_boost Boost::filesystem)
target_compile_definitions(ddp_boost INTERFACE BOOST_ASIO_NO_DEPRECATED)

if(DDP_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)
endif()

# cmake --install (docs/install.md): the programs, and the worker runtime for native trainers
# built elsewhere: its headers under include/ddplaunch, its static libraries, and a CMake
# package config so that a project does find_package(ddplaunch) and links
# ddplaunch::worker_runtime.
include(CMakePackageConfigHelpers)
set(DDP_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/ddplaunch)

# The trainer is an example worker with a generic name: it goes to libexec, not to PATH.
install(TARGETS ddplaunch ddpstore EXPORT ddplaunchTargets
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS train RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/ddplaunch)

# Everything ddp_worker_runtime links, static libraries being linked by their users: our
# libraries, and the INTERFACE targets wrapping Gloo, Boost, liburing and NCCL (their paths are
# the system's, which the .deb's dependencies provide). The warning set is exported only
# because the static libraries name it privately; it reaches no user's compile line.
set(_ddp_exported ddp_worker_runtime ddp_store_server ddp_store ddp_common
                  ddp_gloo ddp_boost ddp_warnings)
foreach(_optional ddp_uring ddp_nccl)
  if(TARGET ${_optional})
    list(APPEND _ddp_exported ${_optional})
  endif()
endforeach()
foreach(_target IN LISTS _ddp_exported)
  string(REGEX REPLACE "^ddp_" "" _name ${_target})
  set_target_properties(${_target} PROPERTIES EXPORT_NAME ${_name})
endforeach()
install(TARGETS ${_ddp_exported} EXPORT ddplaunchTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})

# The worker runtime's public headers and everything they include (common/, the Store and the
# server's options), under include/ddplaunch so their paths stay "common/error.hpp".
install(DIRECTORY common worker_runtime DESTINATION ${DDP_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp" PATTERN "python" EXCLUDE)
install(DIRECTORY rendezvous/store DESTINATION ${DDP_INSTALL_INCLUDEDIR}/rendezvous
        FILES_MATCHING PATTERN "*.hpp" PATTERN "etcd" EXCLUDE PATTERN "epoll" EXCLUDE
        PATTERN "uring" EXCLUDE PATTERN "ddpstore" EXCLUDE)
install(FILES ${DDP_GENERATED_DIR}/common/version.hpp DESTINATION ${DDP_INSTALL_INCLUDEDIR}/common)

if(DDP_HAVE_CUDA)
  get_filename_component(DDP_CUDA_ROOT ${CUDAToolkit_BIN_DIR} DIRECTORY)  # for the config file
endif()
install(EXPORT ddplaunchTargets NAMESPACE ddplaunch:: DESTINATION ${DDP_INSTALL_CMAKEDIR})
configure_package_config_file(cmake/ddplaunchConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/ddplaunchConfig.cmake
                              INSTALL_DESTINATION ${DDP_INSTALL_CMAKEDIR})
# 0.x: a minor release may change the library's interface.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ddplaunchConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ddplaunchConfig.cmake
              ${PROJECT_BINARY_DIR}/ddplaunchConfigVersion.cmake
        DESTINATION ${DDP_INSTALL_CMAKEDIR})

# The Python helpers for PyTorch workers (docs/recovery.md "PyTorch", docs/hangs.md): pure
# Python, found by Debian's python3 under /usr; a venv sees them with --system-site-packages
# or PYTHONPATH (the wheel, scripts/build_wheel.sh, installs them into a venv instead).
set(DDP_INSTALL_PYTHONDIR lib/python3/dist-packages
    CACHE STRING "where ddplaunch_recovery.py and ddplaunch_progress.py are installed")
install(FILES worker_runtime/python/ddplaunch_recovery.py worker_runtime/python/ddplaunch_progress.py
        DESTINATION ${DDP_INSTALL_PYTHONDIR})

# Bash completion: one script for both programs; it reads the options from `PROGRAM --help`
# when it runs, so it never lists an option the installed program does not have.
foreach(_program ddplaunch ddpstore)
  install(FILES packaging/ddplaunch-completion.bash
          DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME ${_program})
endforeach()

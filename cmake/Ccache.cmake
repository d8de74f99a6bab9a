# ccache (Debian's ccache; scripts/setup.sh installs it) as the compiler launcher of every
# build that finds it: build/, the sanitizer and fuzz builds, a build by hand. Its cache lives
# outside the tree (~/.cache/ccache by default, CCACHE_DIR elsewhere); CCACHE_DISABLE=1 turns
# it off for one run (docs/build_times.md). An explicit -DCMAKE_<LANG>_COMPILER_LAUNCHER wins;
# -DDDP_CCACHE=OFF leaves the launcher unset.
option(DDP_CCACHE "Compile through ccache when it is installed" ON)
if(DDP_CCACHE)
  find_program(DDP_CCACHE_PROGRAM ccache)
  if(DDP_CCACHE_PROGRAM)
    # Paths under the source tree are hashed relative to it (base_dir), and the working
    # directory is left out of -g builds' hashes (hash_dir), so a clone in another folder (CI's)
    # hits what a build here cached. The debug info then names the paths as compiled here.
    foreach(lang C CXX CUDA)
      if(NOT CMAKE_${lang}_COMPILER_LAUNCHER)
        set(CMAKE_${lang}_COMPILER_LAUNCHER
            ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${CMAKE_SOURCE_DIR} CCACHE_NOHASHDIR=1
            ${DDP_CCACHE_PROGRAM})
      endif()
    endforeach()
  endif()
endif()

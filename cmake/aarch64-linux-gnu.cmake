# Cross-build for 64-bit ARM (aarch64) on a Debian host, with Debian's cross compiler and the arm64
# libraries installed through multiarch (scripts/setup-arm64.sh installs both):
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#   cmake --build build-arm64 -j2 && ctest --test-dir build-arm64 -L unit
# The tests run under qemu-user (CMAKE_CROSSCOMPILING_EMULATOR): `-cpu max` so that every extension
# the engine has kernels for (dotprod, i8mm, bf16) is there to test; ADAPTERD_CPU_LEVEL or the
# tests' own level loop run the lower ones. Programs the tests start themselves (the server, a
# script's `adapterd version`) go through the kernel's binfmt_misc registration of qemu-aarch64.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(ADAPTERD_CROSS_TRIPLET aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${ADAPTERD_CROSS_TRIPLET}-gcc)
# Debian's cross compiler searches /usr/include/aarch64-linux-gnu and /usr/lib/aarch64-linux-gnu
# itself; pkg-config must read the arm64 .pc files only (the triplet wrapper does that).
find_program(ADAPTERD_CROSS_PKG_CONFIG ${ADAPTERD_CROSS_TRIPLET}-pkg-config)
if(ADAPTERD_CROSS_PKG_CONFIG)
  set(PKG_CONFIG_EXECUTABLE ${ADAPTERD_CROSS_PKG_CONFIG} CACHE FILEPATH "pkg-config for ${ADAPTERD_CROSS_TRIPLET}")
else()
  set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/${ADAPTERD_CROSS_TRIPLET}/pkgconfig:/usr/share/pkgconfig)
endif()
# Libraries unpacked beside the tree rather than installed (scripts/setup-arm64.sh: Criterion's arm64
# package conflicts with the amd64 one): found by the tests' link through its pkg-config file, and by
# the loader through an RPATH (not RUNPATH, so that libcriterion's own libnanomsg is found too).
set(ADAPTERD_ARM64_DEPS "${CMAKE_CURRENT_LIST_DIR}/../build-arm64-deps" CACHE PATH "arm64 libraries unpacked by scripts/setup-arm64.sh")
set(_deps_lib "${ADAPTERD_ARM64_DEPS}/usr/lib/${ADAPTERD_CROSS_TRIPLET}")
if(EXISTS "${_deps_lib}")
  set(ENV{PKG_CONFIG_PATH} "${_deps_lib}/pkgconfig")
  set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,--disable-new-dtags -Wl,-rpath,${_deps_lib} -Wl,-rpath-link,${_deps_lib}")
  set(CMAKE_SHARED_LINKER_FLAGS_INIT "-Wl,-rpath-link,${_deps_lib}")
endif()
find_program(ADAPTERD_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(ADAPTERD_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${ADAPTERD_QEMU_AARCH64} -cpu max)
endif()
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)

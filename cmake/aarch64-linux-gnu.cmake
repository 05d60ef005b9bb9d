# CMake toolchain for the aarch64 cross build (scripts/test-arm.sh): Debian's
# g++-aarch64-linux-gnu, with the target's libraries (fmt, pcre2, gtest, cpp-httplib) installed
# Debian multiarch style (`libfmt-dev:arm64` ...) under /usr/lib/aarch64-linux-gnu. Executables
# (gtest discovery, ctest) run through qemu-aarch64 user emulation.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Multiarch: find_package / find_library look in /usr/lib/aarch64-linux-gnu first.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)

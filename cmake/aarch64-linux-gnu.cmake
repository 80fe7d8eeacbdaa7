# aarch64-linux-gnu.cmake: CMake toolchain file for linux/arm64 with Debian's cross toolchain
# (gcc-aarch64-linux-gnu, the lib*-dev:arm64 packages, qemu-user-static for the tests):
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DCMA_WERROR=ON
#   cmake --build build-arm64 -j2 && ctest --test-dir build-arm64
set(CMA_CROSS_TRIPLET aarch64-linux-gnu)
set(CMA_CROSS_PROCESSOR aarch64)
set(CMA_CROSS_QEMU qemu-aarch64-static)
include(${CMAKE_CURRENT_LIST_DIR}/debian-cross.cmake)

# debian-cross.cmake: the shared part of the cross toolchain files (cmake/<triplet>.cmake set
# CMA_CROSS_TRIPLET, CMA_CROSS_PROCESSOR and CMA_CROSS_QEMU, then include this file). It builds
# with Debian's cross compiler (gcc-<triplet>) against Debian's multiarch libraries: the
# lib*-dev:<arch> packages in /usr/lib/<triplet> (`dpkg --add-architecture <arch>`), found
# through their pkg-config files only. Built programs run under qemu user emulation
# (qemu-user-static: qemu-<cpu>-static), which ctest uses as CMAKE_CROSSCOMPILING_EMULATOR, so
# `ctest` runs the unit tests of a cross build as it does those of a native one. The emulated
# programs use the multiarch loader and libraries (/lib/ld-linux-*.so.*, libc6:<arch>), the
# same packages the image holds. See docs/image.md.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR ${CMA_CROSS_PROCESSOR})
set(CMAKE_C_COMPILER ${CMA_CROSS_TRIPLET}-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE ${CMA_CROSS_TRIPLET})

# Programs (cmake, pkg-config) come from the host; headers and libraries only from the target's
# multiarch directories and the cross compiler's own.
set(CMAKE_FIND_ROOT_PATH /usr/${CMA_CROSS_TRIPLET})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# pkg-config reads only the target's .pc files (never the host's /usr/lib/x86_64-linux-gnu).
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/${CMA_CROSS_TRIPLET}/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")

find_program(CMA_CROSS_EMULATOR ${CMA_CROSS_QEMU})
if(CMA_CROSS_EMULATOR)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${CMA_CROSS_EMULATOR})
endif()

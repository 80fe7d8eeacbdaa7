# cma_add_stage(): one static library per stage, linked only to earlier stages.
# cma_add_unit_test(): one cmocka executable per module, registered with ctest, linked with
#   cma_testlib (tests/unit/fakehttp.c: the shared fake HTTP server and fixture reader).
# cma_unit_test(): declares tests/unit/<name>.c; a declared file that does not exist is a
#   configure error (a missing test is never skipped silently).
# cma_add_fuzzer(): one libFuzzer target per parser (clang, CMA_FUZZ=ON only).

function(cma_add_stage name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/include)
  target_compile_options(${name} PRIVATE ${CMA_WARNING_FLAGS})
  target_link_libraries(${name} PUBLIC ${ARG_LIBS})
endfunction()

function(cma_add_unit_test name)
  if(NOT CMA_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  cma_add_testlib()
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${CMA_WARNING_FLAGS} -Wno-missing-prototypes)
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} cma_testlib PkgConfig::CMOCKA)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES
    ENVIRONMENT "CMA_SOURCE_DIR=${PROJECT_SOURCE_DIR};CMOCKA_MESSAGE_OUTPUT=stdout")
endfunction()

function(cma_add_fuzzer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  if(CMA_FUZZ)
    add_executable(${name} ${ARG_SOURCES})
    target_compile_options(${name} PRIVATE -fsanitize=fuzzer)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(${name} PRIVATE ${ARG_LIBS})
  elseif(CMA_BUILD_TESTS)
    # Without libFuzzer, the same entry point replays the seed corpus and every input a fuzzing
    # run found (tests/fuzz/regressions/<target>/, written by scripts/fuzz.sh) as a test.
    add_executable(${name}_replay ${ARG_SOURCES} ${PROJECT_SOURCE_DIR}/tests/fuzz/replay_main.c)
    target_link_libraries(${name}_replay PRIVATE ${ARG_LIBS})
    add_test(NAME ${name}_replay
             COMMAND ${name}_replay ${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${name}
                     ${PROJECT_SOURCE_DIR}/tests/fuzz/regressions/${name})
  endif()
endfunction()

# Registers tests/unit/<name>.c as a unit test. Every module declares its test: a declared file
# that does not exist stops the configure step, naming the file (never a silent skip). A build
# without tests (CMA_BUILD_TESTS=OFF: the image copies no tests/) declares nothing.
function(cma_unit_test name)
  if(NOT CMA_BUILD_TESTS)
    return()
  endif()
  set(src ${PROJECT_SOURCE_DIR}/tests/unit/${name}.c)
  if(NOT EXISTS ${src})
    message(FATAL_ERROR "cma_unit_test(${name}): ${src} does not exist "
                        "(declared in ${CMAKE_CURRENT_LIST_FILE}); write it or remove the declaration")
  endif()
  cma_add_unit_test(${name} SOURCES ${src} ${ARGN})
endfunction()

# cma_testlib: what C unit tests share (tests/unit/fakehttp.c: a loopback HTTP server in a thread
# answering from a table or a callback and recording requests, a loopback client connect, and a
# fixture reader for ../shared/fixtures and tests/fixtures). Defined once, on first use; it
# links to no stage, so every unit test can use it. CMA_SOURCE_DIR is compiled in as the default
# source tree (the CMA_SOURCE_DIR environment variable, set by ctest, wins).
function(cma_add_testlib)
  if(TARGET cma_testlib)
    return()
  endif()
  add_library(cma_testlib STATIC ${PROJECT_SOURCE_DIR}/tests/unit/fakehttp.c)
  target_include_directories(cma_testlib PUBLIC ${PROJECT_SOURCE_DIR}/tests/unit)
  target_compile_options(cma_testlib PRIVATE ${CMA_WARNING_FLAGS})
  target_compile_definitions(cma_testlib PRIVATE CMA_SOURCE_DIR_DEFAULT="${PROJECT_SOURCE_DIR}")
  target_link_libraries(cma_testlib PUBLIC Threads::Threads)
endfunction()

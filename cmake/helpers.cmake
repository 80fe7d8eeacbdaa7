# cma_add_stage(): one static library per stage, linked only to earlier stages.
# cma_add_unit_test(): one cmocka executable per module, registered with ctest.
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
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${CMA_WARNING_FLAGS} -Wno-missing-prototypes)
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} PkgConfig::CMOCKA)
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

# Registers tests/unit/<name>.c as a unit test when the file exists (lets modules land one by one).
function(cma_unit_test name)
  set(src ${PROJECT_SOURCE_DIR}/tests/unit/${name}.c)
  if(EXISTS ${src})
    cma_add_unit_test(${name} SOURCES ${src} ${ARGN})
  endif()
endfunction()

# Helpers modelled on abseil's absl_cc_library / leveldb_test.
#
#   prism_library(NAME mig_layout SRCS layout.cc DEPS prism::mig_catalog absl::status)
#     -> static library target prism_mig_layout, alias prism::mig_layout
#   prism_test(NAME mig_layout_test SRCS layout_test.cc DEPS prism::mig_layout)
#     -> executable registered with CTest through gtest_discover_tests

include(GoogleTest)

set(PRISM_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
    -Wimplicit-fallthrough)
if(PRISM_WERROR)
  list(APPEND PRISM_WARNINGS -Werror)
endif()

# Flags every target that reuses a precompiled header (cmake/pch) must share with its holder.
set(PRISM_PCH_FLAGS -pthread)

if(PRISM_SANITIZE)
  set(PRISM_SANITIZER_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all
      -fno-omit-frame-pointer)
  add_compile_options(${PRISM_SANITIZER_FLAGS})
  add_link_options(${PRISM_SANITIZER_FLAGS})
endif()

function(prism_library)
  cmake_parse_arguments(P "" "NAME" "SRCS;HDRS;DEPS" ${ARGN})
  add_library(prism_${P_NAME} STATIC ${P_SRCS} ${P_HDRS})
  add_library(prism::${P_NAME} ALIAS prism_${P_NAME})
  target_include_directories(prism_${P_NAME} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(prism_${P_NAME} PRIVATE ${PRISM_WARNINGS})
  target_link_libraries(prism_${P_NAME} PUBLIC ${P_DEPS})
  if(TARGET prism_pch_library)
    target_compile_options(prism_${P_NAME} PRIVATE ${PRISM_PCH_FLAGS})
    target_precompile_headers(prism_${P_NAME} REUSE_FROM prism_pch_library)
  endif()
endfunction()

function(prism_test)
  # REALTIME <gtest filter>: the cases of this binary that measure wall-clock time (rates, shares,
  # timeouts on a real clock). They get the `realtime` label and RUN_SERIAL, so they never share
  # the CPUs with another test, and tools/test.sh runs them apart (the only label it retries).
  cmake_parse_arguments(P "" "NAME;REALTIME" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${P_NAME} ${P_SRCS})
  target_include_directories(${P_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR})
  target_compile_options(${P_NAME} PRIVATE ${PRISM_WARNINGS})
  target_link_libraries(${P_NAME} PRIVATE ${P_DEPS} GTest::gmock_main)
  if(TARGET prism_pch_test)
    target_compile_options(${P_NAME} PRIVATE ${PRISM_PCH_FLAGS})
    target_precompile_headers(${P_NAME} REUSE_FROM prism_pch_test)
  endif()
  if(NOT P_LABELS)
    set(P_LABELS unit)
  endif()
  # gtest_discover_tests flattens PROPERTIES into one list, so a list-valued property (two labels,
  # two variables) would lose its second item. The discovered names are kept in ${P_NAME}_TESTS
  # (and ${P_NAME}_REALTIME_TESTS), and a file CTest includes after the discovered tests sets the
  # properties on each by name.
  set(filter "")
  if(P_REALTIME)
    set(filter TEST_FILTER "-${P_REALTIME}")
  endif()
  gtest_discover_tests(${P_NAME} ${filter}
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    TEST_LIST ${P_NAME}_TESTS
    DISCOVERY_TIMEOUT 60)
  set(properties_file ${CMAKE_CURRENT_BINARY_DIR}/${P_NAME}_properties.cmake)
  set(content "foreach(t IN LISTS ${P_NAME}_TESTS)
  set_tests_properties(\"\${t}\" PROPERTIES LABELS \"${P_LABELS}\"
    ENVIRONMENT \"PRISM_SOURCE_DIR=${PROJECT_SOURCE_DIR};PRISM_BINARY_DIR=${PROJECT_BINARY_DIR}\")
endforeach()
")
  if(P_REALTIME)
    gtest_discover_tests(${P_NAME}
      TEST_FILTER "${P_REALTIME}"
      WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
      TEST_LIST ${P_NAME}_REALTIME_TESTS
      DISCOVERY_TIMEOUT 60)
    string(APPEND content "foreach(t IN LISTS ${P_NAME}_REALTIME_TESTS)
  set_tests_properties(\"\${t}\" PROPERTIES LABELS \"${P_LABELS};realtime\" RUN_SERIAL TRUE
    ENVIRONMENT \"PRISM_SOURCE_DIR=${PROJECT_SOURCE_DIR};PRISM_BINARY_DIR=${PROJECT_BINARY_DIR}\")
endforeach()
")
  endif()
  file(WRITE ${properties_file} "${content}")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${properties_file})
endfunction()

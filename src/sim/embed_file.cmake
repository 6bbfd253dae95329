# Writes a C++ source that defines `std::string_view ${FUNCTION}()` returning the
# bytes of ${INPUT}. Run as: cmake -DINPUT=... -DOUTPUT=... -DFUNCTION=... -P embed_file.cmake
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_length)
math(EXPR size "${hex_length} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUTPUT}"
"// Generated from ${INPUT} by src/sim/embed_file.cmake. Do not edit.
#include <string_view>

#include \"sim/embedded_trace_data.h\"

namespace prism::sim {
namespace {
const unsigned char kBytes[${size}] = {${bytes}};
}  // namespace

std::string_view ${FUNCTION}() {
  return std::string_view(reinterpret_cast<const char*>(kBytes), sizeof(kBytes));
}

}  // namespace prism::sim
")

// src/base/terminal_text.h: strings from elsewhere made safe to print on a terminal. Pure.
#pragma once

#include <string>
#include <string_view>

namespace prism {

// `text` with every byte a terminal could act on written as \xNN (two hex digits), for text
// output that shows strings from elsewhere (a cluster's names, an annotation's content): C0
// controls, newline and tab too (a value must not forge lines of the output), DEL, the C1
// controls U+0080..U+009F, and bytes that are not UTF-8 (a terminal not in UTF-8 reads 0x9b as
// CSI). Other UTF-8 is kept; so is a backslash, so the output does not tell "\x1b" typed from
// an escaped ESC (Kubernetes names cannot hold one).
std::string TerminalSafe(std::string_view text);

}  // namespace prism

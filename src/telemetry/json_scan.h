// Minimal JSON scanning primitives over a byte span, for the streaming trace reader.
// Each function advances `p` and returns kOk, kNeedMore (the span ended inside the value:
// read more input and retry from the value's start) or kError (malformed; `err` says why).
// No recursion: nesting depth is bounded, so hostile input cannot blow the stack.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace stoker::telemetry::json {

enum class Scan { kOk, kNeedMore, kError };

inline bool IsWs(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

inline void SkipWs(const char*& p, const char* end) {
  while (p < end && IsWs(*p)) ++p;
}

// A string starting at '"'. `raw` receives the bytes between the quotes, undecoded;
// `escaped` is set when it contains a backslash.
Scan String(const char*& p, const char* end, std::string_view* raw, bool* escaped,
            const char** err);
// A number. `is_int` when it has no fraction or exponent and fits int64.
Scan Number(const char*& p, const char* end, double* d, int64_t* i, bool* is_int,
            const char** err);
// Skips any value (containers are bracket- and string-checked, up to depth 256).
Scan SkipValue(const char*& p, const char* end, const char** err);

// Decodes JSON string escapes (\n, \", \uXXXX incl. surrogate pairs) into UTF-8.
std::string Unescape(std::string_view raw);

}  // namespace stoker::telemetry::json

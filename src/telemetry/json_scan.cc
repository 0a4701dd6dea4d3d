#include "telemetry/json_scan.h"

#include <cstdint>
#include <charconv>
#include <cstring>

namespace stoker::telemetry::json {

Scan String(const char*& p, const char* end, std::string_view* raw, bool* escaped,
            const char** err) {
  // *p == '"'
  const char* s = p + 1;
  const char* q = s;
  bool esc = false;
  while (true) {
    // Find the next quote or backslash.
    const char* a = static_cast<const char*>(std::memchr(q, '"', end - q));
    if (a == nullptr) return Scan::kNeedMore;
    const char* b = static_cast<const char*>(std::memchr(q, '\\', a - q));
    if (b == nullptr) {
      q = a;
      break;
    }
    esc = true;
    if (b + 1 >= end) return Scan::kNeedMore;
    q = b + 2;
  }
  // Raw control characters inside strings are tolerated (lenient, and faster).
  *raw = std::string_view(s, q - s);
  *escaped = esc;
  p = q + 1;
  return Scan::kOk;
}

Scan Number(const char*& p, const char* end, double* d, int64_t* i, bool* is_int,
            const char** err) {
  const char* s = p;
  const char* q = p;
  if (q < end && *q == '-') ++q;
  const char* digits = q;
  uint64_t acc = 0;
  bool overflow = false;
  while (q < end && *q >= '0' && *q <= '9') {
    uint64_t nd = acc * 10 + static_cast<uint64_t>(*q - '0');
    if (acc > (UINT64_MAX / 10) || nd < acc) overflow = true;
    acc = nd;
    ++q;
  }
  if (q == end) return Scan::kNeedMore;
  if (q == digits) {
    *err = "expected a number";
    return Scan::kError;
  }
  bool frac = false;
  if (*q == '.' || *q == 'e' || *q == 'E') {
    frac = true;
    if (*q == '.') {
      ++q;
      const char* f = q;
      while (q < end && *q >= '0' && *q <= '9') ++q;
      if (q == end) return Scan::kNeedMore;
      if (q == f) {
        *err = "malformed number";
        return Scan::kError;
      }
    }
    if (*q == 'e' || *q == 'E') {
      ++q;
      if (q < end && (*q == '+' || *q == '-')) ++q;
      const char* f = q;
      while (q < end && *q >= '0' && *q <= '9') ++q;
      if (q == end) return Scan::kNeedMore;
      if (q == f) {
        *err = "malformed number exponent";
        return Scan::kError;
      }
    }
  }
  if (!frac && !overflow && acc <= static_cast<uint64_t>(INT64_MAX)) {
    *is_int = true;
    *i = (*s == '-') ? -static_cast<int64_t>(acc) : static_cast<int64_t>(acc);
    *d = static_cast<double>(*i);
  } else {
    *is_int = false;
    auto r = std::from_chars(s, q, *d);
    if (r.ec != std::errc() && r.ec != std::errc::result_out_of_range) {
      *err = "malformed number";
      return Scan::kError;
    }
    *i = 0;
  }
  p = q;
  return Scan::kOk;
}

static Scan Literal(const char*& p, const char* end, const char* lit, const char** err) {
  size_t n = std::strlen(lit);
  size_t have = static_cast<size_t>(end - p);
  if (std::memcmp(p, lit, std::min(n, have)) != 0) {
    *err = "invalid literal";
    return Scan::kError;
  }
  if (have < n) return Scan::kNeedMore;
  p += n;
  return Scan::kOk;
}

Scan SkipValue(const char*& p, const char* end, const char** err) {
  // Iterative: a stack of open brackets (bit per level: 1 = object) and a state machine
  // that checks the token order inside containers.
  constexpr int kMaxDepth = 256;
  uint8_t stack[kMaxDepth];
  int depth = 0;
  // expect: 0 = value, 1 = key or '}' (object start), 2 = ':' , 3 = ',' or close,
  //         4 = value or ']' (array start), 5 = key (after ',')
  int expect = 0;
  const char* q = p;
  while (true) {
    SkipWs(q, end);
    if (q >= end) return Scan::kNeedMore;
    char c = *q;
    switch (expect) {
      case 1:
      case 5:
        if (c == '}' && expect == 1) {
          ++q;
          --depth;
          expect = 3;
          break;
        }
        if (c != '"') {
          *err = "expected a string key";
          return Scan::kError;
        }
        {
          std::string_view raw;
          bool esc;
          Scan s = String(q, end, &raw, &esc, err);
          if (s != Scan::kOk) return s;
        }
        expect = 2;
        break;
      case 2:
        if (c != ':') {
          *err = "expected ':'";
          return Scan::kError;
        }
        ++q;
        expect = 0;
        break;
      case 3:
        if (depth == 0) {
          p = q;
          return Scan::kOk;
        }
        if (c == ',') {
          ++q;
          expect = stack[depth - 1] ? 5 : 0;
        } else if (c == '}' && stack[depth - 1] == 1) {
          ++q;
          --depth;
        } else if (c == ']' && stack[depth - 1] == 0) {
          ++q;
          --depth;
        } else {
          *err = "expected ',' or a closing bracket";
          return Scan::kError;
        }
        break;
      case 0:
      case 4:
        if (c == ']' && expect == 4) {
          ++q;
          --depth;
          expect = 3;
          break;
        }
        if (c == '{' || c == '[') {
          if (depth >= kMaxDepth) {
            *err = "nesting too deep";
            return Scan::kError;
          }
          stack[depth++] = (c == '{') ? 1 : 0;
          ++q;
          expect = (c == '{') ? 1 : 4;
        } else if (c == '"') {
          std::string_view raw;
          bool esc;
          Scan s = String(q, end, &raw, &esc, err);
          if (s != Scan::kOk) return s;
          expect = 3;
        } else if (c == 't' || c == 'f' || c == 'n') {
          Scan s = Literal(q, end, c == 't' ? "true" : (c == 'f' ? "false" : "null"), err);
          if (s != Scan::kOk) return s;
          expect = 3;
        } else {
          double d;
          int64_t i;
          bool is_int;
          Scan s = Number(q, end, &d, &i, &is_int, err);
          if (s != Scan::kOk) return s;
          expect = 3;
        }
        if (depth == 0 && expect == 3) {
          p = q;
          return Scan::kOk;
        }
        break;
    }
  }
}

static void AppendUtf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

static int Hex4(std::string_view s, size_t i) {
  if (i + 4 > s.size()) return -1;
  int v = 0;
  for (size_t k = i; k < i + 4; ++k) {
    char c = s[k];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= c - '0';
    else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
    else return -1;
  }
  return v;
}

std::string Unescape(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    char c = raw[i];
    if (c != '\\' || i + 1 >= raw.size()) {
      out.push_back(c);
      continue;
    }
    char e = raw[++i];
    switch (e) {
      case 'n': out.push_back('\n'); break;
      case 't': out.push_back('\t'); break;
      case 'r': out.push_back('\r'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'u': {
        int v = Hex4(raw, i + 1);
        if (v < 0) {
          out.push_back('?');
          break;
        }
        i += 4;
        uint32_t cp = static_cast<uint32_t>(v);
        if (cp >= 0xD800 && cp < 0xDC00 && i + 6 < raw.size() + 0 && raw[i + 1] == '\\' &&
            raw[i + 2] == 'u') {
          int lo = Hex4(raw, i + 3);
          if (lo >= 0xDC00 && lo < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (static_cast<uint32_t>(lo) - 0xDC00);
            i += 6;
          }
        }
        AppendUtf8(&out, cp);
        break;
      }
      default: out.push_back(e); break;  // \" \\ \/
    }
  }
  return out;
}

}  // namespace stoker::telemetry::json

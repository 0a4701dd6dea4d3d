// The pipeline's options, written once: a table of {name, type, default, range, doc}
// (kOptionRows in options_schema.cc) from which
//   * the CLI flags of `bench pipeline` / `demo` are made (src/cli/pipeline_flags.cc),
//   * the Python keyword arguments, their defaults and their docstring are made
//     (python/src/options.cc binds the table; python/stoker/pipeline.py builds the
//     signature and the docstring from it),
//   * docs/options.md is generated (`stoker options --markdown`), and a test fails when
//     the page and the table differ,
// and which validates every value with a message that names the option. Adding an option
// is a field in PipelineOptions and one row in the table.
//
// Names are the Python keywords (snake_case); the CLI flag is the name with dashes
// (`batch_size` -> `--batch-size`; a bool `x` is `--x` / `--no-x`). Old CLI spellings are
// aliases (`--batch`, `--mode`, `--memory-budget-mb`).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "pipeline/pipeline.h"

namespace stoker {

enum class OptionType {
  kBool,
  kInt,     // an integer in [min, max]
  kDouble,  // a number in [min, max]
  kString,
  kEnum,    // one of `choices`
  kBytes,   // a byte count: an integer, or a size with a unit (512MB, 8GiB)
  kFloats,  // exactly `count` numbers, each in [min, max]
  kRange,   // two numbers (min, max) with min <= max, each in [min, max]
};
const char* OptionTypeName(OptionType t);  // "bool", "int", ..., as docs/options.md says

// A value as a binding hands it over: Python's None / bool / int / float / str / sequence
// of numbers, or a CLI string parsed by ParseOptionText. `repr` is how the value is shown
// in an error message (Python's repr, or the CLI text quoted).
struct OptionValue {
  // kOther: a value of no option's type (a dict from Python, say); only `repr` is used.
  enum class Kind { kAuto, kBool, kInt, kDouble, kString, kList, kOther };
  Kind kind = Kind::kAuto;
  bool b = false;
  int64_t i = 0;
  double d = 0;
  std::string s;
  std::vector<double> list;
  std::string repr;

  static OptionValue Auto();
  static OptionValue Bool(bool v);
  static OptionValue Int(int64_t v);
  static OptionValue Double(double v);
  static OptionValue String(std::string v);
  static OptionValue List(std::vector<double> v);
  static OptionValue Other(std::string repr);
  bool operator==(const OptionValue& o) const;  // same kind and value (repr ignored)
};

// An old CLI spelling: `flag` sets the option; `unit` is appended to a number given to it
// (`--memory-budget-mb 300` is `--memory-budget 300MB`).
struct OptionAlias {
  std::string flag;
  std::string unit;
};

struct OptionSpec {
  std::string name;          // Python keyword, JSON key, and (dashed) the CLI flag
  OptionType type = OptionType::kInt;
  std::string default_text;  // as a user would write it: "224", "auto", "train", "0.485,0.456,0.406"
  std::string doc;
  std::string group;         // section of docs/options.md and of the docstring
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_exclusive = false;  // (min, max] instead of [min, max]
  int count = 0;               // kFloats: how many numbers
  std::vector<std::string> choices;  // kEnum
  std::string auto_doc;        // non-empty: "auto" is accepted and means this
  bool zero_is_auto = false;   // 0 also means auto (the field's sentinel is 0)
  bool required = false;       // no default (only `data`)
  std::vector<OptionAlias> aliases;

  // The binding to PipelineOptions: `set` stores a value CheckOption accepted; `get`
  // reads it back (kAuto where the field holds the "auto" sentinel).
  std::function<void(PipelineOptions&, const OptionValue&)> set;
  std::function<OptionValue(const PipelineOptions&)> get;

  std::string cli_flag() const;    // "--batch-size"
  std::string range_text() const;  // "[8, 8192]", "train, val, raw", "" when unbounded
};

// The table, in documentation order.
const std::vector<OptionSpec>& PipelineOptionSchema();
// By name, or by a CLI flag or alias ("--mode"); nullptr when there is none.
const OptionSpec* FindOption(std::string_view name_or_flag);

// Checks `v` against the row: type, range, choices. Returns the value normalized to the
// row's type (an int for a kDouble, "auto" text or 0 for an auto row become kAuto, a
// kBytes size becomes its byte count). The message names the option:
//   "batch_size must be >= 1, got 0", "decode='fancy' is not one of 'train', 'val', 'raw'".
Result<OptionValue> CheckOption(const OptionSpec& spec, const OptionValue& v);
// CheckOption, then stores it. An unknown name: "unknown pipeline option 'x'".
Status SetOption(PipelineOptions* o, std::string_view name, const OptionValue& v);

// A CLI argument's text as the row's type: "auto", "true"/"false", "16", "0.5",
// "0.485,0.456,0.406", "8GiB". Not checked against the range (CheckOption does that).
Result<OptionValue> ParseOptionText(const OptionSpec& spec, std::string_view text);

// PipelineOptions from named values (Python's keyword dict, the CLI's flags): every row
// gets its value or its default, in table order (so `skip_bad_shards="auto"` sees the
// final `on_error`). Unknown names are an error.
Result<PipelineOptions> OptionsFromValues(
    const std::vector<std::pair<std::string, OptionValue>>& values);

// Every row's current value in `o` checked against the table: what Pipeline::Create runs
// first, so that options built in C++ get the same messages.
Status ValidatePipelineOptions(const PipelineOptions& o);

// docs/options.md, generated from the table.
std::string OptionsMarkdown();
// The table as JSON (for `stoker options --json` and tools).
std::string OptionsJson();
// A value as text (the inverse of ParseOptionText, for defaults and messages).
std::string OptionValueText(const OptionValue& v);

}  // namespace stoker

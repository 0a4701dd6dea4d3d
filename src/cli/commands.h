// Each subcommand group lives in its own cli/cmd_*.cc and registers itself here.
// The CLI is thin: parse flags, call the library, print. Exit codes: 0 ok, 1 failure
// (the run failed: a bad sample under --on-error fail, a test that did not pass),
// 2 bad input or usage (unreadable file, wrong flags).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace stoker::cli {

// Sets the action to run after parsing; returns the process exit code.
using Action = std::function<int()>;
void SetAction(Action a);

// Prints "stoker: <message>" to stderr and returns the exit code for this status.
int Fail(const Status& st);

// `stoker watch` as a call (stoker demo runs its PyTorch half under it): runs `command`
// with the probe (and a profiler window for steps A:B when given), prints the doctor's
// report, writes the samples to `out` and the JSON report to `json`; returns the
// command's exit status.
int RunWatch(const std::vector<std::string>& command, const std::string& out,
             const std::string& json, const std::string& profile_steps, int max_findings);

// Subcommand groups.
void RegisterGenCommands(CLI::App& app);       // stoker gen ...
void RegisterBenchCommands(CLI::App& app, CLI::App& bench);  // stoker bench pipeline ...
void RegisterDemoCommand(CLI::App& app);       // stoker demo
void RegisterConvertCommands(CLI::App& app);   // stoker convert, verify, dump
void RegisterBenchReadCommand(CLI::App& bench);  // stoker bench read --data SPEC
void RegisterBenchIoCommand(CLI::App& bench);       // stoker bench io PATH
void RegisterBenchFormatsCommand(CLI::App& bench);  // stoker bench formats --data SRC
void RegisterDoctorCommands(CLI::App& app);  // stoker doctor FILES..., stoker watch -- CMD
void RegisterBenchDecodeCommand(CLI::App& bench);  // stoker bench decode --data DIR
void RegisterTuneCommands(CLI::App& app);  // stoker tune dataloader (runs python -m stoker)
void RegisterPlanCommands(CLI::App& app);  // stoker plan, stoker plan measure
void RegisterBenchTokensCommand(CLI::App& bench);  // stoker bench tokens --data SPEC
void RegisterIndexCommand(CLI::App& app);    // stoker index SPEC (.idx beside shards)
void RegisterOptionsCommand(CLI::App& app);  // stoker options (the pipeline options table)

}  // namespace stoker::cli

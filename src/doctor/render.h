// Renderings of a doctor Report: a terminal summary read in ten seconds, JSON with a
// stable schema ("stoker.doctor/1", documented in docs/doctor.md), Markdown for an issue
// tracker, and a self-contained HTML report (inline SVG charts, no scripts or network).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "doctor/doctor.h"

namespace stoker::doctor {

struct TextOptions {
  bool color = false;   // ANSI colors (the CLI sets this for a terminal)
  int max_findings = 5;
};

std::string RenderText(const Report& r, const TextOptions& opts = {});
nlohmann::json ReportToJson(const Report& r);
std::string RenderJson(const Report& r);  // pretty-printed ReportToJson
std::string RenderMarkdown(const Report& r);
std::string RenderHtml(const Report& r);
// The verdict causes and the finding rules as Markdown tables (ListCauses, ListRules), as
// `stoker doctor --list-rules` prints them and docs/doctor.md shows them.
std::string RenderCausesMarkdown(const Thresholds& th = {});
std::string RenderFindingRulesMarkdown(const Thresholds& th = {});
std::string RenderRulesMarkdown(const Thresholds& th = {});  // both

}  // namespace stoker::doctor

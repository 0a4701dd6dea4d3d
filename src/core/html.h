// The small HTML/SVG helper every report uses (the doctor's report, the storage probe's
// report, bench formats): escaping text for HTML and attributes, and the opening tag of an
// inline SVG chart, so that every chart is a standalone, accessible image in the same font.
#pragma once

#include <string>
#include <string_view>

namespace stoker::html {

// & < > " ' as entities: safe in element text and in quoted attributes.
std::string Escape(std::string_view s);

// <svg width=W height=H role="img" font-family="sans-serif" font-size="12"> for a chart
// inline in an HTML page (no namespace URL: the reports reference nothing outside
// themselves); close with "</svg>".
std::string SvgOpen(int width, int height);

}  // namespace stoker::html

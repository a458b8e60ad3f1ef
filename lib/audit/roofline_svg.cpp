#include "audit/roofline_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

namespace lingprobe::audit {
namespace {

// The plot: log10 axes, x arithmetic intensity [1e-2, 1e4] FLOP per DRAM byte, y [1e9, 2e15] FLOP/s; the roof
// labels and the legends sit in the right margin, clear of the points.
constexpr double kW = 980, kH = 520, kL = 70, kPlotR = 760, kT = 36, kB = 50;
constexpr double kMinAi = 1e-2, kMaxAi = 1e4, kMinFlops = 1e9, kMaxFlops = 2e15;

double x_of(double ai) { return kL + (std::log10(std::clamp(ai, kMinAi, kMaxAi)) + 2) / 6 * (kPlotR - kL); }
double y_of(double f) {
  const double lo = std::log10(kMinFlops), hi = std::log10(kMaxFlops);
  return kH - kB - (std::log10(std::clamp(f, kMinFlops, kMaxFlops)) - lo) / (hi - lo) * (kH - kT - kB);
}

std::string xml(const std::string& in) {
  std::string o;
  for (char c : in) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else if (c == '"')
      o += "&quot;";
    else
      o += c;
  }
  return o;
}

bool plotted(const Job& j) { return j.passed && j.flops_per_s > 0 && j.intensity > 0; }

void axes(std::ostringstream& s) {
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << kH
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << kL << "\" y=\"20\" font-size=\"14\">Roofline: profiled signatures of this run (inline "
    << "counters); area: share of their GPU time</text>\n";
  for (int e = -2; e <= 4; ++e)
    s << "<line x1=\"" << x_of(std::pow(10, e)) << "\" y1=\"" << kT << "\" x2=\"" << x_of(std::pow(10, e)) << "\" y2=\""
      << kH - kB << "\" stroke=\"#eee\"/><text x=\"" << x_of(std::pow(10, e)) - 10 << "\" y=\"" << kH - kB + 16
      << "\">1e" << e << "</text>\n";
  for (int e = 9; e <= 15; ++e)
    s << "<line x1=\"" << kL << "\" y1=\"" << y_of(std::pow(10, e)) << "\" x2=\"" << kPlotR << "\" y2=\""
      << y_of(std::pow(10, e)) << "\" stroke=\"#eee\"/><text x=\"8\" y=\"" << y_of(std::pow(10, e)) + 4 << "\">1e" << e
      << "</text>\n";
  s << "<rect x=\"" << kL << "\" y=\"" << kT << "\" width=\"" << kPlotR - kL << "\" height=\"" << kH - kT - kB
    << "\" fill=\"none\" stroke=\"#999\"/>\n<text x=\"" << (kL + kPlotR) / 2 - 120 << "\" y=\"" << kH - 12
    << "\">arithmetic intensity (FLOP per DRAM byte)</text>\n<text x=\"14\" y=\"" << kT - 4 << "\">FLOP/s</text>\n";
}

// One roof per (peak FLOP/s, peak DRAM B/s) of the plotted points, named by its math modes in the right margin.
void roofs(std::ostringstream& s, const std::vector<Job>& jobs) {
  std::map<std::pair<double, double>, std::string> modes;
  for (const auto& j : jobs)
    if (plotted(j) && j.peak_flops > 0 && j.peak_dram > 0) {
      auto& m = modes[{j.peak_flops, j.peak_dram}];
      if (("/" + m + "/").find("/" + j.mode + "/") == std::string::npos) m += (m.empty() ? "" : "/") + j.mode;
    }
  double last_label_y = -100;
  for (auto it = modes.rbegin(); it != modes.rend(); ++it) {  // highest roof first: labels stacked downwards
    const auto& [peaks, name] = *it;
    const auto [pf, pd] = peaks;
    const double knee = pf / pd;
    s << "<polyline fill=\"none\" stroke=\"#c33\" stroke-width=\"1.5\" points=\"" << x_of(kMinAi) << ","
      << y_of(pd * kMinAi) << " " << x_of(knee) << "," << y_of(pf) << " " << x_of(kMaxAi) << "," << y_of(pf)
      << "\"/>\n";
    const double y = std::max(y_of(pf) + 4, last_label_y + 13);
    last_label_y = y;
    s << "<text x=\"" << kPlotR + 8 << "\" y=\"" << y << "\" fill=\"#c33\">" << xml(name) << " peak "
      << human(pf, "FLOP/s") << "</text>\n";
  }
}

// A marker per math mode (circle, square, diamond, triangle, ...), a colour per stage, an area per share of time.
std::string marker(int shape, double x, double y, double r, const char* color, bool off_axis,
                   const std::string& title = "") {
  std::ostringstream m;
  const std::string paint = off_axis ? "fill=\"white\" stroke=\"" + std::string(color) + "\" stroke-width=\"1.5\""
                                     : "fill=\"" + std::string(color) + "\" fill-opacity=\"0.75\" stroke=\"#333\"";
  const char* tag = shape % 4 == 0 ? "circle" : shape % 4 == 1 ? "rect" : "polygon";
  m << "<" << tag << " ";
  switch (shape % 4) {
    case 0: m << "cx=\"" << x << "\" cy=\"" << y << "\" r=\"" << r << "\""; break;
    case 1:
      m << "x=\"" << x - r << "\" y=\"" << y - r << "\" width=\"" << 2 * r << "\" height=\"" << 2 * r << "\"";
      break;
    case 2:
      m << "points=\"" << x << "," << y - r * 1.3 << " " << x + r * 1.3 << "," << y << " " << x << "," << y + r * 1.3
        << " " << x - r * 1.3 << "," << y << "\"";
      break;
    default:
      m << "points=\"" << x << "," << y - r * 1.3 << " " << x + r * 1.2 << "," << y + r << " " << x - r * 1.2 << ","
        << y + r << "\"";
  }
  m << " " << paint;
  if (title.empty())
    m << "/>";
  else
    m << "><title>" << title << "</title></" << tag << ">";
  return m.str();
}

const char* const kColors[] = {"#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"};

struct Label {
  std::string text;
  double x, y, r;  // the point's centre and radius
};

// The largest points' names: one label per text (several signatures of one op and first shape: "(N signatures)"),
// right of its point, or left of it where the plot's edge is near (the roof names are beyond it), moved down until
// it overlaps no label placed before it.
void place_labels(std::ostringstream& s, const std::vector<Label>& labels) {
  std::vector<std::pair<Label, int>> unique;
  for (const auto& l : labels) {
    auto same = std::find_if(unique.begin(), unique.end(), [&](const auto& u) { return u.first.text == l.text; });
    if (same == unique.end())
      unique.push_back({l, 1});
    else
      ++same->second;
  }
  std::vector<std::pair<double, double>> placed;  // left and right ends of the labels so far, by y
  std::vector<double> placed_y;
  for (auto& [l, n] : unique) {
    const std::string text = n > 1 ? l.text + " (" + std::to_string(n) + " signatures)" : l.text;
    const double width = 5.5 * static_cast<double>(text.size());
    const bool left = l.x + l.r + 3 + width > kPlotR - 4;
    const double x0 = left ? l.x - l.r - 3 - width : l.x + l.r + 3;
    double y = l.y;
    for (bool moved = true; moved;) {
      moved = false;
      for (size_t k = 0; k < placed.size(); ++k)
        if (std::fabs(placed_y[k] - y) < 12 && x0 < placed[k].second && placed[k].first < x0 + width)
          y = placed_y[k] + 12, moved = true;
    }
    placed.push_back({x0, x0 + width});
    placed_y.push_back(y);
    s << "<text x=\"" << x0 << "\" y=\"" << y << "\" font-size=\"10\">" << xml(text) << "</text>\n";
  }
}

struct Keys {
  std::map<std::string, int> stage, mode;
};

// The points, largest first underneath; off the axes drawn hollow on the edge and said so; the five with the most
// GPU time labelled with their op and shape.
void points(std::ostringstream& s, const std::vector<Job>& jobs, Keys& keys) {
  std::vector<const Job*> shown;
  double total_us = 0;
  for (const auto& j : jobs)
    if (plotted(j)) shown.push_back(&j), total_us += std::max(0.0, j.est_us);
  std::sort(shown.begin(), shown.end(), [](const Job* a, const Job* b) { return a->est_us > b->est_us; });
  std::vector<Label> labels;
  for (size_t i = 0; i < shown.size(); ++i) {
    const Job& j = *shown[i];
    const int c = keys.stage.emplace(j.stage, static_cast<int>(keys.stage.size()) % 6).first->second;
    const int shape = keys.mode.emplace(j.mode, static_cast<int>(keys.mode.size())).first->second;
    const double share = total_us > 0 ? std::max(0.0, j.est_us) / total_us : 0;
    const double r = 3 + 14 * std::sqrt(share);
    const bool off =
        j.flops_per_s < kMinFlops || j.flops_per_s > kMaxFlops || j.intensity < kMinAi || j.intensity > kMaxAi;
    const double x = x_of(j.intensity), y = y_of(j.flops_per_s);
    std::ostringstream title;
    title << xml(j.label) << " " << xml(j.shape) << " " << xml(j.stage) << " " << j.h16 << ": "
          << human(j.flops_per_s, "FLOP/s") << ", AI " << j.intensity << ", " << j.mode << ", "
          << human(j.est_us * 1e-6, "s") << (off ? " (off the axes: drawn at the edge)" : "");
    s << marker(shape, x, y, r, kColors[c], off, title.str()) << "\n";
    if (i < 5) labels.push_back({j.label + " " + j.shape + (off ? " (off axis)" : ""), x, y + 4, r});
  }
  place_labels(s, labels);
}

void legends(std::ostringstream& s, const Keys& keys) {
  double y = kH - kB - 14 * static_cast<double>(keys.stage.size() + keys.mode.size() + 3);
  s << "<text x=\"" << kPlotR + 8 << "\" y=\"" << y << "\" font-weight=\"bold\">stage</text>\n";
  for (const auto& [stage, c] : keys.stage) {
    y += 14;
    s << marker(0, kPlotR + 14, y - 4, 4, kColors[c], false) << "<text x=\"" << kPlotR + 24 << "\" y=\"" << y << "\">"
      << xml(stage) << "</text>\n";
  }
  y += 20;
  s << "<text x=\"" << kPlotR + 8 << "\" y=\"" << y << "\" font-weight=\"bold\">math mode</text>\n";
  for (const auto& [mode, shape] : keys.mode) {
    y += 14;
    s << marker(shape, kPlotR + 14, y - 4, 4, "#777", false) << "<text x=\"" << kPlotR + 24 << "\" y=\"" << y << "\">"
      << xml(mode) << "</text>\n";
  }
  s << "<text x=\"" << kPlotR + 8 << "\" y=\"" << y + 18 << "\" font-size=\"9\">hollow: off the axes</text>\n";
}

}  // namespace

std::string roofline_svg(const std::vector<Job>& jobs) {
  std::ostringstream s;
  Keys keys;
  axes(s);
  roofs(s, jobs);
  points(s, jobs, keys);
  legends(s, keys);
  s << "</svg>\n";
  return s.str();
}

}  // namespace lingprobe::audit

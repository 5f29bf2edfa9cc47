// Inline SVG charts (svg_chart.h). Coordinates are computed here, in C++, so a report file needs
// no script to show its plots and the dashboard serves the same markup; a small stylesheet
// (assets/report.css) gives the series their colours (.s0 ... .s7).
#include "report/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace ftune::report {
namespace {

constexpr double kWidth = 640, kHeight = 300;
constexpr double kLeft = 70, kRight = 16, kTop = 30, kBottom = 46;

// Where a value lies on an axis of [lo, hi] (log10 applied before for log axes).
struct Scale {
  double lo = 0, hi = 1;
  bool log = false;
  double a = 0, b = 1;  // pixel range
  double map(double v) const {
    const double t = log ? std::log10(v) : v;
    const double f = hi > lo ? (t - lo) / (hi - lo) : 0.5;
    return a + f * (b - a);
  }
  bool valid(double v) const { return std::isfinite(v) && (!log || v > 0); }
};

Scale make_scale(const Axis& axis, const std::vector<double>& values, double a, double b) {
  Scale s;
  s.log = axis.log;
  s.a = a;
  s.b = b;
  if (!axis.categories.empty()) {
    s.lo = -0.5;
    s.hi = static_cast<double>(axis.categories.size()) - 0.5;
    return s;
  }
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double v : values) {
    if (!s.valid(v)) continue;
    const double t = s.log ? std::log10(v) : v;
    lo = std::min(lo, t);
    hi = std::max(hi, t);
  }
  if (axis.min && s.valid(*axis.min)) lo = s.log ? std::log10(*axis.min) : *axis.min;
  if (axis.max && s.valid(*axis.max)) hi = s.log ? std::log10(*axis.max) : *axis.max;
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (hi <= lo) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  } else if (!axis.min && !axis.max) {
    const double pad = (hi - lo) * 0.04;
    lo -= pad;
    hi += pad;
  }
  s.lo = lo;
  s.hi = hi;
  return s;
}

// Tick positions (in data units) and their labels for an axis.
std::vector<std::pair<double, std::string>> axis_ticks(const Axis& axis, const Scale& s, int n) {
  std::vector<std::pair<double, std::string>> out;
  if (!axis.categories.empty()) {
    for (size_t i = 0; i < axis.categories.size(); ++i)
      out.emplace_back(static_cast<double>(i), axis.categories[i]);
    return out;
  }
  if (s.log) {
    for (double e = std::ceil(s.lo); e <= s.hi + 1e-9; e += 1) {
      const double v = std::pow(10.0, e);
      out.emplace_back(v, short_number(v));
    }
    if (out.size() >= 2) return out;
    out.clear();
    for (double t : nice_ticks(s.lo, s.hi, n))
      out.emplace_back(std::pow(10.0, t), short_number(std::pow(10.0, t)));
    return out;
  }
  for (double v : nice_ticks(s.lo, s.hi, n)) out.emplace_back(v, short_number(v));
  return out;
}

std::string figure_open(const std::string& id, const std::string& title, size_t points,
                        const std::string& kind) {
  return fmt::format(
      "<figure class=\"chart {}\" id=\"{}\" data-points=\"{}\"><figcaption>{}</figcaption>"
      "<svg viewBox=\"0 0 {} {}\" width=\"{}\" height=\"{}\" role=\"img\">",
      kind, escape_html(id), points, escape_html(title), kWidth, kHeight, kWidth, kHeight);
}

std::string figure_close(const std::string& note) {
  std::string out = "</svg>";
  if (!note.empty()) out += "<p class=\"note\">" + escape_html(note) + "</p>";
  return out + "</figure>";
}

std::string point_title(const Point& p) {
  return p.title.empty() ? short_number(p.x) + ", " + short_number(p.y) : p.title;
}

// Colour of a value in [0, 1] from dark blue to yellow (a viridis-like ramp, three stops).
std::string ramp_colour(double t) {
  t = std::clamp(std::isfinite(t) ? t : 0.0, 0.0, 1.0);
  const double stops[3][3] = {{68, 1, 84}, {33, 145, 140}, {253, 231, 37}};
  const int i = t < 0.5 ? 0 : 1;
  const double f = t < 0.5 ? t * 2 : (t - 0.5) * 2;
  int c[3];
  for (int k = 0; k < 3; ++k)
    c[k] = static_cast<int>(std::lround(stops[i][k] + f * (stops[i + 1][k] - stops[i][k])));
  return fmt::format("#{:02x}{:02x}{:02x}", c[0], c[1], c[2]);
}

}  // namespace

std::string escape_html(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::vector<double> nice_ticks(double lo, double hi, int count) {
  std::vector<double> out;
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi) || count < 1) return out;
  const double raw = (hi - lo) / count;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
    out.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  return out;
}

std::string short_number(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  const double a = std::abs(v);
  if (a != 0 && (a < 1e-3 || a >= 1e6)) return fmt::format("{:.3g}", v);
  return fmt::format("{:.4g}", v);
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::abs(bytes) >= 1024 && u < 4) bytes /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

std::string svg_xy_chart(const Chart& chart) {
  std::vector<double> xs, ys;
  for (const Series& s : chart.series)
    for (const Point& p : s.points) xs.push_back(p.x), ys.push_back(p.y);
  const Scale sx = make_scale(chart.x, xs, kLeft, kWidth - kRight);
  const Scale sy = make_scale(chart.y, ys, kHeight - kBottom, kTop);
  size_t points = 0;
  for (const Series& s : chart.series)
    if (s.markers)
      for (const Point& p : s.points) points += sx.valid(p.x) && sy.valid(p.y);
  std::string out = figure_open(chart.id, chart.title, points, "xy");
  // Frame, grid and tick labels.
  out += fmt::format("<rect class=\"frame\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>", kLeft,
                     kTop, kWidth - kLeft - kRight, kHeight - kTop - kBottom);
  for (const auto& [v, label] : axis_ticks(chart.x, sx, 6)) {
    const double px = sx.map(v);
    out += fmt::format("<line class=\"grid\" x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\"/>"
                       "<text class=\"tick\" x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}"
                       "</text>",
                       px, kTop, kHeight - kBottom, kHeight - kBottom + 14, escape_html(label));
  }
  for (const auto& [v, label] : axis_ticks(chart.y, sy, 5)) {
    const double py = sy.map(v);
    out += fmt::format("<line class=\"grid\" x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\"/>"
                       "<text class=\"tick\" x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>",
                       kLeft, kWidth - kRight, py, kLeft - 4, py + 4, escape_html(label));
  }
  out += fmt::format("<text class=\"axis-label\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                     (kLeft + kWidth - kRight) / 2, kHeight - 8, escape_html(chart.x.label));
  out += fmt::format("<text class=\"axis-label\" transform=\"translate(14,{}) rotate(-90)\" "
                     "text-anchor=\"middle\">{}</text>",
                     (kTop + kHeight - kBottom) / 2, escape_html(chart.y.label));
  // Series: polyline, then markers, then a legend entry.
  double legend_x = kLeft;
  for (size_t i = 0; i < chart.series.size(); ++i) {
    const Series& s = chart.series[i];
    const std::string cls = fmt::format("s{}", i % 8);
    out += fmt::format("<g class=\"series {}{}\" data-name=\"{}\">", cls,
                       s.css.empty() ? "" : " " + s.css, escape_html(s.name));
    if (s.line) {
      std::string pts;
      for (const Point& p : s.points)
        if (sx.valid(p.x) && sy.valid(p.y))
          pts += fmt::format("{:.1f},{:.1f} ", sx.map(p.x), sy.map(p.y));
      if (!pts.empty()) out += "<polyline class=\"line\" points=\"" + pts + "\"/>";
    }
    if (s.markers)
      for (const Point& p : s.points) {
        if (!sx.valid(p.x) || !sy.valid(p.y)) continue;
        out += fmt::format("<circle class=\"pt{}\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\"><title>{}"
                           "</title></circle>",
                           p.css.empty() ? "" : " " + p.css, sx.map(p.x), sy.map(p.y),
                           escape_html(point_title(p)));
      }
    out += "</g>";
    if (chart.legend && (chart.series.size() > 1 || !s.name.empty())) {
      out += fmt::format("<g class=\"legend {}\"><rect x=\"{:.0f}\" y=\"10\" width=\"10\" "
                         "height=\"10\"/><text x=\"{:.0f}\" y=\"19\">{}</text></g>",
                         cls, legend_x, legend_x + 14, escape_html(s.name));
      legend_x += 24 + 7.0 * static_cast<double>(s.name.size());
    }
  }
  return out + figure_close(chart.note);
}

std::string svg_bar_chart(const BarChart& chart) {
  const double label_w = 150, left = label_w + 10;
  const double group_h = 8.0 + 12.0 * static_cast<double>(chart.series.size());
  const double height = kTop + group_h * static_cast<double>(chart.categories.size()) + 24;
  double hi = 0;
  size_t bars = 0;
  for (const auto& [name, values] : chart.series)
    for (const auto& v : values)
      if (v && std::isfinite(*v)) hi = std::max(hi, *v), ++bars;
  if (hi <= 0) hi = 1;
  const double w = kWidth - left - 90;
  std::string out = fmt::format(
      "<figure class=\"chart bars\" id=\"{}\" data-points=\"{}\"><figcaption>{}</figcaption>"
      "<svg viewBox=\"0 0 {} {:.0f}\" width=\"{}\" height=\"{:.0f}\" role=\"img\">",
      escape_html(chart.id), bars, escape_html(chart.title), kWidth, height, kWidth, height);
  const auto fmt_value = [&](double v) {
    return chart.unit == "bytes" ? format_bytes(v) : short_number(v);
  };
  double legend_x = left;
  for (size_t k = 0; k < chart.series.size(); ++k) {
    out += fmt::format("<g class=\"legend s{}\"><rect x=\"{:.0f}\" y=\"10\" width=\"10\" "
                       "height=\"10\"/><text x=\"{:.0f}\" y=\"19\">{}</text></g>",
                       k % 8, legend_x, legend_x + 14, escape_html(chart.series[k].first));
    legend_x += 24 + 7.0 * static_cast<double>(chart.series[k].first.size());
  }
  for (size_t c = 0; c < chart.categories.size(); ++c) {
    const double y0 = kTop + group_h * static_cast<double>(c);
    out += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>",
                       label_w, y0 + group_h / 2 + 2, escape_html(chart.categories[c]));
    for (size_t k = 0; k < chart.series.size(); ++k) {
      const auto& v = chart.series[k].second.size() > c ? chart.series[k].second[c] : std::nullopt;
      if (!v || !std::isfinite(*v)) continue;
      const double y = y0 + 4 + 12.0 * static_cast<double>(k);
      const double bw = std::max(1.0, w * *v / hi);
      out += fmt::format("<rect class=\"bar s{}\" x=\"{}\" y=\"{:.1f}\" width=\"{:.1f}\" "
                         "height=\"10\"><title>{}: {} {}</title></rect>"
                         "<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\">{}</text>",
                         k % 8, left, y, bw, escape_html(chart.categories[c]),
                         escape_html(chart.series[k].first), escape_html(fmt_value(*v)),
                         left + bw + 4, y + 9, escape_html(fmt_value(*v)));
    }
  }
  return out + figure_close(chart.note);
}

std::string svg_parallel_chart(const ParallelChart& chart) {
  const size_t n_axes = chart.axes.size();
  std::vector<Scale> scales;
  const double span = kWidth - kLeft - 60;
  for (size_t a = 0; a < n_axes; ++a) {
    std::vector<double> values;
    for (const auto& row : chart.rows)
      if (a < row.size() && row[a]) values.push_back(*row[a]);
    Scale s = make_scale(chart.axes[a], values, kHeight - kBottom, kTop);
    scales.push_back(s);
  }
  const auto axis_x = [&](size_t a) {
    return n_axes <= 1 ? kLeft : kLeft + span * static_cast<double>(a) / (n_axes - 1);
  };
  double cmin = std::numeric_limits<double>::infinity(), cmax = -cmin;
  for (double c : chart.color)
    if (std::isfinite(c)) cmin = std::min(cmin, c), cmax = std::max(cmax, c);
  std::string out = figure_open(chart.id, chart.title, chart.rows.size(), "parallel");
  for (size_t i = 0; i < chart.rows.size(); ++i) {
    std::string d;
    bool pen_down = false;
    for (size_t a = 0; a < n_axes; ++a) {
      const auto& v = a < chart.rows[i].size() ? chart.rows[i][a] : std::nullopt;
      if (!v || !scales[a].valid(*v)) {
        pen_down = false;
        continue;
      }
      d += fmt::format("{}{:.1f},{:.1f} ", pen_down ? "L" : "M", axis_x(a), scales[a].map(*v));
      pen_down = true;
    }
    const double c = i < chart.color.size() ? chart.color[i] : 0;
    const double t = cmax > cmin ? (c - cmin) / (cmax - cmin) : 0.5;
    out += fmt::format("<path class=\"pc-line\" d=\"{}\" stroke=\"{}\"><title>{}</title></path>",
                       d, ramp_colour(t),
                       escape_html(i < chart.row_titles.size() ? chart.row_titles[i] : ""));
  }
  for (size_t a = 0; a < n_axes; ++a) {
    const double x = axis_x(a);
    out += fmt::format("<line class=\"pc-axis\" x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\"/>"
                       "<text class=\"axis-label\" x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">"
                       "{4}</text>",
                       x, kTop, kHeight - kBottom, kHeight - kBottom + 30,
                       escape_html(chart.axes[a].label));
    for (const auto& [v, label] : axis_ticks(chart.axes[a], scales[a], 4))
      out += fmt::format("<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\">{}</text>", x + 3,
                         scales[a].map(v) + 4, escape_html(label));
  }
  return out + figure_close(chart.note);
}

}  // namespace ftune::report

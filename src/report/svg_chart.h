// Charts as inline SVG, drawn in C++ (no JavaScript, no charting library): line and scatter
// charts, grouped bars, parallel coordinates. The same markup goes into the self-contained report
// file and the dashboard page. Every chart is a <figure class="chart" id=... data-points=N> whose
// SVG holds exactly N <circle class="pt"> (line/scatter) or <rect class="bar"> / <path
// class="pc-line"> marks, one per data point, each with a <title> tooltip, so tests (C++ and the
// browser) count what was drawn.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ftune::report {

struct Point {
  double x = 0, y = 0;
  std::string title;  // tooltip; empty: "x, y"
  std::string css;    // extra class on the mark (e.g. "pruned", "best")
};

struct Series {
  Series() = default;
  Series(std::string name_, std::vector<Point> points_ = {}, bool line_ = true,
         bool markers_ = true, std::string css_ = "")
      : name(std::move(name_)), points(std::move(points_)), line(line_), markers(markers_),
        css(std::move(css_)) {}
  std::string name;
  std::vector<Point> points;
  bool line = true;     // join the points (in order) with a polyline
  bool markers = true;  // draw a circle per point (counted in data-points)
  std::string css;      // extra class on the series' group (e.g. "pruned")
};

struct Axis {
  Axis() = default;
  Axis(std::string label_, bool log_ = false) : label(std::move(label_)), log(log_) {}
  std::string label;
  bool log = false;  // log10 scale (all values must be > 0; others are dropped)
  std::optional<double> min, max;  // fixed range; default: the data's
  std::vector<std::string> categories;  // categorical axis: value i is categories[i]
};

struct Chart {
  Chart() = default;
  Chart(std::string id_, std::string title_, Axis x_, Axis y_)
      : id(std::move(id_)), title(std::move(title_)), x(std::move(x_)), y(std::move(y_)) {}
  std::string id;     // the figure's element id
  std::string title;
  Axis x, y;
  std::vector<Series> series;
  std::string note;   // a line under the chart (what is plotted, what is missing)
  bool legend = true;  // false: no legend (many series, e.g. one per trial)
};

// A line / scatter chart (Series::line decides per series).
std::string svg_xy_chart(const Chart& chart);

// Grouped horizontal bars: one group per category, one bar per series value (bytes, counts...).
struct BarChart {
  BarChart() = default;
  BarChart(std::string id_, std::string title_, std::string unit_)
      : id(std::move(id_)), title(std::move(title_)), unit(std::move(unit_)) {}
  std::string id, title, unit;  // unit "bytes" formats values as KiB/MiB/GiB
  std::vector<std::string> categories;
  std::vector<std::pair<std::string, std::vector<std::optional<double>>>> series;
  std::string note;
};
std::string svg_bar_chart(const BarChart& chart);

// Parallel coordinates: one vertical axis per dimension, one polyline per row; the colour of a
// row follows `color` (its objective value). Missing values (nullopt) break the line there.
struct ParallelChart {
  std::string id, title;
  std::vector<Axis> axes;
  std::vector<std::vector<std::optional<double>>> rows;  // rows[i][axis]
  std::vector<double> color;                             // per row
  std::vector<std::string> row_titles;
  std::string note;
};
std::string svg_parallel_chart(const ParallelChart& chart);

// "Nice" tick values covering [lo, hi] (about `count` of them): 1, 2, 5 x 10^k steps.
std::vector<double> nice_ticks(double lo, double hi, int count);
// A short number for axis labels and tooltips (4 significant digits, SI-free).
std::string short_number(double v);
// 1536 -> "1.5 KiB".
std::string format_bytes(double bytes);
// Text with & < > " ' escaped for HTML and SVG.
std::string escape_html(const std::string& text);

}  // namespace ftune::report

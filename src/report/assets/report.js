// ftune report and dashboard: sortable, filterable tables (click a header to sort; type in the
// box above a table to keep the rows whose text contains every word). Inlined into each page;
// the charts are SVG drawn by ftune and need no script.
(function () {
  "use strict";
  function cellValue(row, col) {
    var cell = row.cells[col];
    if (!cell) return "";
    var raw = cell.getAttribute("data-value");
    var text = raw !== null ? raw : cell.textContent;
    var num = parseFloat(text);
    return isNaN(num) || !/^\s*[-+]?[0-9.]/.test(text) ? text.toLowerCase() : num;
  }
  function sortTable(table, col, th) {
    var body = table.tBodies[0];
    var asc = !th.classList.contains("sorted-asc");
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (c) {
      c.classList.remove("sorted-asc", "sorted-desc");
    });
    th.classList.add(asc ? "sorted-asc" : "sorted-desc");
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, col), y = cellValue(b, col);
      var missingX = x === "" , missingY = y === "";
      if (missingX !== missingY) return missingX ? 1 : -1;  // blanks last either way
      if (typeof x !== typeof y) { x = String(x); y = String(y); }
      return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  function filterTable(table, text) {
    var words = text.toLowerCase().split(/\s+/).filter(Boolean);
    Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
      var t = r.textContent.toLowerCase();
      r.style.display = words.every(function (w) { return t.indexOf(w) >= 0; }) ? "" : "none";
    });
  }
  function wire(root) {
    Array.prototype.forEach.call(root.querySelectorAll("table.sortable"), function (table) {
      if (table.getAttribute("data-wired")) return;
      table.setAttribute("data-wired", "1");
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
        th.addEventListener("click", function () { sortTable(table, col, th); });
      });
      var box = table.parentNode.querySelector("input.table-filter");
      if (box) box.addEventListener("input", function () { filterTable(table, box.value); });
    });
  }
  window.ftuneWire = wire;
  document.addEventListener("DOMContentLoaded", function () { wire(document); });
})();

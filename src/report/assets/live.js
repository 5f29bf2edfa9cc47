// ftune dashboard: live updates. The page polls its JSON endpoint (body data-api) every
// data-poll-ms milliseconds and replaces each section whose markup changed, keeping what the
// user typed in table filters; an error from the server (a locked or malformed database, the
// dashboard gone) shows in the red banner and the last good views stay.
(function () {
  "use strict";
  var api = document.body.getAttribute("data-api");
  if (!api) return;
  var pollMs = parseInt(document.body.getAttribute("data-poll-ms") || "2000", 10);
  var banner = document.getElementById("live-error");
  window.ftuneLive = { updates: 0, errors: 0 };
  var last = {};  // section id -> the markup last received for it
  function showError(text) {
    banner.textContent = text;
    banner.hidden = false;
    window.ftuneLive.errors++;
  }
  function apply(data) {
    if (data.error) { showError(data.error); return; }
    banner.hidden = true;
    banner.textContent = "";
    if (data.subtitle) document.getElementById("subtitle").textContent = data.subtitle;
    var main = document.querySelector("main");
    data.sections.forEach(function (s) {
      var old = document.getElementById(s.id);
      if (old && last[s.id] === s.html) return;
      last[s.id] = s.html;
      var filters = {};
      if (old) {
        Array.prototype.forEach.call(old.querySelectorAll("input.table-filter"), function (box, i) {
          filters[i] = box.value;
        });
      }
      var holder = document.createElement("div");
      holder.innerHTML = s.html;
      var fresh = holder.firstElementChild;
      if (old) old.parentNode.replaceChild(fresh, old); else main.appendChild(fresh);
      window.ftuneWire(fresh);
      Array.prototype.forEach.call(fresh.querySelectorAll("input.table-filter"), function (box, i) {
        if (filters[i]) { box.value = filters[i]; box.dispatchEvent(new Event("input")); }
      });
    });
    window.ftuneLive.updates++;
  }
  function poll() {
    fetch(api, { cache: "no-store" })
      .then(function (r) { return r.json(); })
      .then(apply)
      .catch(function (e) { showError("the dashboard cannot be reached: " + e); })
      .then(function () { setTimeout(poll, pollMs); });
  }
  setTimeout(poll, pollMs);
})();

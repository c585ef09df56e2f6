// redq dashboard: refreshes the live part of the page from its JSON form,
// keeps the last numbers (greyed) and a banner while Redis or the server
// cannot be reached, and asks before destructive actions.
(function () {
  "use strict";
  var body = document.body;
  var every = parseInt(body.dataset.refresh, 10) || 2000;
  var live = document.getElementById("live");
  var banner = document.getElementById("banner");
  var updated = document.getElementById("updated");
  var toggle = document.getElementById("live-toggle");
  var paused = false;
  var timer = null;
  var last = null;

  document.addEventListener("submit", function (e) {
    var msg = e.target.dataset && e.target.dataset.confirm;
    if (msg && !window.confirm(msg)) { e.preventDefault(); }
  });

  if (!live || body.dataset.live !== "1") { return; }

  function showDown(text) {
    if (text) {
      banner.textContent = text;
      banner.hidden = false;
    } else {
      banner.hidden = true;
      banner.textContent = "";
    }
  }

  function busy() {
    // Do not pull the page from under a reader who is selecting text.
    var sel = window.getSelection && window.getSelection();
    return sel && !sel.isCollapsed && live.contains(sel.anchorNode);
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(tick, every);
  }

  function tick() {
    if (paused || document.hidden || busy()) { schedule(); return; }
    fetch(window.location.href, { headers: { "X-Redq-Poll": "1" }, credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.json(); })
      .then(function (j) {
        // Replace only what changed, so a hovered chart keeps its tooltip.
        if (typeof j.html === "string" && j.html !== "" && j.html !== last) {
          live.innerHTML = j.html;
          last = j.html;
        }
        live.classList.toggle("stale", !!j.stale);
        showDown(j.down || "");
        if (j.updated && updated) {
          var d = new Date(j.updated);
          if (!isNaN(d) && d.getUTCFullYear() > 1) {
            updated.textContent = "updated " + d.toISOString().substring(11, 19) + " UTC";
          }
        }
      })
      .catch(function () {
        live.classList.add("stale");
        showDown("The dashboard server cannot be reached. The numbers shown are the last ones read; the page keeps trying.");
      })
      .then(schedule);
  }

  if (toggle) {
    toggle.addEventListener("click", function () {
      paused = !paused;
      toggle.textContent = paused ? "❚❚ paused" : "● live";
      toggle.classList.toggle("off", paused);
      if (!paused) { tick(); }
    });
  }
  document.addEventListener("visibilitychange", function () { if (!document.hidden) { tick(); } });
  schedule();
})();

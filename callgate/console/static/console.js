// callgate console: live pending list (server-sent events) and the time-left countdown.
// The page works without this file; it only keeps the list current.
"use strict";
(function () {
  function fmt(s) {
    if (s <= 0) return "expired";
    var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    if (h) return h + "h " + String(m).padStart(2, "0") + "m";
    if (m) return m + "m " + String(r).padStart(2, "0") + "s";
    return r + "s";
  }
  function tick() {
    var now = Date.now();
    document.querySelectorAll("time[data-expires]").forEach(function (t) {
      var left = Math.floor((Date.parse(t.dataset.expires) - now) / 1000);
      t.textContent = fmt(left);
      var card = t.closest(".card");
      if (card) card.classList.toggle("expired", left <= 0);
    });
  }
  setInterval(tick, 1000);
  var list = document.getElementById("pending");
  if (!list || !window.EventSource) return;
  var live = document.getElementById("live");
  var source = new EventSource(list.dataset.live);
  source.addEventListener("pending", function (e) {
    list.innerHTML = e.data;
    tick();
  });
  source.onopen = function () { if (live) live.hidden = false; };
  source.onerror = function () { if (live) live.hidden = true; };
})();

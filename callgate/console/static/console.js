// callgate console: live pending list (server-sent events) and the time-left countdown.
// The page works without this file; it only keeps the list current.
// A re-rendered list keeps what the person was doing: an opened approval step, a typed reason
// and the focus stay on their card; new calls are announced (aria-live). Approving always takes
// the second, card-local click that names the digest (docs/CONSOLE.md).
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
  var announce = document.getElementById("announce");
  function snapshot() {
    var state = {};
    list.querySelectorAll(".card").forEach(function (card) {
      var step = card.querySelector("details.approve-step");
      var note = card.querySelector("input[name=note]");
      var focused = card.contains(document.activeElement) ? document.activeElement : null;
      state[card.dataset.invocation] = {
        open: !!(step && step.open),
        note: note ? note.value : "",
        focus: focused ? (focused.name || focused.className) : null
      };
    });
    return state;
  }
  function restore(state) {
    var fresh = 0;
    list.querySelectorAll(".card").forEach(function (card) {
      var s = state[card.dataset.invocation];
      if (!s) { fresh += 1; return; }
      var step = card.querySelector("details.approve-step");
      var note = card.querySelector("input[name=note]");
      if (step) step.open = s.open;
      if (note) note.value = s.note;
      if (s.focus) {
        var el = card.querySelector("[name='" + s.focus + "']") || card.querySelector("." + s.focus.split(" ")[0]);
        if (el) el.focus({ preventScroll: true });
      }
    });
    return fresh;
  }
  var first = true;
  var source = new EventSource(list.dataset.live);
  source.addEventListener("pending", function (e) {
    var state = snapshot();
    list.innerHTML = e.data;
    var fresh = restore(state);
    if (!first && fresh && announce) {
      announce.textContent = fresh === 1 ? "1 new call waits (listed first)." : fresh + " new calls wait (listed first).";
      announce.hidden = false;
    }
    first = false;
    tick();
  });
  source.onopen = function () { if (live) live.hidden = false; };
  source.onerror = function () { if (live) live.hidden = true; };
})();

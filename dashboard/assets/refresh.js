// Reloads the page every data-refresh seconds (the body's attribute)
// while auto-refresh is on. The button in the header turns it off and on;
// this browser remembers the choice. Without this script the pages are
// the same, only static.
(function () {
  "use strict";
  var secs = Number(document.body.getAttribute("data-refresh") || 0);
  var btn = document.getElementById("autorefresh");
  if (!(secs > 0) || !btn) {
    return;
  }
  var store = "tokenbudget.autorefresh";
  var on = true;
  try {
    on = window.localStorage.getItem(store) !== "off";
  } catch (e) { /* no storage: on */ }
  var timer = 0;
  function busy() {
    // Not while the visitor is choosing a filter.
    var a = document.activeElement;
    return a && (a.tagName === "INPUT" || a.tagName === "SELECT");
  }
  function schedule() {
    window.clearTimeout(timer);
    if (!on) {
      return;
    }
    timer = window.setTimeout(function () {
      if (document.visibilityState === "hidden" || busy()) {
        schedule();
        return;
      }
      window.location.reload();
    }, secs * 1000);
  }
  function show() {
    btn.textContent = "auto-refresh: " + (on ? "on" : "off");
    btn.setAttribute("aria-pressed", on ? "true" : "false");
  }
  btn.addEventListener("click", function () {
    on = !on;
    try {
      window.localStorage.setItem(store, on ? "on" : "off");
    } catch (e) { /* not remembered */ }
    show();
    schedule();
  });
  btn.hidden = false;
  show();
  schedule();
}());

// Ground Control dashboard: polling manners, ticking clocks, and the copy button.
// No framework; htmx does the requests. Everything here degrades to a plain page without JS.
(function () {
  "use strict";

  // A hidden tab polls at most this often; a visible one at the interval in hx-trigger.
  var HIDDEN_POLL_MS = 30000;
  var lastHiddenPoll = {};

  document.addEventListener("htmx:configRequest", function (evt) {
    var elt = evt.detail.elt;
    if (!elt || !elt.hasAttribute || !elt.hasAttribute("data-poll")) return;
    if (document.hidden) {
      var now = Date.now();
      if (now - (lastHiddenPoll[elt.id] || 0) < HIDDEN_POLL_MS) {
        evt.preventDefault();
        return;
      }
      lastHiddenPoll[elt.id] = now;
    }
    // The server answers 204 (nothing to swap) when what we show is still current.
    if (elt.dataset.fp) evt.detail.headers["X-GC-Fingerprint"] = elt.dataset.fp;
  });

  // Coming back to the tab: refresh at once instead of waiting for the next tick.
  document.addEventListener("visibilitychange", function () {
    if (document.hidden || !window.htmx) return;
    document.querySelectorAll("[data-poll][data-fp]").forEach(function (elt) {
      window.htmx.trigger(elt, "gc:refresh");
    });
  });

  // Clocks tick in the browser between polls, offset by the server's time (the page says what
  // the database's time was when it rendered), so a skewed laptop clock does not matter.
  function offsetFor(elt) {
    var root = elt.closest("[data-now]");
    if (!root) return 0;
    if (root.dataset.offset === undefined) {
      root.dataset.offset = String(Date.parse(root.dataset.now) - Date.now());
    }
    return Number(root.dataset.offset);
  }

  function duration(seconds) {
    var s = Math.max(0, Math.floor(seconds));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + String(s % 60).padStart(2, "0") + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
    return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
  }

  function tick() {
    document.querySelectorAll("[data-since]").forEach(function (elt) {
      var now = Date.now() + offsetFor(elt);
      elt.textContent = duration((now - Date.parse(elt.dataset.since)) / 1000);
    });
    document.querySelectorAll("[data-until]").forEach(function (elt) {
      var now = Date.now() + offsetFor(elt);
      elt.textContent = duration((Date.parse(elt.dataset.until) - now) / 1000);
    });
  }
  setInterval(tick, 1000);

  // Copy a shown-once key to the clipboard.
  document.addEventListener("click", function (evt) {
    var button = evt.target.closest && evt.target.closest("[data-copy]");
    if (!button) return;
    var source = document.querySelector(button.dataset.copy);
    var status = button.parentElement.querySelector(".copy-status");
    var text = source ? source.textContent.trim() : "";
    function done(ok) { if (status) status.textContent = ok ? "Copied." : "Select the key and copy it by hand."; }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { done(true); }, function () { done(false); });
    } else {
      var range = document.createRange();
      range.selectNodeContents(source);
      var selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      var ok = false;
      try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
      done(ok);
    }
  });
})();

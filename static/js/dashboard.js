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

  // An instant `seconds` from now in words: the template tag `when`'s rule
  // (dashboard/templatetags/dashboard.py `relative`), which tests/lease_tree/test_times.py
  // holds this copy to, case by case.
  function amount(total, precise) {
    var minutes = Math.floor(total / 60), hours = Math.floor(total / 3600), days = Math.floor(total / 86400);
    if (total < 60) return total + " s";
    if (total < 3600) {
      return (precise || minutes < 10) ? minutes + " min " + String(total % 60).padStart(2, "0") + " s" : minutes + " min";
    }
    if (total < 86400) return hours + " h " + String(minutes % 60).padStart(2, "0") + " min";
    return days < 30 ? days + " d " + (hours % 24) + " h" : days + " d";
  }
  function relative(seconds, style) {
    var total = Math.floor(Math.abs(seconds));
    var words = amount(total, style !== "relative");
    if (style === "offset") return (seconds < 0 && total ? "-" : "+") + words;
    if (total === 0) return "now";
    return seconds > 0 ? "in " + words : words + " ago";
  }
  window.GroundControl = { relative: relative };

  function tick() {
    document.querySelectorAll("time[data-when]:not([data-when='offset'])").forEach(function (elt) {
      var now = Date.now() + offsetFor(elt);
      var text = relative((Date.parse(elt.getAttribute("datetime")) - now) / 1000, elt.dataset.when);
      if (elt.textContent !== text) elt.textContent = text;
    });
  }
  setInterval(tick, 1000);
  // New times (a swapped-in poll) read the server's clock at once, not at the next second.
  document.addEventListener("htmx:afterSettle", tick);
  document.addEventListener("DOMContentLoaded", tick);

  // Folded and unfolded directories of a tree (`<details data-fold="key">`): the supervisor's
  // choice, kept for the tab's life, outlives every poll that redraws the tree.
  var FOLDS = "gc:folds";
  function folds() {
    try { return JSON.parse(window.sessionStorage.getItem(FOLDS) || "{}"); } catch (e) { return {}; }
  }
  function applyFolds(root) {
    var kept = folds();
    (root || document).querySelectorAll("details[data-fold]").forEach(function (elt) {
      var choice = kept[elt.dataset.fold];
      if (choice !== undefined) elt.open = choice;
    });
  }
  function keep(kept) {
    try { window.sessionStorage.setItem(FOLDS, JSON.stringify(kept)); } catch (e) { /* private mode: not kept */ }
  }
  // A click on a directory's summary (the keyboard's Enter and Space click it too) is a choice;
  // what the server unfolds at first is not, so only clicks are kept.
  document.addEventListener("click", function (evt) {
    var summary = evt.target.closest && evt.target.closest("details[data-fold] > summary");
    if (!summary || evt.target.closest("a, button")) return;
    var elt = summary.parentElement;
    var kept = folds();
    kept[elt.dataset.fold] = !elt.open;  // the click's default action flips it next
    keep(kept);
  });
  // Before the new tree is shown, so a folded directory never flashes open.
  document.addEventListener("htmx:afterSwap", function (evt) { applyFolds(evt.target); });
  document.addEventListener("DOMContentLoaded", function () { applyFolds(document); });
  document.addEventListener("click", function (evt) {
    var button = evt.target.closest && evt.target.closest("[data-folds]");
    if (!button) return;
    var open = button.dataset.folds === "open";
    var kept = folds();
    document.querySelectorAll(button.dataset.scope + " details[data-fold]").forEach(function (elt) {
      elt.open = open;
      kept[elt.dataset.fold] = open;
    });
    keep(kept);
  });

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

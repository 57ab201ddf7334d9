/* flask_geneva admin: refresh the page's content in place (R-ADM-49).
 *
 * A page that wraps its content in <div id="geneva-live" data-geneva-refresh="N">
 * (the overview, both lists, the workflow page) is fetched again every N seconds
 * from the same URL, query string included, so filters, sorting and the page
 * number stay; the new #geneva-live replaces the old one and the scroll position
 * is kept. Nothing refreshes while the operator is busy with a form: a focused
 * field, a changed filter, a checked row or an open <details> holding a form.
 * The toolbar button pauses and resumes; the choice is remembered in
 * localStorage for every admin page. Without this script the pages are static.
 */
(function () {
  "use strict";
  var KEY = "geneva.admin.refresh";

  function paused() {
    try {
      return window.localStorage.getItem(KEY) === "paused";
    } catch (error) {
      return false;
    }
  }

  function remember(isPaused) {
    try {
      if (isPaused) {
        window.localStorage.setItem(KEY, "paused");
      } else {
        window.localStorage.removeItem(KEY);
      }
    } catch (error) {
      /* private mode: the choice lasts for this page only */
    }
  }

  function fieldChanged(field) {
    if (field.type === "checkbox" || field.type === "radio") {
      return field.checked !== field.defaultChecked;
    }
    if (field.tagName === "SELECT") {
      /* Without a selected="" option the first one is the default. */
      var initial = 0;
      for (var i = 0; i < field.options.length; i++) {
        if (field.options[i].defaultSelected) {
          initial = i;
        }
      }
      return field.selectedIndex !== initial;
    }
    if (field.type === "hidden" || field.type === "submit" || field.type === "button") {
      return false;
    }
    return field.value !== field.defaultValue;
  }

  /* Is the operator in the middle of something a refresh would throw away? */
  function busy(live) {
    var active = document.activeElement;
    /* Typing or choosing in a field (a focused checkbox is just a click). */
    if (active && live.contains(active) && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName) &&
        active.type !== "checkbox" && active.type !== "radio") {
      return true;
    }
    var fields = live.querySelectorAll("input, select, textarea");
    for (var i = 0; i < fields.length; i++) {
      if (fieldChanged(fields[i])) {
        return true;
      }
    }
    var details = live.querySelectorAll("details[open]");
    for (var j = 0; j < details.length; j++) {
      if (details[j].querySelector("form")) {
        return true;
      }
    }
    return false;
  }

  function start() {
    var live = document.getElementById("geneva-live");
    var button = document.querySelector("[data-geneva-refresh-toggle]");
    var seconds = live ? parseInt(live.getAttribute("data-geneva-refresh"), 10) : 0;
    if (!live || !(seconds > 0)) {
      return;
    }
    var isPaused = paused();
    var timer = null;
    var inFlight = false;

    function label() {
      if (!button) {
        return;
      }
      button.hidden = false;
      button.textContent = isPaused ? "Auto-refresh paused" : "Auto-refresh on";
      button.setAttribute("aria-pressed", isPaused ? "true" : "false");
      button.title = isPaused
        ? "Resume refreshing this page every " + seconds + " s"
        : "This page refreshes every " + seconds + " s; click to pause";
    }

    function schedule() {
      window.clearTimeout(timer);
      if (!isPaused) {
        timer = window.setTimeout(tick, seconds * 1000);
      }
    }

    function tick() {
      if (isPaused || inFlight || document.hidden || busy(live)) {
        schedule();
        return;
      }
      inFlight = true;
      var url = window.location.href.split("#")[0];
      window.fetch(url, {
        credentials: "same-origin",
        cache: "no-store",
        headers: { "X-Geneva-Refresh": "1" }
      }).then(function (response) {
        /* Signed out, gone or failing: keep what is shown, try again later. */
        if (!response.ok || response.redirected) {
          return null;
        }
        return response.text();
      }).then(function (html) {
        if (html === null || isPaused || busy(live)) {
          return;
        }
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("geneva-live");
        if (!fresh) {
          return;
        }
        var x = window.scrollX;
        var y = window.scrollY;
        live.innerHTML = fresh.innerHTML;
        window.scrollTo(x, y);
        live.setAttribute("data-geneva-refreshed-at", String(Date.now()));
        document.dispatchEvent(new CustomEvent("geneva:refreshed"));
      }).catch(function () {
        /* Offline for a moment: try again at the next tick. */
      }).then(function () {
        inFlight = false;
        schedule();
      });
    }

    if (button) {
      button.addEventListener("click", function () {
        isPaused = !isPaused;
        remember(isPaused);
        label();
        schedule();
      });
    }
    label();
    schedule();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();

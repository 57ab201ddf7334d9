/* flask_geneva admin: switch exact times between UTC and local time (R-ADM-41).
 *
 * The server renders every time as <time datetime="...Z">: the relative phrase
 * ("3 h ago") with the exact UTC time as its title, or the exact UTC time as its
 * text on detail pages. This script only rewrites those exact texts to local time
 * when the operator picks "Local time", and remembers the choice in localStorage.
 * Without it the pages read the same, in UTC.
 */
(function () {
  "use strict";
  var KEY = "geneva.admin.timezone";

  function pad(n) {
    return (n < 10 ? "0" : "") + n;
  }

  function offsetLabel(date) {
    var minutes = -date.getTimezoneOffset();
    var sign = minutes < 0 ? "-" : "+";
    minutes = Math.abs(minutes);
    return "UTC" + sign + pad(Math.floor(minutes / 60)) + ":" + pad(minutes % 60);
  }

  function format(date, zone) {
    if (zone === "local") {
      return date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) +
        " " + pad(date.getHours()) + ":" + pad(date.getMinutes()) + ":" + pad(date.getSeconds()) +
        " " + offsetLabel(date);
    }
    return date.getUTCFullYear() + "-" + pad(date.getUTCMonth() + 1) + "-" + pad(date.getUTCDate()) +
      " " + pad(date.getUTCHours()) + ":" + pad(date.getUTCMinutes()) + ":" + pad(date.getUTCSeconds()) +
      " UTC";
  }

  function readChoice() {
    try {
      return window.localStorage.getItem(KEY) === "local" ? "local" : "utc";
    } catch (error) {
      return "utc";
    }
  }

  function apply(zone, button) {
    var times = document.querySelectorAll("time.geneva-time[datetime]");
    for (var i = 0; i < times.length; i++) {
      var element = times[i];
      var date = new Date(element.getAttribute("datetime"));
      if (isNaN(date.getTime())) {
        continue;
      }
      var text = format(date, zone);
      if (element.classList.contains("geneva-time--exact")) {
        element.textContent = text;
      } else {
        element.setAttribute("title", text);
      }
    }
    document.documentElement.setAttribute("data-geneva-zone", zone);
    if (button) {
      button.textContent = zone === "local" ? "Local time" : "UTC";
      button.setAttribute("aria-pressed", zone === "local" ? "true" : "false");
    }
  }

  function start() {
    var button = document.querySelector("[data-geneva-tz]");
    var zone = readChoice();
    if (button) {
      button.hidden = false;
      button.addEventListener("click", function () {
        zone = zone === "local" ? "utc" : "local";
        try {
          window.localStorage.setItem(KEY, zone);
        } catch (error) {
          /* private mode: the choice lasts for this page only */
        }
        apply(zone, button);
      });
    }
    apply(zone, button);
    /* refresh.js replaced the content: its new times are in UTC again. */
    document.addEventListener("geneva:refreshed", function () {
      apply(zone, button);
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();

// Live regions: an element with data-live-url is refreshed from that URL (an HTML fragment)
// every data-live-interval milliseconds, so queue and job pages update without a reload.
// Vanilla JS, no dependency: it must work offline.
(function () {
  "use strict";

  function refresh(region) {
    var url = region.getAttribute("data-live-url");
    return fetch(url, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (response) {
        if (response.redirected) {
          // The session ended (the fragment redirected to the login page): reload the page so
          // the user signs in again, instead of pasting a login form into the region.
          window.location.reload();
          throw new Error("redirected");
        }
        if (!response.ok) {
          throw new Error(url + " answered " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        // Keep the page as it is while the user is typing or a form is focused in the region.
        if (region.contains(document.activeElement) && document.activeElement.tagName !== "BODY") {
          return;
        }
        region.innerHTML = html;
        region.setAttribute("data-live-updated", String(Date.now()));
        region.classList.remove("live-stale");
      })
      .catch(function () {
        // A failed poll (server restarting, network blip) marks the region stale; the next
        // poll tries again.
        region.classList.add("live-stale");
      });
  }

  function start(region) {
    var interval = parseInt(region.getAttribute("data-live-interval"), 10) || 3000;
    function schedule() {
      window.setTimeout(function () {
        if (document.hidden) {
          schedule(); // a hidden tab does not poll
          return;
        }
        refresh(region).then(schedule, schedule);
      }, interval);
    }
    schedule();
  }

  function init() {
    var regions = document.querySelectorAll("[data-live-url]");
    for (var i = 0; i < regions.length; i++) {
      start(regions[i]);
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();

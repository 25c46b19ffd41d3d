// Dashboards: draws the figures the page embeds (#dashboard-data) with Plotly.js, redraws them
// from the data endpoint when a filter changes (keeping the URL shareable), polls it every
// minute for live ranges, keeps the CSV links in step with the filters, and saves PNGs.
// Vanilla JS, no dependency but Plotly.js (served by gpugov itself: it must work offline).
(function () {
  "use strict";

  var POLL_MS = 60000;
  var form = document.querySelector(".dashboard-filters");
  var status = document.getElementById("dashboard-status");
  var config = { responsive: true, displaylogo: false };
  var pollTimer = null;

  function draw(data) {
    data.charts.forEach(function (chart) {
      var element = document.getElementById("chart-" + chart.key);
      if (element) {
        Plotly.react(element, chart.figure.data, chart.figure.layout, config);
      }
    });
    var w = data.window;
    status.textContent = w.resolution + " resolution" + (w.live ? ", refreshed every minute" : "") +
      " (updated " + new Date().toLocaleTimeString() + ")";
    schedulePoll(w.live);
  }

  function queryString() {
    var params = new URLSearchParams(new FormData(form));
    // Empty selections are the defaults: keep shared URLs short.
    Array.from(params.keys()).forEach(function (key) {
      if (params.getAll(key).every(function (v) { return v === ""; })) {
        params.delete(key);
      }
    });
    return params.toString();
  }

  function updateLinks(query) {
    document.querySelectorAll(".csv-link").forEach(function (link) {
      link.href = link.getAttribute("data-csv-base") + (query ? "?" + query : "");
    });
  }

  function load(pushHistory) {
    var query = queryString();
    var url = form.getAttribute("data-data-url") + (query ? "?" + query : "");
    form.classList.add("loading");
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        return response.json().then(function (body) {
          if (!response.ok) {
            throw new Error(Object.values(body.errors || {}).join("; ") || "HTTP " + response.status);
          }
          return body;
        });
      })
      .then(function (data) {
        if (pushHistory) {
          window.history.pushState(null, "", "?" + query);
        }
        updateLinks(query);
        draw(data);
        form.classList.remove("loading", "stale");
      })
      .catch(function (error) {
        form.classList.remove("loading");
        form.classList.add("stale");
        status.textContent = "Could not refresh: " + error.message;
        schedulePoll(true);
      });
  }

  function schedulePoll(live) {
    window.clearTimeout(pollTimer);
    if (!live) {
      return;
    }
    pollTimer = window.setTimeout(function () {
      if (document.hidden) {
        schedulePoll(true); // a hidden tab does not poll
        return;
      }
      load(false);
    }, POLL_MS);
  }

  form.addEventListener("change", function () {
    load(true);
  });
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    load(true);
  });
  window.addEventListener("popstate", function () {
    window.location.reload();
  });
  document.querySelectorAll(".png-button").forEach(function (button) {
    button.addEventListener("click", function () {
      var key = button.getAttribute("data-png");
      Plotly.downloadImage(document.getElementById("chart-" + key), {
        format: "png", width: 1200, height: 500, filename: key
      });
    });
  });

  draw(JSON.parse(document.getElementById("dashboard-data").textContent));
})();

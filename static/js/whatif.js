// The what-if run page: a progress bar fed by the run's status endpoint (polled every second
// until the run ends, then the page reloads to show the results), and the results' charts.
(function () {
  "use strict";

  function drawCharts() {
    var data = document.getElementById("whatif-charts");
    if (!data || !window.Plotly) return;
    var figures = JSON.parse(data.textContent);
    document.querySelectorAll("[data-chart]").forEach(function (el) {
      var figure = figures[el.dataset.chart];
      if (figure) window.Plotly.newPlot(el, figure.data, figure.layout, { responsive: true, displaylogo: false });
    });
  }

  function show(status) {
    var percent = Math.round(100 * status.progress);
    document.getElementById("run-progress").value = percent;
    document.getElementById("run-percent").textContent = percent + "%";
    document.getElementById("run-message").textContent = status.message || "";
    var state = document.getElementById("run-state");
    state.textContent = status.state;
    state.className = "badge badge-" + status.state;
  }

  function poll(section) {
    fetch(section.dataset.statusUrl, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) {
        if (response.redirected || !response.ok) throw new Error("status " + response.status);
        return response.json();
      })
      .then(function (status) {
        show(status);
        if (status.finished) {
          window.location.reload();
        } else {
          window.setTimeout(function () { poll(section); }, 1000);
        }
      })
      .catch(function () {
        // A signed-out session or a restarting server: try again a little later.
        window.setTimeout(function () { poll(section); }, 3000);
      });
  }

  document.addEventListener("DOMContentLoaded", function () {
    drawCharts();
    var section = document.getElementById("run-status");
    if (section && ["queued", "running"].indexOf(section.dataset.state) >= 0) poll(section);
  });
})();

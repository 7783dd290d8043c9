// Draws the page's charts from the Plotly specs embedded in it (script elements with data-chart); fetches nothing.
(function () {
  "use strict";
  function draw() {
    var specs = document.querySelectorAll("script[data-chart]");
    var drawn = 0;
    specs.forEach(function (el) {
      var target = document.getElementById(el.getAttribute("data-chart"));
      if (!target || typeof Plotly === "undefined") { return; }
      var spec = JSON.parse(el.textContent);
      var config = {displaylogo: false, responsive: true, modeBarButtonsToRemove: ["sendDataToCloud"]};
      Plotly.newPlot(target, spec.data, spec.layout || {}, config).then(function () {
        target.setAttribute("data-drawn", "true");
        drawn += 1;
        if (drawn === specs.length) { document.body.setAttribute("data-charts-drawn", String(drawn)); }
      });
    });
    if (!specs.length) { document.body.setAttribute("data-charts-drawn", "0"); }
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", draw); } else { draw(); }
})();

// swizzlelab leaderboard pages: draws the plots (Plotly) from the JSON each page embeds, and keeps the
// submit form's token in this browser's localStorage (never in a URL). The pages work without this file.
// Plotly (4.8 MB) is fetched only after the page has loaded, so the ranking shows at once and the plots follow.
(function () {
  "use strict";
  var TOKEN_KEY = "swizzlelab-token";

  function dark() {
    return window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  }

  function drawPlots() {
    if (!window.Plotly) return;
    var nodes = document.querySelectorAll("[data-plot]");
    var fg = dark() ? "#e6edf3" : "#1b1f24";
    var grid = dark() ? "#30363d" : "#d8dee4";
    nodes.forEach(function (node) {
      var source = document.getElementById(node.getAttribute("data-plot"));
      if (!source) return;
      var spec = JSON.parse(source.textContent);
      if (!spec.traces.length) return;
      var layout = Object.assign({
        paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
        font: { color: fg, size: 12 }, margin: { l: 60, r: 10, t: 30, b: 50 },
        legend: { orientation: "h", y: -0.25 },
        xaxis: { title: { text: spec.x_title }, gridcolor: grid, type: "date" },
        yaxis: { title: { text: spec.y_title }, gridcolor: grid, type: spec.y_log ? "log" : "linear" },
        title: { text: spec.title, font: { size: 14 } }
      }, spec.layout || {});
      if (spec.x_range) layout.xaxis.range = spec.x_range;
      var traces = spec.traces.map(function (t) {
        return {
          x: t.x, y: t.y, text: t.text, name: t.name, type: "scatter",
          mode: t.mode || "lines+markers", line: { shape: t.step ? "hv" : "linear" },
          marker: { size: t.marker_size || 6 }, hovertemplate: "%{text}<extra>%{fullData.name}</extra>"
        };
      });
      node.textContent = "";
      node.setAttribute("data-drawn", "0");  // takes its height (CSS) before Plotly measures the width
      window.Plotly.newPlot(node, traces, layout, { responsive: true, displaylogo: false });
      node.setAttribute("data-drawn", "1");
    });
    window.__plotsDrawnAt = performance.now();
  }

  function loadPlotly() {
    var nodes = document.querySelectorAll("[data-plot-src]");
    if (!nodes.length) return;
    var script = document.createElement("script");
    script.src = nodes[0].getAttribute("data-plot-src");
    script.onload = drawPlots;
    document.head.appendChild(script);
  }

  function tokenForm() {
    var form = document.getElementById("submit-form");
    if (!form) return;
    var input = form.querySelector("input[name=token]");
    var remember = form.querySelector("input[name=remember]");
    var saved = null;
    try { saved = window.localStorage.getItem(TOKEN_KEY); } catch (e) { saved = null; }
    if (saved && input && !input.value) {
      input.value = saved;
      if (remember) remember.checked = true;
    }
    form.addEventListener("submit", function () {
      try {
        if (remember && remember.checked && input.value) window.localStorage.setItem(TOKEN_KEY, input.value);
        else if (remember && !remember.checked) window.localStorage.removeItem(TOKEN_KEY);
      } catch (e) { /* storage may be disabled; the form still posts the token in its body */ }
    });
    var forget = document.getElementById("forget-token");
    if (forget) forget.addEventListener("click", function (ev) {
      ev.preventDefault();
      try { window.localStorage.removeItem(TOKEN_KEY); } catch (e) {}
      if (input) input.value = "";
      if (remember) remember.checked = false;
    });
  }

  document.addEventListener("DOMContentLoaded", tokenForm);
  window.addEventListener("load", function () { window.setTimeout(loadPlotly, 0); });
})();

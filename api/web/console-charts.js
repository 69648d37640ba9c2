// The console's charts: uPlot (fetched by `make setup` into /ui/vendor/, never from a CDN) over
// the numbers the server gives, each with the same numbers as a table for screen readers and for
// a server without uPlot. A chart's <figure> carries data-points (the x values drawn) and keeps
// its uPlot instance as figure.chart, so tests check the data drawn rather than pixels.
"use strict";

window.citewiseCharts = (() => {
  const { el } = window.citewise;
  let loading = null;

  // Whether uPlot is served here: /ui/vendor/ lists the vendor files, so a server without them
  // is never asked for a file it does not have. Resolves to true once uPlot is loaded.
  function load() {
    if (loading) return loading;
    loading = (async () => {
      try {
        const listed = await (await fetch("/ui/vendor/", { credentials: "same-origin" })).json();
        if (!listed.files.includes("uPlot.iife.min.js")) return false;
        document.head.append(el("link", { rel: "stylesheet", href: "/ui/vendor/uPlot.min.css" }));
        await new Promise((resolve, reject) => {
          document.head.append(el("script", { src: "/ui/vendor/uPlot.iife.min.js", onload: resolve, onerror: reject }));
        });
        return typeof window.uPlot === "function";
      } catch (_) { return false; }
    })();
    return loading;
  }

  // Colours from the page's own palette, read when a chart is drawn: light or dark as the page is.
  function palette() {
    const css = getComputedStyle(document.documentElement);
    const v = (name) => css.getPropertyValue(name).trim();
    return { fg: v("--fg"), muted: v("--muted"), line: v("--line"),
      series: [v("--chart-1"), v("--chart-2"), v("--chart-3"), v("--chart-4")] };
  }

  const utc = (seconds, withTime) => {
    const iso = new Date(seconds * 1000).toISOString();
    return withTime ? `${iso.slice(0, 16).replace("T", " ")} UTC` : iso.slice(0, 10);
  };

  function table(caption, xLabel, xs, series, xText) {
    return el("table", { class: "data" },
      el("caption", { text: caption }),
      el("thead", {}, el("tr", {}, el("th", { scope: "col", text: xLabel }), series.map((s) => el("th", { scope: "col", text: s.label })))),
      el("tbody", {}, xs.map((x, i) => el("tr", {}, el("th", { scope: "row", text: xText(x) }),
        series.map((s) => el("td", { text: s.format ? s.format(s.values[i]) : String(s.values[i] ?? "–") }))))));
  }

  // A time-series chart: xs are ISO 8601 times, each series {label, values, format?}.
  // The table behind it is in a <details> under the chart (or shown open when uPlot is absent).
  async function timeChart(host, { title, times, series, hourly = false, height = 180 }) {
    const xs = times.map((t) => Date.parse(t) / 1000);
    const figure = el("figure", { class: "chart", "data-points": xs.length, "data-series": series.length });
    const data = el("details", { class: "chart-table" }, el("summary", { text: `${title}: the numbers` }),
      table(title, hourly ? "Hour" : "Day", xs, series, (x) => utc(x, hourly)));
    figure.append(el("figcaption", { text: title }));
    const plot = el("div", { class: "plot", role: "img", "aria-label": `${title}: chart; the table below has the same numbers` });
    figure.append(plot, data);
    host.append(figure);
    if (!(await load())) {
      plot.replaceWith(el("p", { class: "hint", text: "No chart: this server has no chart library (make setup fetches uPlot into api/web/vendor/). The numbers:" }));
      data.open = true;
      return figure;
    }
    const colours = palette();
    const axis = { stroke: colours.muted, grid: { stroke: colours.line, width: 1 }, ticks: { stroke: colours.line } };
    const width = Math.max(260, Math.floor(plot.getBoundingClientRect().width) || 520);
    figure.chart = new window.uPlot({
      width, height,
      scales: { x: { time: true } },
      axes: [axis, { ...axis, size: 56 }],
      series: [{ value: (_, x) => (x == null ? "–" : utc(x, hourly)) },
        ...series.map((s, i) => ({ label: s.label, stroke: colours.series[i % colours.series.length], width: 2,
          points: { show: xs.length <= 31 }, value: (_, y) => (y == null ? "–" : s.format ? s.format(y) : String(y)) }))],
      legend: { show: true },
    }, [xs, ...series.map((s) => s.values)], plot);
    // Follow the column's width when the window (or the layout) changes.
    new ResizeObserver(() => {
      const now = Math.floor(plot.getBoundingClientRect().width);
      if (now >= 200 && now !== figure.chart.width) figure.chart.setSize({ width: now, height });
    }).observe(plot);
    return figure;
  }

  // A sparkline: a tiny chart of one series (a source's last runs), no axes, with its table.
  // Its y axis starts at 0, so that a run twice as long looks twice as high.
  async function sparkline(host, { title, caption, labels, values, format }) {
    const figure = el("figure", { class: "spark", "data-points": values.length, title });
    const plot = el("span", { class: "plot", role: "img", "aria-label": `${title}: sparkline; the table has the numbers` });
    figure.append(el("figcaption", { text: caption }), plot);
    figure.append(el("details", { class: "chart-table" }, el("summary", { text: "the numbers" }),
      table(title, "Run", labels, [{ label: title, values, format }], String)));
    host.append(figure);
    if (!values.length) { plot.textContent = "no runs yet"; return figure; }
    if (!(await load())) { plot.textContent = "(no chart library: see the numbers)"; return figure; }
    const colours = palette();
    const top = Math.max(0, ...values.filter((v) => v != null));
    figure.chart = new window.uPlot({
      width: 140, height: 34, padding: [3, 3, 3, 3], cursor: { show: false }, legend: { show: false }, select: { show: false },
      scales: { x: { time: false, range: [-0.5, values.length - 0.5] }, y: { range: [0, top > 0 ? top * 1.1 : 1] } },
      axes: [{ show: false }, { show: false }],
      series: [{}, { stroke: colours.series[0], width: 1.5, points: { show: values.length <= 2, size: 5, fill: colours.series[0] } }],
    }, [values.map((_, i) => i), values], plot);
    return figure;
  }

  return { load, timeChart, sparkline };
})();

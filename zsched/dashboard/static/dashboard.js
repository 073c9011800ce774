// zsched dashboard: polls the driver's api/status every second and redraws the page from
// its snapshot: header, summary figures, executors table, two canvas charts and losses.
"use strict";

(function () {
  const POLL_MS = 1000;
  // the page's own query (?token=...) goes along, so two dashboards on one host each keep
  // their token; without it the cookie the server set authenticates the request
  const STATUS_URL = "api/status" + window.location.search;
  const RATE_WINDOW = 4;  // tasks/s over this many history intervals (0.5 s each)

  const numberFormat = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
  const decimalFormat = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });

  const byId = (id) => document.getElementById(id);
  const count = (n) => (n === undefined || n === null ? "–" : numberFormat.format(n));
  const decimal = (n) => (n === undefined || n === null ? "–" : decimalFormat.format(n));
  const clock = (t) => new Date(t * 1000).toLocaleTimeString();

  function setText(element, text) {
    if (element.textContent !== text) element.textContent = text;
  }

  // ---- polling ----

  async function poll() {
    try {
      const response = await fetch(STATUS_URL, { credentials: "same-origin", cache: "no-store" });
      if (!response.ok) throw new Error("HTTP " + response.status);
      render(await response.json());
      showConnection(true, "live");
    } catch (error) {
      showConnection(false, "driver unreachable (" + error.message + ")");
    } finally {
      window.setTimeout(poll, POLL_MS);
    }
  }

  function showConnection(ok, text) {
    const status = byId("status");
    status.className = "status " + (ok ? "live" : "unreachable");
    setText(status, text);
  }

  // ---- rendering ----

  function render(snapshot) {
    const executors = snapshot.executors || [];
    const tasks = snapshot.tasks || {};
    const history = snapshot.history || [];
    const throughput = throughputPoints(history);

    setText(byId("meta-app-id"), snapshot.app_id || "–");
    setText(byId("meta-url"), snapshot.url || "–");
    setText(byId("meta-fast-path"), snapshot.fast_path || "–");
    setText(byId("meta-allocation"), describeAllocation(snapshot.allocation));
    setText(byId("meta-updated"), snapshot.time ? clock(snapshot.time) : "–");

    setText(byId("summary-executors"), count(executors.length));
    setText(byId("summary-cores"), count(executors.reduce((sum, e) => sum + (e.cores || 0), 0)));
    for (const key of ["queued", "running", "finished", "failed", "retried"]) {
      setText(byId("summary-" + key), count(tasks[key]));
    }
    setText(byId("summary-rate"), throughput.length ? decimal(throughput[throughput.length - 1][1]) : "–");

    renderExecutors(executors);
    drawChart(byId("chart-throughput"), throughput, "tasks/s");
    drawChart(byId("chart-queue"), history.map((p) => [p[0], p[3]]), "queued");
    renderLosses(snapshot.losses || []);
    renderExcluded(snapshot.excluded || {});
  }

  function describeAllocation(allocation) {
    if (!allocation) return "none (fixed executors)";
    let text = "target " + count(allocation.target) + ", starting " + count(allocation.starting);
    if (allocation.capacity !== null && allocation.capacity !== undefined) text += ", capacity " + count(allocation.capacity);
    if (allocation.dynamic) text += ", dynamic";
    return text;
  }

  // [t, tasks/s] from consecutive history points of the running total of finished tasks
  function throughputPoints(history) {
    const points = [];
    for (let i = 1; i < history.length; i++) {
      const j = Math.max(0, i - RATE_WINDOW);
      const seconds = history[i][0] - history[j][0];
      if (seconds > 0) points.push([history[i][0], Math.max(0, (history[i][1] - history[j][1]) / seconds)]);
    }
    return points;
  }

  const EXECUTOR_COLUMNS = [  // [class of the cell, text of the cell]
    ["num", (e) => String(e.id)],
    ["", (e) => e.host || "–"],
    ["state", (e) => e.state || "–"],
    ["num", (e) => count(e.cores)],
    ["num", (e) => count(e.free_slots)],
    ["num", (e) => count(e.running)],
    ["num", (e) => count(e.tasks_done)],
    ["num", (e) => count(e.tasks_failed)],
    ["num", (e) => (e.rss === undefined || e.rss === null ? "–" : decimal(e.rss / 1048576))],
    ["num", (e) => decimal(e.cpu)],
    ["num", (e) => decimal(e.last_heartbeat_age)],
  ];

  function compareIds(a, b) {
    const x = Number(a.id), y = Number(b.id);
    if (Number.isNaN(x) || Number.isNaN(y)) return String(a.id).localeCompare(String(b.id));
    return x - y;
  }

  // rows are kept and updated in place, so a selection in the table survives a poll
  function renderExecutors(executors) {
    const tbody = document.querySelector("#executors tbody");
    const existing = new Map(Array.from(tbody.rows, (row) => [row.dataset.executorId, row]));
    const rows = executors.slice().sort(compareIds).map((executor) => {
      let row = existing.get(String(executor.id));
      if (!row) {
        row = document.createElement("tr");
        row.dataset.executorId = String(executor.id);
        for (const [cellClass] of EXECUTOR_COLUMNS) row.insertCell().className = cellClass;
      }
      row.className = "state-" + executor.state;
      EXECUTOR_COLUMNS.forEach(([, text], i) => setText(row.cells[i], text(executor)));
      return row;
    });
    if (rows.length !== tbody.rows.length || rows.some((row, i) => tbody.rows[i] !== row)) {
      tbody.replaceChildren(...rows);
    }
    byId("executors-empty").hidden = rows.length > 0;
  }

  let shownLosses = "";

  function renderLosses(losses) {
    const key = JSON.stringify(losses);
    if (key === shownLosses) return;
    shownLosses = key;
    const items = losses.slice().sort((a, b) => b.time - a.time).map((loss) => {
      const item = document.createElement("li");
      const time = document.createElement("time");
      time.dateTime = new Date(loss.time * 1000).toISOString();
      time.textContent = clock(loss.time);
      const reason = document.createElement("span");
      reason.className = "reason";
      reason.textContent = loss.reason;
      item.append(time, "executor " + loss.id + " on " + loss.host + ": ", reason);
      return item;
    });
    byId("losses").replaceChildren(...items);
    byId("losses-empty").hidden = items.length > 0;
  }

  let shownExcluded = "";

  // executors and hosts excluded for their failures (exclude_on_failure), with why
  function renderExcluded(excluded) {
    const key = JSON.stringify(excluded);
    if (key === shownExcluded) return;
    shownExcluded = key;
    const suspended = excluded.suspended ? " (not applied: it would leave no executor)" : "";
    const line = (what, entry) => {
      const item = document.createElement("li");
      const reason = document.createElement("span");
      reason.className = "reason";
      reason.textContent = entry.reason;
      item.append(what + ", " + decimal(entry.seconds_left) + " s left" + suspended + ": ", reason);
      return item;
    };
    const items = [
      ...(excluded.hosts || []).map((h) => line("host " + h.host, h)),
      ...(excluded.executors || []).map((e) => line("executor " + e.executor_id + " on " + e.host, e)),
    ];
    byId("excluded").replaceChildren(...items);
    byId("excluded-empty").hidden = items.length > 0;
  }

  // ---- charts ----

  // a round axis maximum at or above value: 1, 2 or 5 times a power of ten
  function niceMax(value) {
    if (!(value > 0)) return 1;
    const power = Math.pow(10, Math.floor(Math.log10(value)));
    for (const step of [1, 2, 5, 10]) if (step * power >= value) return step * power;
    return 10 * power;
  }

  // points: [[t (s, wall clock), value], ...] oldest first; draws a line over time with a
  // y axis from 0, time labels relative to the last point and the current value
  function drawChart(canvas, points, unit) {
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth, height = canvas.clientHeight;
    if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);

    const style = window.getComputedStyle(canvas);
    const axisColor = style.color;
    const lineColor = style.getPropertyValue("--chart-line").trim() || axisColor;
    ctx.font = "11px " + style.fontFamily;
    ctx.fillStyle = axisColor;
    ctx.strokeStyle = axisColor;
    ctx.lineWidth = 1;

    const left = 52, right = 10, top = 22, bottom = 22;
    const plotWidth = width - left - right, plotHeight = height - top - bottom;
    const last = points.length ? points[points.length - 1] : null;
    const yMax = niceMax(Math.max(0, ...points.map((p) => p[1])));
    const tEnd = last ? last[0] : 0;
    const tStart = points.length > 1 ? points[0][0] : tEnd - 1;
    const x = (t) => left + ((t - tStart) / Math.max(tEnd - tStart, 1e-9)) * plotWidth;
    const y = (v) => top + plotHeight - (v / yMax) * plotHeight;

    // y axis: grid lines and labels at 0, 1/2 and all of yMax
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (const fraction of [0, 0.5, 1]) {
      const v = yMax * fraction;
      ctx.globalAlpha = 0.3;
      ctx.beginPath();
      ctx.moveTo(left, Math.round(y(v)) + 0.5);
      ctx.lineTo(left + plotWidth, Math.round(y(v)) + 0.5);
      ctx.stroke();
      ctx.globalAlpha = 1;
      ctx.fillText(decimal(v), left - 6, y(v));
    }
    ctx.textAlign = "left";
    ctx.textBaseline = "top";
    ctx.fillText(unit, 4, 2);

    // x axis: seconds before the last point
    ctx.textBaseline = "bottom";
    ctx.textAlign = "left";
    ctx.fillText(last ? "−" + Math.round(tEnd - tStart) + " s" : "", left, height - 2);
    ctx.textAlign = "right";
    ctx.fillText(last ? "now " + clock(tEnd) : "time", left + plotWidth, height - 2);

    if (last) {
      ctx.strokeStyle = lineColor;
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      points.forEach(([t, v], i) => (i ? ctx.lineTo(x(t), y(v)) : ctx.moveTo(x(t), y(v))));
      ctx.stroke();
      // the current value, top right
      ctx.fillStyle = lineColor;
      ctx.font = "600 13px " + style.fontFamily;
      ctx.textAlign = "right";
      ctx.textBaseline = "top";
      ctx.fillText(decimal(last[1]) + " " + unit, left + plotWidth, 2);
    }
    canvas.dataset.points = String(points.length);
    canvas.dataset.last = last ? String(last[1]) : "";
  }

  poll();
})();

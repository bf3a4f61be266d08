// The dashboard's few behaviours: live figures from the server's event stream, charts drawn
// from them, "select all" and confirmations for the forms. Everything works without it but
// the live parts: pages are plain HTML and every action a plain form.
"use strict";

(function () {
  const body = document.body;
  const root = body.dataset.root || "";

  // -- formatting, as the server formats the first render ---------------------------------

  function age(seconds) {
    if (seconds === null || seconds === undefined) return "-";
    let total = Math.floor(seconds);
    const days = Math.floor(total / 86400); total -= days * 86400;
    const hours = Math.floor(total / 3600); total -= hours * 3600;
    const minutes = Math.floor(total / 60); const secs = total - minutes * 60;
    if (days) return hours ? `${days}d${hours}h` : `${days}d`;
    if (hours) return minutes ? `${hours}h${minutes}m` : `${hours}h`;
    if (minutes) return secs ? `${minutes}m${secs}s` : `${minutes}m`;
    return `${secs}s`;
  }

  function format(value, how, el) {
    if (how === "int") return value === null || value === undefined ? "-" : Number(value).toLocaleString("en-US");
    if (how === "age") return age(value);
    if (how === "flag") return value ? el.dataset.flag || "yes" : "";
    return value === null || value === undefined ? "-" : String(value);
  }

  function put(el, value) {
    const text = format(value, el.dataset.format, el);
    if (el.textContent !== text) el.textContent = text;
  }

  function lookup(data, path) {
    let here = data;
    for (const part of path.split(".")) {
      if (here === null || typeof here !== "object" || !(part in here)) return undefined;
      here = here[part];
    }
    return here;
  }

  // -- charts ---------------------------------------------------------------------------

  function draw(svg, points) {
    const line = svg.querySelector("polyline");
    if (!line) return;
    if (!points || points.length < 2) { line.setAttribute("points", ""); return; }
    const top = Math.max(...points, 0.000001);
    const step = 120 / (points.length - 1);
    const coords = points.map((v, i) => `${(i * step).toFixed(1)},${(23 - (v / top) * 22).toFixed(1)}`);
    line.setAttribute("points", coords.join(" "));
  }

  function charts(scope, series) {
    for (const svg of scope.querySelectorAll("svg[data-spark]")) {
      const own = series[svg.dataset.spark];
      draw(svg, own ? own[svg.dataset.series] : null);
    }
    for (const el of scope.querySelectorAll("[data-rate]")) {
      const own = series[el.dataset.key];
      const values = own ? own[el.dataset.rate] : null;
      el.textContent = values && values.length ? String(values[values.length - 1]) : "";
    }
  }

  // -- rows: one a queue or a worker, added and removed as they come and go -----------------

  function fillRow(row, key, item) {
    row.dataset.key = key;
    for (const el of row.querySelectorAll("[data-field]")) put(el, item[el.dataset.field]);
    for (const a of row.querySelectorAll("a[data-href]")) a.setAttribute("href", root + a.dataset.href.replace("{key}", encodeURIComponent(key)));
    for (const el of row.querySelectorAll("[data-spark='{key}'], [data-key='']")) {
      if (el.dataset.spark !== undefined) el.dataset.spark = key; else el.dataset.key = key;
    }
  }

  function rows(tbody, data) {
    const what = tbody.dataset.rows;
    const template = document.getElementById(tbody.dataset.template);
    let items;
    if (what === "queues") items = (data.order || []).map((name) => [name, data.queues[name]]);
    else if (what === "workers") items = (data.workers || []).map((w) => [w.id, w]);
    else return;
    const existing = new Map([...tbody.querySelectorAll("tr[data-key]")].map((tr) => [tr.dataset.key, tr]));
    let previous = null;
    for (const [key, item] of items) {
      let row = existing.get(key);
      existing.delete(key);
      if (!row) {
        if (!template) continue;
        row = template.content.firstElementChild.cloneNode(true);
      }
      fillRow(row, key, item);
      const wanted = previous ? previous.nextElementSibling : tbody.firstElementChild;
      if (wanted !== row) tbody.insertBefore(row, wanted);
      previous = row;
    }
    for (const gone of existing.values()) gone.remove();
  }

  // -- the event stream -----------------------------------------------------------------

  function say(text, bad) {
    // Looked up each time: a page that reads itself again puts in a new one.
    const status = document.getElementById("live-status");
    if (!status) return;
    status.hidden = !text;
    status.textContent = text || "";
    status.classList.toggle("bad", Boolean(bad));
  }

  // Figures read before this page was rendered are older than what it shows (an action's
  // result, say): they are skipped, and the next reading comes within seconds.
  const rendered = Number(body.dataset.rendered || 0);

  function apply(data) {
    if (data.at && data.at < rendered) return;
    for (const el of document.querySelectorAll("[data-live]")) {
      if (el === body) continue;
      const value = lookup(data, el.dataset.live);
      if (value !== undefined) put(el, value);
    }
    for (const tbody of document.querySelectorAll("tbody[data-rows]")) rows(tbody, data);
    charts(document, data.series || {});
    body.dataset.updated = String(data.at || "");
    say(data.error ? `Live figures paused: ${data.error}` : "", Boolean(data.error));
  }

  if (body.dataset.live && "EventSource" in window) {
    const source = new EventSource(body.dataset.live);
    source.onmessage = (event) => {
      try { apply(JSON.parse(event.data)); } catch (err) { say("Live figures could not be read.", true); }
    };
    source.onerror = () => say("Reconnecting to the live figures…", true);
    source.onopen = () => say("", false);
  }

  // -- forms ------------------------------------------------------------------------------

  function bindForms(scope) {
    for (const all of scope.querySelectorAll("input[data-select-all]")) bindSelection(all);
  }

  function bindSelection(all) {
    const form = all.form;
    const boxes = () => [...form.querySelectorAll("input[type=checkbox]:not([data-select-all])")];
    const buttons = () => [...form.querySelectorAll("[data-needs-selection]")];
    const refresh = () => {
      const picked = boxes().filter((b) => b.checked).length;
      for (const b of buttons()) b.disabled = picked === 0;
      all.checked = picked > 0 && picked === boxes().length;
      all.indeterminate = picked > 0 && picked < boxes().length;
    };
    all.addEventListener("change", () => { for (const b of boxes()) b.checked = all.checked; refresh(); });
    form.addEventListener("change", refresh);
    refresh();
  }
  bindForms(document);

  // -- lists that follow the server -----------------------------------------------------
  // A page with data-refresh (job lists, a job, dead letters, the workers' jobs) reads itself
  // again every that many seconds and puts in the new content, unless the viewer is busy
  // with it: something selected, typed in or focused. A server that does not answer is said.

  const every = Number(body.dataset.refresh || 0);
  let lastGood = Date.now();

  function busy(main) {
    if (document.visibilityState !== "visible") return true;
    if (main.querySelector("input[type=checkbox]:checked")) return true;
    const at = document.activeElement;
    if (at && at !== body && main.contains(at)) return true;
    const picked = window.getSelection();
    return Boolean(picked && String(picked).length);
  }

  async function reread() {
    const main = document.querySelector("main");
    if (!main || busy(main)) return;
    const quit = new AbortController();
    const late = window.setTimeout(() => quit.abort(), 5000);
    try {
      const answer = await fetch(window.location.href, { signal: quit.signal, credentials: "same-origin" });
      if (!answer.ok) throw new Error(`HTTP ${answer.status}`);
      const page = new DOMParser().parseFromString(await answer.text(), "text/html");
      const fresh = page.querySelector("main");
      if (fresh && !busy(main)) {
        const flash = main.querySelector(".flash");
        main.innerHTML = fresh.innerHTML;
        if (flash && !main.querySelector(".flash")) main.prepend(flash);
        bindForms(main);
        localTimes();
      }
      lastGood = Date.now();
      say("", false);
    } catch (err) {
      const since = Math.round((Date.now() - lastGood) / 1000);
      say(`The server has not answered for ${since}s: this page shows what it held then.`, true);
    } finally {
      window.clearTimeout(late);
    }
  }

  if (every > 0) window.setInterval(reread, every * 1000);

  // -- times in the viewer's zone ---------------------------------------------------------
  // The server writes each time in UTC in a <time> element; shown here in the viewer's own
  // zone with how long ago (or how soon) it is, the UTC text kept as its title.

  function relative(at) {
    const seconds = Math.round((at.getTime() - Date.now()) / 1000);
    if (Math.abs(seconds) < 5) return "just now";
    const text = age(Math.abs(seconds));
    return seconds < 0 ? `${text} ago` : `in ${text}`;
  }

  const localFormat = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
    second: "2-digit", hour12: false, timeZoneName: "short",
  });

  function localTimes() {
    for (const el of document.querySelectorAll("time[datetime]")) {
      const at = new Date(el.getAttribute("datetime"));
      if (Number.isNaN(at.getTime())) continue;
      if (!el.title) el.title = el.textContent;
      el.textContent = `${localFormat.format(at)} (${relative(at)})`;
    }
  }
  localTimes();
  // "3m ago" grows old: said again every 15 seconds.
  window.setInterval(localTimes, 15000);

  // A chart wider than a phone scrolls sideways: it opens on its newest end.
  for (const box of document.querySelectorAll(".chart-scroll")) box.scrollLeft = box.scrollWidth;

  // "/" goes to the job search from anywhere but a field being typed in, as on the peers'
  // dashboards.
  document.addEventListener("keydown", (event) => {
    if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) return;
    const at = document.activeElement;
    if (at && (at.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(at.tagName))) return;
    const search = document.querySelector("form.search input[name='id']");
    if (!search) return;
    event.preventDefault();
    search.focus();
  });

  document.addEventListener("submit", (event) => {
    const form = event.target;
    const button = event.submitter;
    const question = (button && button.dataset.confirm) || form.dataset.confirm;
    if (question && !window.confirm(question)) event.preventDefault();
  });
})();

// stockpot dashboard: reads the server's snapshots (its Prometheus registry, flattened) and
// its recent requests from /dashboard/events, and draws them. Every snapshot carries
// cumulative counters, so a dropped event only coarsens a chart. No network but that stream.
(function () {
  "use strict";
  var role = document.body.getAttribute("data-role");
  var params = new URLSearchParams(location.search);
  var key = params.get("key");
  var demo = params.get("demo") === "1";
  var MAX_POINTS = 300;
  var MAX_ROWS = 64;
  var COLORS = ["#ffb454", "#59c2ff", "#91d076", "#f07178", "#d2a6ff", "#95e6cb", "#e6b673", "#f29668"];

  // The page's own account of what it showed, for tests (headless Chromium reads it).
  var state = { role: role, snapshots: 0, charts: {}, requests: 0, decisions: 0, errors: [], demoModes: {}, hitRate: null };
  window.stockpotDashboard = state;
  window.addEventListener("error", function (e) { state.errors.push(String(e.message || e)); });

  function $(id) { return document.getElementById(id); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    return e;
  }
  function fmt(v, digits) {
    if (v == null || !isFinite(v)) return "–";
    var a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
    if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
    if (digits == null && a > 0 && a < 1) return String(+v.toPrecision(2));
    return v.toFixed(digits == null ? (a >= 100 || a === Math.round(a) ? 0 : 1) : digits);
  }
  function bytes(v) {
    if (v == null) return "–";
    var u = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return v.toFixed(i ? 1 : 0) + " " + u[i];
  }

  // --- series in a flattened snapshot: name{a="x",b="y"} -> value ---
  var parsed = {};
  function parseKey(k) {
    var p = parsed[k];
    if (p) return p;
    var i = k.indexOf("{");
    p = { name: i < 0 ? k : k.slice(0, i), labels: {} };
    if (i >= 0) {
      var re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g, m;
      while ((m = re.exec(k.slice(i))) !== null) p.labels[m[1]] = m[2];
    }
    parsed[k] = p;
    return p;
  }
  // rows returns [{labels, value}] of the series called name.
  function rows(snap, name) {
    var out = [];
    if (!snap || !snap.metrics) return out;
    for (var k in snap.metrics) {
      var p = parseKey(k);
      if (p.name === name) out.push({ labels: p.labels, value: snap.metrics[k] });
    }
    return out;
  }
  function value(snap, name, labels) {
    var rs = rows(snap, name);
    for (var i = 0; i < rs.length; i++) {
      var ok = true;
      for (var l in labels || {}) if (rs[i].labels[l] !== labels[l]) { ok = false; break; }
      if (ok) return rs[i].value;
    }
    return undefined;
  }
  function sum(snap, name, pred) {
    var rs = rows(snap, name), s = 0, any = false;
    for (var i = 0; i < rs.length; i++) {
      if (pred && !pred(rs[i].labels)) continue;
      if (rs[i].value != null) { s += rs[i].value; any = true; }
    }
    return any ? s : undefined;
  }
  // byLabel groups a series by one label, summing the rest away.
  function byLabel(snap, name, label) {
    var out = {}, rs = rows(snap, name);
    for (var i = 0; i < rs.length; i++) {
      var l = rs[i].labels[label] || "";
      if (rs[i].value != null) out[l] = (out[l] || 0) + rs[i].value;
    }
    return out;
  }
  // rates are per-second deltas of a counter grouped by label between two snapshots.
  function rates(prev, cur, name, label, dt) {
    var a = byLabel(prev, name, label), b = byLabel(cur, name, label), out = {};
    for (var l in b) out[l] = Math.max(0, b[l] - (a[l] || 0)) / dt;
    return out;
  }
  function rate(prev, cur, name, dt, pred) {
    var a = sum(prev, name, pred), b = sum(cur, name, pred);
    if (b === undefined) return undefined;
    return Math.max(0, b - (a || 0)) / dt;
  }

  // --- charts: one uPlot per panel, rebuilt when its set of series changes ---
  var charts = {};
  function chart(id) {
    var c = charts[id];
    if (!c) {
      c = charts[id] = { id: id, el: $(id), t: [], s: {}, names: [], plot: null, sig: "" };
      state.charts[id] = { points: 0, series: 0 };
      c.el.innerHTML = '<div class="empty">waiting for data…</div>';
    }
    return c;
  }
  function push(id, t, vals) {
    var c = chart(id), n, i;
    c.t.push(t);
    for (n in vals) {
      if (!(n in c.s)) {
        c.s[n] = [];
        for (i = 0; i < c.t.length - 1; i++) c.s[n].push(null);
        c.names.push(n);
      }
    }
    var pts = 0;
    for (i = 0; i < c.names.length; i++) {
      n = c.names[i];
      var v = vals[n];
      c.s[n].push(v == null || !isFinite(v) ? null : v);
    }
    if (c.t.length > MAX_POINTS) {
      c.t.shift();
      for (i = 0; i < c.names.length; i++) c.s[c.names[i]].shift();
    }
    for (i = 0; i < c.names.length; i++) {
      var arr = c.s[c.names[i]];
      for (var j = 0; j < arr.length; j++) if (arr[j] != null) pts++;
    }
    state.charts[id] = { points: pts, series: c.names.length };
    draw(c);
  }
  function draw(c) {
    if (!c.names.length) {
      c.el.innerHTML = '<div class="empty">no series (nothing of this kind on this server)</div>';
      return;
    }
    var data = [c.t];
    for (var i = 0; i < c.names.length; i++) data.push(c.s[c.names[i]]);
    var sig = c.names.join("|");
    if (c.plot && c.sig === sig) { c.plot.setData(data); return; }
    if (c.plot) c.plot.destroy();
    c.el.innerHTML = "";
    c.sig = sig;
    var series = [{}];
    for (i = 0; i < c.names.length; i++) {
      series.push({ label: c.names[i], stroke: COLORS[i % COLORS.length], width: 1.5, points: { show: false } });
    }
    var axis = { stroke: "#8a95a3", grid: { stroke: "#26323d", width: 1 }, ticks: { stroke: "#26323d" } };
    var xAxis = Object.assign({ space: 70, values: function (u, ticks) {
      return ticks.map(function (t) { var d = new Date(t * 1000); return d.toTimeString().slice(0, 8); });
    } }, axis);
    var yAxis = Object.assign({ size: 52, values: function (u, ticks) { return ticks.map(function (v) { return fmt(v); }); } }, axis);
    c.plot = new uPlot({
      width: Math.max(300, (c.el.clientWidth || 360) - 4), height: 160, series: series,
      axes: [xAxis, yAxis],
      scales: { y: { range: function (u, min, max) { return [Math.min(0, min), max > 0 ? max * 1.1 : 1]; } } },
      legend: { show: true, live: false }, cursor: { show: false },
    }, data, c.el);
  }

  // --- headline ---
  function headline(label, v) {
    $("headline-label").textContent = label;
    var e = $("hit-rate");
    state.hitRate = v == null ? null : v;
    e.setAttribute("data-value", v == null ? "" : String(v));
    e.textContent = v == null ? "–" : (v * 100).toFixed(1) + "%";
  }

  // --- serve ---
  var prev = null;
  function serveSnapshot(s) {
    $("model").textContent = s.model + " · block " + s.block_size + " tokens";
    headline("hit rate (window)", value(s, "stockpot_prefix_cache_hit_rate"));
    evidence(s);
    misses(s);
    tiersTable(s);
    if (s.cache) tree(s.cache);
    var p = prev;
    prev = s;
    var t = s.t / 1000;
    // Residency is a gauge: it has a point from the first snapshot on.
    var res = {}, used = byLabel(s, "stockpot_kv_cache_usage_bytes", "tier"),
      cached = byLabel(s, "stockpot_kv_cache_cached_bytes", "tier"), cap = byLabel(s, "stockpot_kv_cache_capacity_bytes", "tier");
    for (var tier in cap) if (cap[tier] > 0) res[tier] = 100 * ((used[tier] || 0) + (cached[tier] || 0)) / cap[tier];
    push("c-residency", t, res);
    if (!p) return;
    var dt = (s.t - p.t) / 1000;
    if (dt <= 0) return;
    var dq = (sum(s, "stockpot_prefix_cache_queries_total") || 0) - (sum(p, "stockpot_prefix_cache_queries_total") || 0);
    var dh = (sum(s, "stockpot_prefix_cache_hits_total") || 0) - (sum(p, "stockpot_prefix_cache_hits_total") || 0);
    var w = value(s, "stockpot_prefix_cache_hit_rate");
    push("c-hitrate", t, { "window": w == null ? null : 100 * w, "this interval": dq > 0 ? 100 * dh / dq : null });
    var src = rates(p, s, "stockpot_prompt_tokens_total", "source", dt), reused = 0;
    for (var k in src) if (k !== "computed") reused += src[k];
    push("c-tokens", t, { reused: reused, recomputed: src.computed || 0 });
    push("c-sources", t, src);
    push("c-evictions", t, rates(p, s, "stockpot_kv_cache_evictions_total", "tier", dt));
    var lat = {};
    ["read", "write"].forEach(function (op) {
      var n = "stockpot_kv_offload_" + op + "_seconds";
      var cs = byLabel(s, n + "_count", "tier"), ss = byLabel(s, n + "_sum", "tier");
      var cp = byLabel(p, n + "_count", "tier"), sp = byLabel(p, n + "_sum", "tier");
      for (var tr in cs) {
        var dc = cs[tr] - (cp[tr] || 0);
        lat[tr + " " + op] = dc > 0 ? 1000 * (ss[tr] - (sp[tr] || 0)) / dc : cs[tr] > 0 ? 1000 * ss[tr] / cs[tr] : null;
      }
    });
    push("c-latency", t, lat);
    var st = {}, r;
    if ((r = rate(p, s, "stockpot_kv_restore_stall_seconds_total", dt)) !== undefined) st["stall s/s"] = r;
    var pf = rates(p, s, "stockpot_engine_prefetches_total", "outcome", dt);
    for (var o in pf) st["prefetch " + o] = pf[o];
    if ((r = rate(p, s, "stockpot_engine_dedup_waits_total", dt)) !== undefined) st["dedup waits"] = r;
    if ((r = rate(p, s, "stockpot_engine_preemptions_total", dt)) !== undefined) st["preemptions"] = r;
    push("c-stalls", t, st);
    push("c-discards", t, rates(p, s, "stockpot_kv_blocks_discarded_total", "reason", dt));
  }

  function table(id, head, body) {
    var tb = $(id);
    tb.innerHTML = "";
    var tr = el("tr");
    head.forEach(function (h) { tr.appendChild(el("th", null, h)); });
    tb.appendChild(tr);
    body.forEach(function (row) {
      var tr = el("tr");
      row.forEach(function (c) { tr.appendChild(el("td", null, c)); });
      tb.appendChild(tr);
    });
  }

  function evidence(s) {
    var usage = byLabel(s, "stockpot_prompt_tokens_total", "source"), eng = byLabel(s, "stockpot_engine_prompt_tokens_total", "source");
    var body = [];
    Object.keys(eng).sort().forEach(function (src) {
      body.push(["prompt tokens · " + src, fmt(usage[src]), fmt(eng[src]), fmt((eng[src] || 0) - (usage[src] || 0))]);
    });
    var hits = byLabel(s, "stockpot_engine_requests_total", "hit");
    var ttftS = byLabel(s, "stockpot_time_to_first_token_by_hit_seconds_sum", "hit"), ttftN = byLabel(s, "stockpot_time_to_first_token_by_hit_seconds_count", "hit");
    ["cold", "partial", "warm"].forEach(function (h) {
      if (hits[h] === undefined) return;
      body.push(["requests · " + h + (ttftN[h] ? " (mean TTFT " + fmt(1000 * ttftS[h] / ttftN[h]) + " ms)" : ""), fmt(ttftN[h]), fmt(hits[h]), fmt(hits[h] - (ttftN[h] || 0))]);
    });
    var c499 = value(s, "stockpot_requests_total", { status: "499" });
    body.push(["requests abandoned by their client", fmt(c499 || 0), fmt(value(s, "stockpot_engine_requests_cancelled_total")), ""]);
    body.push(["pinned blocks", "", fmt(value(s, "stockpot_engine_pinned_blocks")), ""]);
    table("t-evidence", ["", "usage sums", "engine", "engine − usage"], body);
  }

  function misses(s) {
    var m = byLabel(s, "stockpot_prefix_miss_total", "cause"), box = $("misses");
    var causes = Object.keys(m);
    box.innerHTML = "";
    if (!causes.length) {
      box.appendChild(el("p", "muted", "This server exports no miss causes yet (stockpot_prefix_miss_total); requests that carry usage.cache.miss show it below."));
      return;
    }
    causes.sort(function (a, b) { return m[b] - m[a]; });
    var max = Math.max.apply(null, causes.map(function (c) { return m[c]; })) || 1;
    var tb = el("table");
    causes.forEach(function (c) {
      var tr = el("tr");
      tr.appendChild(el("td", null, c));
      var td = el("td");
      var bar = el("span", "bar");
      bar.style.width = Math.round(160 * m[c] / max) + "px";
      td.appendChild(bar);
      tr.appendChild(td);
      tr.appendChild(el("td", null, fmt(m[c])));
      tb.appendChild(tr);
    });
    box.appendChild(tb);
  }

  function tiersTable(s) {
    var used = byLabel(s, "stockpot_kv_cache_usage_bytes", "tier"), cached = byLabel(s, "stockpot_kv_cache_cached_bytes", "tier"),
      cap = byLabel(s, "stockpot_kv_cache_capacity_bytes", "tier"), ev = byLabel(s, "stockpot_kv_cache_evictions_total", "tier"),
      q = byLabel(s, "stockpot_kv_offload_queue_depth", "tier"), blocks = byLabel(s, "stockpot_kv_cache_blocks", "tier"),
      rd = byLabel(s, "stockpot_kv_tier_read_bytes_total", "tier");
    var body = Object.keys(cap).map(function (t) {
      return [t, bytes(used[t] || 0), cached[t] !== undefined ? bytes(cached[t]) : "", blocks[t] !== undefined ? fmt(blocks[t]) : "",
        bytes(cap[t]), fmt(ev[t] || 0), rd[t] !== undefined ? bytes(rd[t]) : "", q[t] !== undefined ? fmt(q[t]) : ""];
    });
    table("t-tiers", ["tier", "in use", "cached", "blocks", "capacity", "evictions", "read", "write queue"], body);
  }

  // --- recent requests, newest first, each with its evidence chain ---
  function step(cls, text) { return el("span", "step " + cls, text); }
  function requestRow(r) {
    var row = el("div", "req");
    row.setAttribute("data-seq", r.seq);
    row.setAttribute("data-prompt", r.prompt_tokens);
    row.setAttribute("data-reused", r.reused_tokens);
    row.setAttribute("data-computed", r.computed_tokens);
    row.appendChild(el("span", "seq", "#" + r.seq));
    if (r.status !== 200) {
      row.appendChild(el("span", "hit-cold", r.status === 499 ? "499 · the client went away (the engine still counted it)" : "status " + r.status));
      return row;
    }
    row.appendChild(el("span", "hit-" + r.hit, r.hit));
    var chain = el("span", "chain");
    chain.appendChild(step("", r.prompt_tokens + " prompt tokens = " + Math.ceil(r.prompt_tokens / r.block_size) + " blocks"));
    ["device", "host", "disk", "remote"].forEach(function (t) {
      var n = (r.matched_blocks || {})[t] || 0;
      if (n > 0 || t === "device") chain.appendChild(step(t, (t === "device" ? "matched " : "restored ") + n + " blk · " + t));
    });
    if (r.verified_blocks > 0) chain.appendChild(step("host", "verified " + r.verified_blocks + " blk"));
    if (r.discarded_tokens > 0) {
      var why = [];
      for (var k in r.discarded_by || {}) why.push(k + " " + r.discarded_by[k]);
      chain.appendChild(step("discarded", "discarded " + r.discarded_tokens + " tok" + (why.length ? " (" + why.join(", ") + ")" : "")));
    }
    chain.appendChild(step("device", "reused " + r.reused_tokens));
    chain.appendChild(step("computed", "computed " + r.computed_tokens));
    if (r.blended_tokens > 0) chain.appendChild(step("host", "blended " + r.blended_tokens));
    chain.appendChild(step("", "TTFT " + fmt(r.ttft_ms, 1) + " ms = queue " + fmt(r.queue_ms, 1) + " + restore " + fmt(r.restore_ms, 1) + " + prefill " + fmt(r.prefill_ms, 1)));
    chain.appendChild(step("", fmt(100 * r.partial_share, 0) + "% reused"));
    if (r.miss) chain.appendChild(step("miss", "miss: " + missText(r.miss)));
    row.appendChild(chain);
    return row;
  }
  function missText(m) {
    if (typeof m !== "object") return String(m);
    var parts = [];
    if (m.cause) parts.push(m.cause);
    if (m.token_offset != null) parts.push("at token " + m.token_offset);
    if (m.block != null) parts.push("block " + m.block);
    if (m.segment) parts.push("in " + m.segment);
    return parts.length ? parts.join(" ") : JSON.stringify(m);
  }
  var lastRequest = 0, lastDecision = 0; // a reconnect's hello repeats the ring
  function addRequest(r) {
    if (r.seq <= lastRequest) return;
    lastRequest = r.seq;
    var box = $("requests");
    if (box.firstChild && box.firstChild.className === "muted") box.innerHTML = "";
    box.insertBefore(requestRow(r), box.firstChild);
    while (box.childNodes.length > MAX_ROWS) box.removeChild(box.lastChild);
    state.requests++;
    state.lastRequest = r;
  }

  // --- cache tree ---
  function tree(c) {
    var box = $("tree");
    box.innerHTML = "";
    box.appendChild(el("p", "muted", c.blocks + " blocks cached (" + bytes(c.blocks * c.block_bytes) + "), " + c.pinned + " pinned · tier: device (the working pool)"));
    if (!c.tree || !c.tree.length) { box.appendChild(el("p", "muted", "the cache is empty")); return; }
    box.appendChild(nodes(c.tree, c.block_bytes, true));
  }
  function nodes(ns, bb, top) {
    var ul = el("ul", top ? "tree top" : "tree");
    ns.forEach(function (n) {
      var li = el("li");
      li.appendChild(el("span", "node-text", JSON.stringify(n.text).slice(1, -1).slice(0, 60) || "·"));
      li.appendChild(document.createTextNode(" blocks " + n.first_block + "–" + (n.first_block + n.blocks - 1) + " · to token " + n.tokens +
        " · hits " + n.hits + " · " + bytes(n.blocks * bb) + " · device" + (n.pinned ? " · pinned " + n.pinned : "") +
        (n.children && n.children.length ? " · " + n.children.length + " branches" : "") + (n.more ? " (+" + n.more + " more)" : "")));
      if (n.children && n.children.length) li.appendChild(nodes(n.children, bb, false));
      ul.appendChild(li);
    });
    return ul;
  }

  // --- route ---
  function routeSnapshot(s) {
    $("model").textContent = "policy " + s.policy + " · " + (s.backends || []).length + " replicas";
    var prompt = sum(s, "stockpot_router_prompt_tokens_total"), cachedT = sum(s, "stockpot_router_cached_tokens_total");
    headline("delivered hit rate", prompt ? cachedT / prompt : null);
    var p = prev;
    prev = s;
    var t = s.t / 1000;
    push("c-load", t, byLabel(s, "stockpot_router_backend_inflight", "backend"));
    push("c-index", t, byLabel(s, "stockpot_router_index_blocks", "backend"));
    push("c-lag", t, byLabel(s, "stockpot_router_event_lag_seconds", "backend"));
    table("t-backends", ["replica", "role / pool", "state", "load", "requests", "errors", "index blocks", "synced"], (s.backends || []).map(function (b) {
      return [b.id + " " + b.url, (b.role || "both") + (b.pool ? " / " + b.pool : ""), b.state, String(b.load), fmt(b.requests), fmt(b.errors), fmt(b.index_blocks), b.events ? String(b.events.synced) : "–"];
    }));
    if (!p) return;
    var dt = (s.t - p.t) / 1000;
    if (dt <= 0) return;
    push("c-decisions", t, rates(p, s, "stockpot_router_decisions_total", "reason", dt));
    push("c-predicted", t, {
      predicted: rate(p, s, "stockpot_router_predicted_tokens_total", dt) || 0,
      delivered: rate(p, s, "stockpot_router_cached_tokens_total", dt) || 0,
    });
  }
  function addDecision(d) {
    if (d.seq <= lastDecision) return;
    lastDecision = d.seq;
    var box = $("decisions");
    var row = el("div", "req");
    row.setAttribute("data-seq", d.seq);
    row.appendChild(el("span", "seq", "#" + d.seq));
    var chain = el("span", "chain");
    chain.appendChild(step("", d.backend));
    chain.appendChild(step("", "reason " + d.reason));
    chain.appendChild(step("device", "predicted " + d.predicted_tokens));
    chain.appendChild(step(d.delivered_tokens < 0 ? "miss" : "host", d.delivered_tokens < 0 ? "no usage" : "delivered " + d.delivered_tokens + " of " + d.prompt_tokens));
    if (d.delivered_tokens >= 0) chain.appendChild(step(d.delivered_tokens >= d.predicted_tokens ? "device" : "discarded", "Δ " + (d.delivered_tokens - d.predicted_tokens)));
    row.appendChild(chain);
    box.insertBefore(row, box.firstChild);
    while (box.childNodes.length > MAX_ROWS) box.removeChild(box.lastChild);
    state.decisions++;
  }

  // --- demo: the four modes ---
  var demoCurrent = null, demoShown = null;
  function showMode(mode) {
    demoShown = mode;
    var bs = document.querySelectorAll("#demo-modes button");
    for (var i = 0; i < bs.length; i++) {
      var m = bs[i].getAttribute("data-mode");
      bs[i].classList.toggle("active", m === mode);
      bs[i].classList.toggle("current", m === demoCurrent);
    }
    var ps = document.querySelectorAll(".demo-pane");
    for (i = 0; i < ps.length; i++) ps[i].hidden = ps[i].getAttribute("data-pane") !== mode;
  }
  function demoEvent(d) {
    $("demo").hidden = false;
    var follow = demoShown === null || demoShown === demoCurrent;
    demoCurrent = d.mode;
    state.demoModes[d.mode] = (state.demoModes[d.mode] || 0) + 1;
    $("demo-step").textContent = d.note || "";
    var pane = document.querySelector('.demo-pane[data-pane="' + d.mode + '"]');
    if (d.mode === "start" && d.setup) renderStart(pane, d.setup);
    if (d.mode === "execute" && d.prompt) renderExecute(pane, d);
    if (d.mode === "monitor") renderMonitor(pane, d);
    if (d.mode === "complete" && d.summary) renderComplete(pane, d.summary);
    showMode(follow ? d.mode : demoShown);
  }
  function kv(pane, pairs) {
    var tb = el("table", "small");
    pairs.forEach(function (p) { var tr = el("tr"); tr.appendChild(el("td", null, p[0])); tr.appendChild(el("td", null, String(p[1]))); tb.appendChild(tr); });
    pane.appendChild(tb);
  }
  function renderStart(pane, s) {
    pane.innerHTML = "";
    pane.appendChild(el("p", null, "A prompt is cut into blocks of " + s.block_size + " tokens. Each block's hash chains the one before it, so a block's hash names its whole prefix: two prompts share a cached block only if everything before it is the same."));
    kv(pane, [["model", s.model], ["block size", s.block_size + " tokens"], ["shared prefix", s.shared_prefix_tokens + " tokens (" + Math.floor(s.shared_prefix_tokens / s.block_size) + " full blocks)"],
      ["shared prefix text", s.shared_prefix_text], ["requests", s.requests], ["KV pool", s.kv_pool]]);
  }
  function renderMonitor(pane, d) {
    var live = pane.querySelector(".monitor-live");
    if (!live) { live = el("p", "monitor-live"); pane.appendChild(live); }
    live.textContent = d.note || "";
  }
  // Every execute step keeps its own section (newest first), so a page opened late still
  // shows the whole walk.
  function renderExecute(pane, d) {
    var p = d.prompt;
    if (pane.firstChild && pane.firstChild.className === "muted") pane.innerHTML = "";
    var old = pane.querySelector('[data-step="' + d.step + '"]');
    var sec = el("div", "exec-step");
    sec.setAttribute("data-step", d.step);
    if (old) pane.replaceChild(sec, old); else {
      var after = null, secs = pane.querySelectorAll(".exec-step");
      for (var i = 0; i < secs.length; i++) if (+secs[i].getAttribute("data-step") < d.step) { after = secs[i]; break; }
      pane.insertBefore(sec, after);
    }
    pane = sec;
    pane.appendChild(el("h2", null, "Step " + d.step + " of " + d.steps + " · " + (d.note || "")));
    pane.appendChild(el("p", null, p.tokens + " tokens → " + p.blocks.length + " blocks. " +
      (p.first_diff_block >= 0 ? "Matched up to block " + p.first_diff_block + ", the first that differs from anything cached; " : "No block differs from the cache; ") +
      "the tail is computed. The server reported " + p.cached_tokens + " cached tokens (predicted " + p.predicted_tokens + ")."));
    var row = el("div", "blocks");
    p.blocks.forEach(function (b) {
      var c = el("div", "blk " + b.state);
      c.appendChild(el("span", "h", "#" + b.index + " " + b.hash + " ← " + b.parent));
      c.appendChild(el("span", "t", b.text));
      c.appendChild(el("span", "h", b.state));
      row.appendChild(c);
    });
    pane.appendChild(row);
  }
  function renderComplete(pane, s) {
    pane.innerHTML = "";
    pane.appendChild(el("p", null, "Each request reused what the block-aligned prediction says: min(⌊Q/B⌋, ⌊(P−1)/B⌋)·B tokens, where Q is the prefix it shares with what was cached and P its length. The last prompt token is always computed, so an identical prompt of T tokens reuses (T−1) rounded down to a block, and a prompt extending a cached one of T tokens by more reuses ⌊T/B⌋·B (the (T+1) case)."));
    kv(pane, [["requests", s.requests], ["prompt tokens", s.prompt_tokens], ["reused (server)", s.cached_tokens], ["reused (predicted)", s.predicted_tokens],
      ["predictions met", s.matched + " of " + s.requests], ["hit rate", (100 * s.hit_rate).toFixed(1) + "%"], ["(T−1) case", s.t_minus_1], ["(T+1) case", s.t_plus_1]]);
  }
  if (demo) {
    $("demo").hidden = false;
    var bs = document.querySelectorAll("#demo-modes button");
    for (var i = 0; i < bs.length; i++) bs[i].addEventListener("click", function (e) { showMode(e.target.getAttribute("data-mode")); });
    showMode("start");
  }

  // --- the stream ---
  $(role === "route" ? "route-panels" : "serve-panels").hidden = false;
  if (role !== "route") $("requests").appendChild(el("p", "muted", "no request yet"));
  var url = "/dashboard/events" + (key ? "?key=" + encodeURIComponent(key) : "");
  var es = new EventSource(url);
  var conn = $("conn");
  es.onopen = function () { conn.textContent = "live"; conn.className = "pill ok"; };
  es.onerror = function () { conn.textContent = "reconnecting…"; conn.className = "pill bad"; };
  function on(kind, fn) {
    es.addEventListener(kind, function (e) {
      try { fn(JSON.parse(e.data)); } catch (err) { state.errors.push(kind + ": " + err); throw err; }
    });
  }
  on("snapshot", function (s) { state.snapshots++; (s.role === "route" ? routeSnapshot : serveSnapshot)(s); });
  on("requests", function (rs) { (rs || []).forEach(addRequest); });
  on("request", addRequest);
  on("decisions", function (ds) { (ds || []).forEach(addDecision); });
  on("decision", addDecision);
  on("demo", demoEvent);
})();

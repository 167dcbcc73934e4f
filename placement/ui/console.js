// The Placement operator console (doc/console.md). It reads the public
// API with the operator's token (sessionStorage, sent as X-Auth-Token) and
// writes every piece of text with textContent: provider, trait and
// consumer names are the API's data, never markup.
"use strict";

const BASE = location.pathname.replace(/\/ui\/.*$/, "");
const VERSION = "placement 1.39";
const PAGE = 50;
// The cloud view's hosts checked to drain (sessionStorage key), and how
// many one drain plan may name: their uuids go in its URL, which must stay
// under the server's request-line limit (gunicorn's 4094 bytes).
const SELECTION = "placement-drain-selection";
const MAX_SELECTED = 100;
const PARALLEL = 8;
const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

class ApiError extends Error {
  constructor(status, body) {
    const detail = body && body.errors && body.errors[0] ? body.errors[0].detail : "";
    super("HTTP " + status + (detail ? ": " + detail : ""));
    this.status = status;
  }
}

function token() {
  return sessionStorage.getItem("placement-token");
}

async function api(path) {
  const resp = await fetch(BASE + path, {
    headers: {
      "X-Auth-Token": token() || "",
      "OpenStack-API-Version": VERSION,
      "Accept": "application/json",
    },
  });
  const type = resp.headers.get("content-type") || "";
  const body = type.includes("json") ? await resp.json() : null;
  if (resp.status === 401) {
    signOut("The token was refused (401): sign in again.");
    throw new ApiError(401, body);
  }
  if (!resp.ok) throw new ApiError(resp.status, body);
  return body;
}

// Runs fn over items, PARALLEL at a time; results in item order.
async function each(items, fn) {
  const results = new Array(items.length);
  let next = 0;
  async function worker() {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i]);
    }
  }
  await Promise.all(Array.from({ length: Math.min(PARALLEL, items.length) }, worker));
  return results;
}

// ---- sign-in ----

function signOut(message) {
  sessionStorage.removeItem("placement-token");
  cache.providers = null;
  document.getElementById("sign-in-error").textContent = message || "";
  location.hash = "#/sign-in";
  route();
}

// Every view starts from the provider list: a token that may not read it
// is refused here rather than kept for views that would all fail.
const FORBIDDEN =
  "The token was refused (403): the console reads resource providers, " +
  "which needs the admin role under the default policy (rule " +
  "placement:resource_providers:list). Sign in with a token that has it.";

document.getElementById("sign-in-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const value = event.target.elements.token.value;
  const message = document.getElementById("sign-in-error");
  sessionStorage.setItem("placement-token", value);
  event.target.reset();
  try {
    await api("/resource_providers?name=placement-console-sign-in-check");
  } catch (error) {
    if (error.status === 401) return; // signOut() has said so
    sessionStorage.removeItem("placement-token");
    message.textContent = error.status === 403 ? FORBIDDEN : "Sign-in failed: " + error.message;
    return;
  }
  message.textContent = "";
  if (location.hash === "#/cloud") route();
  else location.hash = "#/cloud";
});
document.getElementById("sign-out").addEventListener("click", () => signOut());

// ---- shared data ----

const cache = { providers: null };

async function allProviders() {
  if (!cache.providers) {
    const found = await api("/resource_providers");
    cache.providers = new Map(found.resource_providers.map((p) => [p.uuid, p]));
  }
  return cache.providers;
}

function treeOf(providers, root) {
  return [...providers.values()].filter((p) => p.root_provider_uuid === root);
}

// capacity (after reserved and allocation ratio) and use, per class.
function usageOf(inventories, usages) {
  const out = {};
  for (const [rc, inv] of Object.entries(inventories)) {
    out[rc] = {
      capacity: Math.floor((inv.total - inv.reserved) * inv.allocation_ratio),
      used: usages[rc] || 0,
    };
  }
  return out;
}

async function providerDetails(uuid) {
  const [inventories, usages] = await Promise.all([
    api("/resource_providers/" + uuid + "/inventories"),
    api("/resource_providers/" + uuid + "/usages"),
  ]);
  return usageOf(inventories.inventories, usages.usages);
}

function usageBar(rc, entry) {
  const share = entry.capacity > 0 ? Math.min(entry.used / entry.capacity, 1) : 1;
  const graphic = svg("svg", { width: 120, height: 12, role: "img" });
  graphic.append(svg("rect", { class: "track", width: 120, height: 12, rx: 2 }));
  graphic.append(
    svg("rect", {
      class: share >= 0.9 ? "fill full" : "fill",
      width: Math.round(120 * share),
      height: 12,
      rx: 2,
    })
  );
  return el(
    "div",
    { class: "bar", "data-class": rc },
    el("span", { class: "rc", text: rc }),
    graphic,
    el("span", { class: "numbers", text: entry.used + " / " + entry.capacity })
  );
}

function tags(names) {
  return el("div", {}, ...names.map((name) => el("span", { class: "tag", text: name })));
}

// ---- cloud view ----

async function cloudView(view, params) {
  const form = el(
    "form",
    { class: "filters", id: "filters" },
    el("label", {}, "Name or uuid", el("input", { name: "name", type: "text", value: params.get("name") || "" })),
    el("label", {}, "Trait", el("input", { name: "trait", type: "text", value: params.get("trait") || "" })),
    el("label", {}, "Aggregate", el("input", { name: "aggregate", type: "text", value: params.get("aggregate") || "" })),
    el("label", {}, "Resource class", el("input", { name: "rc", type: "text", value: params.get("rc") || "" })),
    el("label", {}, "Nearly full (over 90% used)", el("input", { name: "full", type: "checkbox" })),
    el("button", { type: "submit", text: "Filter" })
  );
  form.elements.full.checked = params.get("full") === "1";
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    for (const key of ["name", "trait", "aggregate", "rc"]) {
      if (form.elements[key].value) next.set(key, form.elements[key].value);
    }
    if (form.elements.full.checked) next.set("full", "1");
    location.hash = "#/cloud?" + next.toString();
  });
  const status = el("p", { id: "cloud-status", text: "Loading…" });
  view.append(el("h2", { text: "Cloud" }), form, status);

  // One call: the API filters, orders by name and pages (GET /roots).
  const query = new URLSearchParams();
  const name = (params.get("name") || "").trim();
  if (name) query.set("name", name);
  if (params.get("trait")) query.set("required", params.get("trait"));
  if (params.get("aggregate")) query.set("member_of", params.get("aggregate"));
  if (params.get("rc")) query.set("resources", params.get("rc") + ":1");
  const page = Math.max(0, parseInt(params.get("page") || "0", 10));
  query.set("page", String(page));
  query.set("limit", String(PAGE));
  const found = await api("/roots?" + query.toString());
  const rows = found.roots.map((r) => ({
    root: { uuid: r.uuid, name: r.name },
    providers: r.providers,
    usage: r.usage,
    traits: r.traits,
    aggregates: r.aggregates,
  }));
  const full = params.get("full") === "1";
  const listed = full
    ? rows.filter((r) => Object.values(r.usage).some((u) => u.capacity > 0 && u.used / u.capacity > 0.9))
    : rows;
  const table = el(
    "table",
    { id: "roots" },
    el("tr", {}, el("th", { text: "Drain" }), el("th", { text: "Root provider" }), el("th", { text: "Providers" }),
      el("th", { text: "Usage" }), el("th", { text: "Traits" }), el("th", { text: "Aggregates" }))
  );
  // Hosts to drain together: a checkbox per root, and a button to the
  // Drain view with the checked ones. The selection outlives the page (the
  // pager, a filter): it is kept for the tab (sessionStorage) until it is
  // drained or cleared.
  const chosen = new Set(selection());
  const drain = el("button", { type: "button", id: "drain-selected" });
  const clear = el("button", { type: "button", id: "clear-selected", text: "Clear selection" });
  const showChosen = () => {
    sessionStorage.setItem(SELECTION, JSON.stringify([...chosen]));
    drain.textContent = "Drain selected (" + chosen.size + ")";
    drain.disabled = chosen.size === 0 || chosen.size > MAX_SELECTED;
    drain.title = chosen.size > MAX_SELECTED ? "At most " + MAX_SELECTED + " hosts at once" : "";
    clear.disabled = chosen.size === 0;
  };
  table.addEventListener("change", (event) => {
    const box = event.target;
    if (!box.classList.contains("select-root")) return;
    if (box.checked) chosen.add(box.value);
    else chosen.delete(box.value);
    showChosen();
  });
  drain.addEventListener("click", () => {
    if (!chosen.size) return;
    const providers = [...chosen];
    sessionStorage.removeItem(SELECTION);
    location.hash = "#/drain?providers=" + providers.join(",");
  });
  clear.addEventListener("click", () => {
    chosen.clear();
    for (const box of table.querySelectorAll("input.select-root")) box.checked = false;
    showChosen();
  });
  showChosen();
  for (const row of listed) {
    const link = el("a", { href: "#/provider/" + row.root.uuid, class: "root-link", text: row.root.name });
    const box = el("input", { type: "checkbox", class: "select-root", value: row.root.uuid,
      "aria-label": "Select " + row.root.name + " to drain" });
    box.checked = chosen.has(row.root.uuid);
    table.append(
      el(
        "tr",
        { class: "root", "data-uuid": row.root.uuid },
        el("td", {}, box),
        el("td", { class: "root-cell" }, link, el("div", { class: "hint", text: row.root.uuid })),
        el("td", { text: String(row.providers) }),
        el("td", {}, ...Object.entries(row.usage).sort().map(([rc, u]) => usageBar(rc, u))),
        el("td", {}, tags(row.traits)),
        el("td", {}, tags(row.aggregates))
      )
    );
  }
  const pages = Math.max(1, Math.ceil(found.total / PAGE));
  const pager = el("div", { class: "pager" });
  if (page > 0) pager.append(pageLink(params, page - 1, "‹ previous"));
  pager.append(el("span", { text: "page " + (page + 1) + " of " + pages }));
  if (page + 1 < pages) pager.append(pageLink(params, page + 1, "next ›"));
  status.textContent =
    found.total + " root providers" + (full ? "; nearly full on this page: " + listed.length : "");
  // The page shows at once; the audit's flags follow (at 100,000 hosts
  // the audit's scan takes longer than the page's one call).
  view.append(el("div", { class: "toolbar" }, pager, drain, clear), table);
  await flagOverCapacity(table);
}

// ---- the audit's over-capacity flag (doc/audit.md) ----

// Marks the rows of the cloud view whose tree the data audit finds over
// capacity (a class used beyond (total - reserved) * allocation_ratio,
// as rows written by another placement can leave it): one call to GET
// /maintenance/audit?kind=over_capacity&in_tree=<the page's roots>, so
// that the audit answers about these trees only (its items stop at
// 1,000 per kind: a cloud can have more roots over capacity). The audit
// is admin only: a token it refuses leaves the rows unmarked.
async function flagOverCapacity(table) {
  const roots = [...table.querySelectorAll("tr.root")].map((row) => row.getAttribute("data-uuid"));
  if (!roots.length) return;
  let found;
  try {
    found = await api("/maintenance/audit?kind=over_capacity&in_tree=" + roots.join(","));
  } catch (error) {
    if (error.status === 403) return;
    throw error;
  }
  const byRoot = new Map();
  for (const item of found.checks[0].items) {
    const root = item.root_provider || item.resource_provider;
    byRoot.set(root, (byRoot.get(root) || []).concat([item]));
  }
  for (const row of table.querySelectorAll("tr.root")) {
    const items = byRoot.get(row.getAttribute("data-uuid"));
    if (!items) continue;
    const what = items.map(
      (i) => i.resource_class + " " + i.used + " / " + i.capacity +
        (i.resource_provider === i.root_provider ? "" : " on " + i.name)
    );
    row.classList.add("over-capacity");
    row.querySelector(".root-cell").append(
      el("div", { class: "over-capacity-flag", text: "Over capacity: " + what.join(", ") + " (see placement-manage audit)" })
    );
  }
}

// The hosts checked to drain, as the tab keeps them (none if unreadable).
function selection() {
  try {
    const stored = JSON.parse(sessionStorage.getItem(SELECTION) || "[]");
    return Array.isArray(stored) ? stored.filter((u) => typeof u === "string") : [];
  } catch (error) {
    return [];
  }
}

function pageLink(params, page, text) {
  const next = new URLSearchParams(params);
  next.set("page", String(page));
  return el("a", { href: "#/cloud?" + next.toString(), text });
}

// ---- provider view ----

async function providerView(view, root) {
  const providers = await allProviders();
  const rootProvider = providers.get(root);
  if (!rootProvider) {
    view.append(el("p", { class: "error", text: "No provider " + root }));
    return;
  }
  view.append(el("h2", { text: "Tree of " + rootProvider.name }));
  view.append(el("p", {}, el("a", { id: "drain-link", href: "#/drain?providers=" + root, text: "Plan a drain of this host" })));
  const tree = treeOf(providers, root);
  const info = new Map();
  await each(tree, async (p) => {
    const [usage, traits, aggregates, allocations] = await Promise.all([
      providerDetails(p.uuid),
      api("/resource_providers/" + p.uuid + "/traits"),
      api("/resource_providers/" + p.uuid + "/aggregates"),
      api("/resource_providers/" + p.uuid + "/allocations"),
    ]);
    info.set(p.uuid, { usage, traits: traits.traits, aggregates: aggregates.aggregates, allocations: allocations.allocations });
  });
  function node(provider) {
    const entry = info.get(provider.uuid);
    const box = el(
      "div",
      { class: "provider", "data-uuid": provider.uuid },
      el("strong", { class: "provider-name", text: provider.name }),
      el("div", { class: "hint", text: provider.uuid + " · generation " + provider.generation }),
      ...Object.entries(entry.usage).sort().map(([rc, u]) => usageBar(rc, u)),
      el("div", {}, "Traits: ", tags(entry.traits)),
      el("div", {}, "Aggregates: ", tags(entry.aggregates))
    );
    const children = tree.filter((p) => p.parent_provider_uuid === provider.uuid);
    return el("div", { class: "tree-node" }, box, ...children.map(node));
  }
  view.append(node(rootProvider));

  const consumers = new Map();
  for (const [uuid, entry] of info) {
    for (const [consumer, held] of Object.entries(entry.allocations)) {
      const amounts = consumers.get(consumer) || [];
      for (const [rc, n] of Object.entries(held.resources)) {
        amounts.push(providers.get(uuid).name + " " + rc + ":" + n);
      }
      consumers.set(consumer, amounts);
    }
  }
  const owners = await each([...consumers.keys()], (c) => api("/allocations/" + c));
  const table = el(
    "table",
    { id: "consumers" },
    el("tr", {}, el("th", { text: "Consumer" }), el("th", { text: "Project" }), el("th", { text: "User" }),
      el("th", { text: "Type" }), el("th", { text: "Amounts" }))
  );
  [...consumers.entries()].forEach(([consumer, amounts], i) => {
    const owner = owners[i];
    table.append(
      el(
        "tr",
        { class: "consumer" },
        el("td", { text: consumer }),
        el("td", { text: owner.project_id || "" }),
        el("td", { text: owner.user_id || "" }),
        el("td", { text: owner.consumer_type || "" }),
        el("td", { text: amounts.join(", ") })
      )
    );
  });
  view.append(el("h3", { text: "Consumers (" + consumers.size + ")" }), table);
}

// ---- where can it go? ----

function queryView(view, params) {
  const form = el(
    "form",
    { id: "query-form", class: "filters" },
    el("label", {}, "Query string (as GET /allocation_candidates takes it)",
      el("input", { name: "q", type: "text", size: 70, value: params.get("q") || "" })),
    el("label", {}, "or resources", el("input", { name: "resources", type: "text", placeholder: "VCPU:2,MEMORY_MB:4096" })),
    el("label", {}, "required traits", el("input", { name: "required", type: "text", placeholder: "HW_CPU_X86_AVX2" })),
    el("button", { type: "submit", text: "Where can it go?" })
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    let q = form.elements.q.value.trim().replace(/^\?/, "");
    if (!q) {
      const fields = new URLSearchParams();
      if (form.elements.resources.value) fields.set("resources", form.elements.resources.value);
      if (form.elements.required.value) fields.set("required", form.elements.required.value);
      q = fields.toString();
    }
    location.hash = "#/query?" + new URLSearchParams({ q }).toString();
  });
  const shapes = el(
    "form",
    { id: "shapes-form", class: "filters" },
    el("label", {}, "Shapes, one per line as name: query",
      el("textarea", { name: "shapes", rows: 3, cols: 70, placeholder: "m1.small: resources=VCPU:1,MEMORY_MB:2048" })),
    el("button", { type: "submit", text: "Capacity per shape" })
  );
  shapes.elements.shapes.value = params.get("shapes") || "";
  shapes.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = "#/query?" + new URLSearchParams({ shapes: shapes.elements.shapes.value }).toString();
  });
  view.append(el("h2", { text: "Where can it go?" }), form, shapes);
  if (params.get("shapes")) return shapeChart(view, params.get("shapes"));
  const q = params.get("q");
  if (q) {
    const out = el("div", { id: "query-result" });
    view.append(out);
    return answer(out, q);
  }
  return null;
}

async function answer(out, q) {
  const providers = await allProviders();
  const nameOf = (uuid) => (providers.get(uuid) || { name: uuid }).name;
  const limited = /(^|&)limit=/.test(q) ? q : q + "&limit=20";
  let found;
  try {
    found = await api("/allocation_candidates?" + limited);
  } catch (error) {
    out.append(el("p", { class: "error", text: error.message }));
    return;
  }
  const requests = found.allocation_requests;
  out.append(el("h3", { id: "candidates-heading", text: requests.length + " candidates (first page)" }));
  if (requests.length) {
    const table = el("table", { id: "candidates" }, el("tr", {}, el("th", { text: "#" }), el("th", { text: "Allocations" })));
    requests.forEach((request, i) => {
      const parts = Object.entries(request.allocations).map(
        ([uuid, a]) => nameOf(uuid) + ": " + Object.entries(a.resources).map(([rc, n]) => rc + " " + n).join(", ")
      );
      table.append(el("tr", { class: "candidate" }, el("td", { text: String(i + 1) }), el("td", { text: parts.join(" · ") })));
    });
    out.append(table);
  } else {
    const explained = await api("/allocation_candidates/explain?" + q);
    out.append(el("h3", { text: "Why nothing fits" }), el("p", { class: "reason", id: "reason", text: explained.reason }));
    out.append(funnel(explained));
    if (explained.closest.length) {
      out.append(el("h3", { text: "Closest misses" }), closestTable(explained.closest));
    }
  }
  try {
    const capacity = await api("/allocation_candidates/capacity?" + q);
    out.append(el("h3", { text: "Capacity: " + capacity.capacity + " more fit" + (capacity.exact ? "" : " (a bound)") }));
    out.append(barChart("capacity-chart", capacity.roots.slice(0, 20).map((r) => [r.name, r.count, (r.limited_by || []).join(", ")])));
  } catch (error) {
    out.append(el("p", { class: "hint", text: "Capacity: " + (error.status === 404 ? "not offered by this server" : error.message) }));
  }
}

// How many more of each named shape fit, as a bar chart.
async function shapeChart(view, text) {
  const shapes = text.split("\n").map((line) => line.split(/:(.*)/s)).filter((p) => p.length > 1 && p[1].trim());
  const rows = await each(shapes, async ([name, query]) => {
    try {
      const found = await api("/allocation_candidates/capacity?" + query.trim().replace(/^\?/, ""));
      return [name.trim(), found.capacity, found.exact ? "" : "bound"];
    } catch (error) {
      return [name.trim(), 0, error.message];
    }
  });
  view.append(el("h3", { text: "Capacity per shape" }), barChart("shape-chart", rows));
}

// What a closest miss lacks, in words: {"VCPU": {"requested": 8, "free": 6}}
// is "VCPU: 8 requested, 6 free"; lists name what is missing.
function lacksText(lacks) {
  const parts = [];
  for (const [key, value] of Object.entries(lacks || {})) {
    if (Array.isArray(value)) {
      if (value.length) {
        parts.push(key.replace(/_/g, " ") + ": " + value.map((v) => (Array.isArray(v) ? v.join(" or ") : v)).join(", "));
      }
    } else if (value && typeof value === "object") {
      const detail = [value.requested + " requested", value.free + " free"];
      if (value.min_unit !== undefined) detail.push("units " + value.min_unit + " to " + value.max_unit);
      if (value.step_size !== undefined) detail.push("step " + value.step_size);
      parts.push(key + ": " + detail.join(", "));
    } else {
      parts.push(key.replace(/_/g, " ") + ": " + value);
    }
  }
  return parts.join("; ");
}

// Explain's closest misses: the providers (or trees) that fail one filter.
function closestTable(closest) {
  const table = el(
    "table",
    { id: "closest" },
    el("tr", {}, el("th", { text: "Provider or tree" }), el("th", { text: "Group" }),
      el("th", { text: "Fails" }), el("th", { text: "Lacks" }))
  );
  for (const entry of closest) {
    const uuid = entry.provider || entry.tree;
    const fails = entry.filter + (entry.resource_class ? " (as " + entry.resource_class + " provider)" : "");
    table.append(
      el(
        "tr",
        { class: "closest", "data-uuid": uuid },
        el("td", {}, entry.name || uuid, el("div", { class: "hint", text: uuid })),
        el("td", { text: entry.group === undefined ? "(request)" : "'" + entry.group + "'" }),
        el("td", { text: fails }),
        el("td", { text: lacksText(entry.lacks) })
      )
    );
  }
  return table;
}

// A horizontal bar of ``width`` pixels in a track of ``track`` pixels
// (centred when ``centred``).
function bar(width, track, cls, centred) {
  const graphic = svg("svg", { width: track, height: 14, role: "img" });
  graphic.append(svg("rect", { x: centred ? (track - width) / 2 : 0, y: 0, width, height: 14, class: cls }));
  return graphic;
}

// Rows of label, bar, value in a grid whose columns grow with their text:
// a label wraps inside its cell and never runs over the bar or the page.
function chart(id, cls, rows) {
  const grid = el("div", { class: "chart " + cls, id, role: "table" });
  for (const row of rows) {
    grid.append(
      el("div", { class: "chart-label" + (row.cls ? " " + row.cls : ""), role: "cell", text: row.label }),
      el("div", { class: "chart-bar", role: "cell" }, row.bar),
      el("div", { class: "chart-value", role: "cell", text: row.value })
    );
  }
  return grid;
}

// The explain funnel: each filter a bar as wide as what it leaves; the
// first that leaves nothing in red, and the group filter that left the
// groups no shared tree (``emptied_by``) outlined.
function funnel(explained) {
  const steps = [];
  let emptiedBy = null;
  for (const step of explained.request || []) {
    steps.push(["request · " + step.filter, step.trees, "trees", false]);
    if (step.emptied_by) emptiedBy = step.emptied_by;
  }
  for (const [suffix, funnelSteps] of Object.entries(explained.groups || {})) {
    let rc = null;
    for (const step of funnelSteps) {
      if (step.filter.startsWith("resources:")) rc = step.filter.slice(10);
      const count = step.providers !== undefined ? step.providers : step.trees;
      const emptied = Boolean(
        emptiedBy && emptiedBy.group === suffix && emptiedBy.filter === step.filter &&
        (emptiedBy.resource_class === undefined || emptiedBy.resource_class === rc)
      );
      steps.push(["group '" + suffix + "' · " + step.filter, count, step.providers !== undefined ? "providers" : "trees", emptied]);
    }
  }
  const widest = Math.max(1, ...steps.map((s) => s[1]));
  return chart(
    "funnel",
    "funnel",
    steps.map(([label, count, unit, emptied]) => {
      const cls = "funnel-step" + (count ? "" : " zero") + (emptied ? " emptied" : "");
      return {
        label,
        cls: "funnel-label" + (emptied ? " emptied" : ""),
        bar: bar(Math.max(2, Math.round(300 * count / widest)), 300, cls, true),
        value: count + " " + unit + (emptied ? " (left no tree the other groups share)" : ""),
      };
    })
  );
}

function barChart(id, rows) {
  const widest = Math.max(1, ...rows.map((r) => r[1]));
  return chart(
    id,
    "bars",
    rows.map(([label, value, note]) => ({
      label,
      bar: bar(Math.max(2, Math.round(300 * value / widest)), 300, "fill", false),
      value: value + (note ? " (" + note + ")" : ""),
    }))
  );
}

// ---- drain ----

// A drain plan (GET /maintenance/drain, doc/drain.md): where every consumer
// of some hosts would go if they were emptied, and why the ones that fit
// nowhere do not.
async function drainView(view, params) {
  const form = el(
    "form",
    { id: "drain-form", class: "filters" },
    el("label", {}, "Hosts (provider uuids, comma separated)",
      el("input", { name: "providers", type: "text", size: 70, value: params.get("providers") || "" })),
    el("label", {}, "or aggregate", el("input", { name: "member_of", type: "text", value: params.get("member_of") || "" })),
    el("label", {}, "Strategy", el("select", { name: "strategy" },
      ...["first", "spread", "pack"].map((s) => el("option", { value: s, text: s })))),
    el("button", { type: "submit", text: "Plan the drain" })
  );
  form.elements.strategy.value = params.get("strategy") || "first";
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    for (const key of ["providers", "member_of"]) {
      const value = form.elements[key].value.replace(/\s+/g, "");
      if (value) next.set(key, value);
    }
    next.set("strategy", form.elements.strategy.value);
    location.hash = "#/drain?" + next.toString();
  });
  view.append(el("h2", { text: "Drain" }), form);
  const query = new URLSearchParams();
  for (const key of ["providers", "member_of", "strategy"]) {
    if (params.get(key)) query.set(key, params.get(key));
  }
  if (!query.get("providers") && !query.get("member_of")) return;
  const out = el("div", { id: "drain-result" });
  view.append(out);
  const providers = await allProviders();
  const nameOf = (uuid) => (providers.get(uuid) || { name: uuid }).name;
  let plan;
  try {
    plan = await api("/maintenance/drain?" + query.toString().replace(/%2C/g, ","));
  } catch (error) {
    const text = error.status === 403
      ? "Refused (403): a drain plan needs the admin role (rule placement:maintenance:drain)."
      : error.message;
    out.append(el("p", { class: "error", id: "drain-error", text }));
    return;
  }
  const totals = plan.totals;
  out.append(el("p", { id: "drain-totals", text:
    "Draining " + plan.drained.map((d) => d.name || d.uuid).join(", ") + " (" + plan.strategy + "): " +
    totals.placed + " of " + totals.consumers + " consumers placed, " + totals.left + " left." }));
  const moves = el(
    "table",
    { id: "drain-moves" },
    el("tr", {}, el("th", { text: "#" }), el("th", { text: "Consumer" }), el("th", { text: "From" }),
      el("th", { text: "To" }), el("th", { text: "Allocations there" }))
  );
  plan.moves.forEach((move, i) => {
    const parts = Object.entries(move.allocations).map(
      ([uuid, a]) => nameOf(uuid) + ": " + Object.entries(a.resources).map(([rc, n]) => rc + " " + n).join(", ") +
        (move.kept.includes(uuid) ? " (kept)" : "")
    );
    moves.append(el("tr", { class: "drain-move", "data-consumer": move.consumer },
      el("td", { text: String(i + 1) }),
      el("td", { text: move.consumer }),
      el("td", { text: move.source.name || move.source.uuid }),
      el("td", {}, el("a", { href: "#/provider/" + move.target.uuid, text: move.target.name || move.target.uuid })),
      el("td", { text: parts.join(" · ") })));
  });
  out.append(el("h3", { text: "Moves (" + plan.moves.length + ")" }), moves);
  if (plan.unplaced.length) {
    const left = el(
      "table",
      { id: "drain-unplaced" },
      el("tr", {}, el("th", { text: "Consumer" }), el("th", { text: "From" }), el("th", { text: "Why it fits nowhere" }),
        el("th", { text: "Equivalent query" }))
    );
    for (const entry of plan.unplaced) {
      left.append(el("tr", { class: "drain-unplaced", "data-consumer": entry.consumer },
        el("td", { text: entry.consumer }),
        el("td", { text: entry.source.name || entry.source.uuid }),
        el("td", { class: "reason", text: entry.reason }),
        el("td", {}, el("a", { href: "#/query?" + new URLSearchParams({ q: entry.query }).toString(), text: entry.query }))));
    }
    out.append(el("h3", { text: "Fit nowhere (" + plan.unplaced.length + ")" }), left);
  }
  out.append(el("h3", { text: "Left on the rest of the cloud" }),
    el("div", { id: "drain-capacity" }, ...Object.entries(plan.capacity_left).map(([rc, c]) => usageBar(rc, c))));
}

// ---- routing ----

async function route() {
  const signedIn = Boolean(token());
  document.getElementById("nav").hidden = !signedIn;
  document.getElementById("sign-in").hidden = signedIn;
  const view = document.getElementById("view");
  view.replaceChildren();
  view.removeAttribute("data-ready");
  if (!signedIn) return;
  const [path, search] = (location.hash.slice(1) || "/cloud").split("?");
  const params = new URLSearchParams(search || "");
  try {
    if (path.startsWith("/provider/")) await providerView(view, decodeURIComponent(path.slice(10)));
    else if (path === "/query") await queryView(view, params);
    else if (path === "/drain") await drainView(view, params);
    else await cloudView(view, params);
    view.setAttribute("data-ready", "1");
  } catch (error) {
    if (error.status !== 401) view.append(el("p", { class: "error", text: error.message }));
  }
}

window.addEventListener("hashchange", route);
route();

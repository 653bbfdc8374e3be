// Drives headless Chromium against the master's dashboard (GET /, src/master/dashboard.html).
// Started by dashboard_test.py, which runs the masters and nodes and passes a JSON config:
//   node dashboard.mjs CONFIG.json
//   {"chromium": path, "screenshot": path,
//    "quota": {"url": "http://127.0.0.1:P", "token": "...", "new_tenant": "tenant-c",
//              "requested": {"tenant-a": "24 MB", ...}, "evicted": {"tenant-b": 2}},
//    "plain": {"url": "http://127.0.0.1:Q"}}
// Exits 0 when every check passed, 1 with the failures on stderr otherwise.
//
// Why playwright-core: it drives an installed Chromium (Debian's, executablePath) over the
// DevTools protocol and downloads no browser of its own; it gives console messages, failed
// requests, request interception and screenshots without our own CDP client (a websocket, target
// and session handling, event plumbing), which would be as much code as the checks themselves.
// It is pinned in package.json/package-lock.json and installed by run.sh with `npm ci`.

import { readFileSync } from "node:fs";
import { chromium } from "playwright-core";

const config = JSON.parse(readFileSync(process.argv[2], "utf8"));
const failures = [];
const check = (ok, what) => {
  if (!ok) failures.push(what);
  return ok;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Every console error, page exception, failed request and HTTP error answer of a page, from the
// moment it is opened.
function watch(page, name) {
  const problems = [];
  page.on("console", (m) => {
    if (m.type() === "error" || m.type() === "warning") {
      problems.push(`${name} console ${m.type()}: ${m.text()}`);
    }
  });
  page.on("pageerror", (e) => problems.push(`${name} exception: ${e.message}`));
  page.on("requestfailed", (r) => problems.push(`${name} request failed: ${r.url()} ${r.failure()?.errorText}`));
  page.on("response", (r) => {
    if (r.status() >= 400) problems.push(`${name} HTTP ${r.status()}: ${r.url()}`);
  });
  return problems;
}

async function api(base, path, init = {}) {
  const res = await fetch(base + path, init);
  return { status: res.status, body: await res.json() };
}

// Waits until the page has finished `n` more refreshes than it had.
async function nextRefreshes(page, n) {
  const now = Number(await page.getAttribute("body", "data-refreshes"));
  await page.waitForFunction((want) => Number(document.body.dataset.refreshes) >= want, now + n,
    { timeout: 10000 });
}

// The tenant rows as the page shows them: id, the raw value and the text of each field cell, and
// the bar's committed-fill width.
function tenantRows(page) {
  return page.$$eval("#tenant-table tbody tr", (trs) => trs.map((tr) => {
    const fields = {};
    tr.querySelectorAll("td[data-field]").forEach((td) => {
      fields[td.dataset.field] = { value: td.dataset.value, text: td.textContent };
    });
    const fill = tr.querySelector(".bar .charged");
    return { id: tr.dataset.tenantId, fields, chargedWidth: fill ? parseFloat(fill.style.width) : null };
  }));
}

const kNumeric = ["charged_bytes", "inflight_bytes", "effective_quota_bytes",
  "requested_quota_bytes", "entries", "max_entries", "evicted_objects"];

// The page's rows against the API's snapshots: same tenants in the same order, same numbers.
function compareTenants(rows, snapshots) {
  const problems = [];
  const ids = rows.map((r) => r.id);
  const want = snapshots.map((s) => s.tenant_id);
  if (JSON.stringify(ids) !== JSON.stringify(want)) {
    return [`tenant rows ${JSON.stringify(ids)}, API ${JSON.stringify(want)}`];
  }
  rows.forEach((row, i) => {
    const s = snapshots[i];
    for (const f of kNumeric) {
      const shown = row.fields[f]?.value;
      const api = s[f] === null ? "" : String(s[f]);
      if (shown !== api) problems.push(`${row.id}.${f}: page ${shown}, API ${api}`);
    }
    const scale = Math.max(s.effective_quota_bytes, s.requested_quota_bytes, s.charged_bytes);
    const width = scale > 0 ? Math.min(100, (s.charged_bytes - s.inflight_bytes) * 100 / scale) : 0;
    if (row.chargedWidth === null || Math.abs(row.chargedWidth - width) > 0.01) {
      problems.push(`${row.id} bar ${row.chargedWidth}%, want ${width}%`);
    }
  });
  return problems;
}

// Reads the page and the API until a refresh has passed between two equal readings (the page
// shows what the API said up to 2 s ago; nothing writes meanwhile, so the two must agree).
async function expectTenantsMatch(page, base, what) {
  let problems = [];
  for (let attempt = 0; attempt < 3; ++attempt) {
    await nextRefreshes(page, 1);
    const rows = await tenantRows(page);
    const snap = await api(base, "/api/v1/tenant_quotas");
    problems = compareTenants(rows, snap.body.data);
    if (problems.length === 0) return rows;
  }
  failures.push(`${what}: ${problems.join("; ")}`);
  return null;
}

async function quotaPage(browser) {
  const q = config.quota;
  const page = await browser.newPage({ viewport: { width: 1400, height: 800 } });
  const problems = watch(page, "quota page");
  const response = await page.goto(q.url + "/");
  check(response.status() === 200, `GET / answered ${response.status()} without the admin token`);
  check((response.headers()["content-type"] || "").startsWith("text/html"), "GET / is not HTML");
  await nextRefreshes(page, 1);

  check(await page.textContent("#role") === "active", "role is not 'active'");
  check(await page.textContent("#status") === "ok", "status is not 'ok'");
  check(await page.textContent("#quota-mode") === "on", "quota mode is not 'on'");
  check((await page.textContent("#last-updated")) !== "never", "'last updated' never set");
  check(!(await page.isVisible("#error")), "the error banner shows on a healthy master");

  const rows = await expectTenantsMatch(page, q.url, "tenants before the new one");
  if (rows) {
    for (const [id, text] of Object.entries(q.requested)) {
      const row = rows.find((r) => r.id === id);
      check(row?.fields.requested_quota_bytes.text === text,
        `${id} requested shows '${row?.fields.requested_quota_bytes.text}', want '${text}'`);
    }
    for (const [id, n] of Object.entries(q.evicted)) {
      const row = rows.find((r) => r.id === id);
      check(row?.fields.evicted_objects.value === String(n),
        `${id} evicted shows ${row?.fields.evicted_objects.value}, want ${n}`);
    }
  }
  const segs = (await api(q.url, "/api/v1/segments")).body.data;
  const segRows = await page.$$eval("#segment-table tbody tr[data-segment]", (t) => t.length);
  check(segRows === segs.length && segs.length > 0, `${segRows} segment rows, API has ${segs.length}`);

  // A tenant created through the API shows within two refreshes (4 s; 6 s allowed for a busy
  // machine).
  const put = await api(q.url, `/api/v1/tenant_quotas?tenant_id=${q.new_tenant}`, {
    method: "PUT",
    headers: { Authorization: `Bearer ${q.token}`, "Content-Type": "application/json" },
    body: JSON.stringify({ requested_quota_bytes: 4 * 1024 * 1024 }),
  });
  check(put.status === 200, `PUT ${q.new_tenant} answered ${put.status}: ${JSON.stringify(put.body)}`);
  const started = Date.now();
  try {
    await page.waitForSelector(`#tenant-table tr[data-tenant-id="${q.new_tenant}"]`, { timeout: 6000 });
    console.log(`${q.new_tenant} appeared after ${Date.now() - started} ms`);
  } catch (e) {
    failures.push(`${q.new_tenant} did not appear within 6 s of its PUT`);
  }
  await expectTenantsMatch(page, q.url, "tenants after the new one");
  check(problems.length === 0, `problems on the quota page: ${problems.join("; ")}`);
  await page.screenshot({ path: config.screenshot, fullPage: true });

  // A failing fetch shows the banner (never a silent stale page) and clears once it answers.
  await page.route("**/api/v1/segments", (r) => r.abort());
  await nextRefreshes(page, 1);
  const banner = (await page.isVisible("#error")) ? await page.textContent("#error") : "";
  check(banner.includes("/api/v1/segments"), `banner on a failed fetch: '${banner}'`);
  await page.unroute("**/api/v1/segments");
  await nextRefreshes(page, 1);
  check(!(await page.isVisible("#error")), "the error banner stays after the API answers again");

  // Absent and odd fields render as '-' without an exception; cgroup figures get their column
  // only when a segment carries them.
  const odd = await browser.newPage();
  const oddProblems = [];
  odd.on("pageerror", (e) => oddProblems.push(`exception: ${e.message}`));
  await odd.route("**/api/v1/tenant_quotas", (r) => r.fulfill({
    contentType: "application/json",
    body: JSON.stringify({ success: true, data: [{}, null, 5, "x", { tenant_id: 7, charged_bytes: "9",
      inflight_bytes: -1, effective_quota_bytes: 0, max_entries: {}, over_quota: "yes" }] }),
  }));
  await odd.route("**/api/v1/segments", (r) => r.fulfill({
    contentType: "application/json",
    body: JSON.stringify({ success: true, data: [null, { name: "s1", node_id: "n1", size_bytes: 1024,
      used_bytes: 512, cgroup: { path: "/granary/n1", memory_usage_bytes: 1048576,
        memory_limit_bytes: 2097152 } }, { name: "s2", size_bytes: "big", cgroup: 3 }, {}] }),
  }));
  await odd.goto(q.url + "/");
  await nextRefreshes(odd, 1);
  const oddRows = await odd.$$eval("#tenant-table tbody tr", (t) => t.length);
  check(oddRows === 2, `odd tenants: ${oddRows} rows, want 2 (the two objects)`);
  const cg = await odd.$$eval("#segment-table td[data-field=cgroup]", (t) => t.map((c) => c.textContent));
  check(cg.includes("/granary/n1, 1 MB of 2 MB"), `cgroup cells ${JSON.stringify(cg)}`);
  check(await odd.isVisible("#segment-table th.cgroup"), "no cgroup column although a segment has one");
  check(!(await odd.isVisible("#error")), `banner on odd fields: ${await odd.textContent("#error")}`);
  check(oddProblems.length === 0, oddProblems.join("; "));
  check(!(await page.isVisible("#segment-table th.cgroup")), "cgroup column without cgroup figures");
}

async function plainPage(browser) {
  const p = config.plain;
  const page = await browser.newPage({ viewport: { width: 1400, height: 600 } });
  const problems = watch(page, "quota-off page");
  await page.goto(p.url + "/");
  await nextRefreshes(page, 1);
  const note = await page.getAttribute("#tenants-note", "data-state");
  check(note === "quota-off" && (await page.isVisible("#tenants-note")),
    `quota-off master: tenants note state ${note}`);
  check((await page.textContent("#tenants-note")).includes("Quota off"), "no 'Quota off' text");
  check(await page.textContent("#quota-mode") === "off", "quota mode is not 'off'");
  const segs = (await api(p.url, "/api/v1/segments")).body.data;
  const names = await page.$$eval("#segment-table tbody tr[data-segment]", (t) => t.map((r) => r.dataset.segment));
  check(segs.length > 0 && JSON.stringify(names.sort()) === JSON.stringify(segs.map((s) => s.name).sort()),
    `quota-off segments ${JSON.stringify(names)}, API ${JSON.stringify(segs.map((s) => s.name))}`);
  check(!(await page.isVisible("#error")), "error banner on the quota-off master");
  check(problems.length === 0, `problems on the quota-off page: ${problems.join("; ")}`);
}

const browser = await chromium.launch({ executablePath: config.chromium, headless: true });
try {
  await quotaPage(browser);
  await plainPage(browser);
} catch (e) {
  failures.push(`driver: ${e.stack || e}`);
} finally {
  await browser.close();
}
if (failures.length > 0) {
  console.error(failures.map((f) => `FAIL ${f}`).join("\n"));
  process.exit(1);
}
console.log("dashboard: every check passed; screenshot " + config.screenshot);

// Every control has an accessible name (issue 41, item 6): walks each view's tab order with the keyboard, as a
// screen-reader user would, and asks Chromium's accessibility tree for the name of every control that takes the
// focus; then checks every control in the tree (disabled ones, which the tab order skips, included).
// Run through run.mjs (it starts `loadshape serve` and passes LOADSHAPE_URL with #token=).
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { launchBrowser, openAdvanced } from './harness.mjs';

const URL_WITH_TOKEN = process.env.LOADSHAPE_URL;
const EXPLORER = '[data-summary="explorer"]';
/** Roles of things a user operates. */
const CONTROL_ROLES = new Set(['button', 'checkbox', 'combobox', 'link', 'listbox', 'menuitem', 'radio', 'slider',
  'spinbutton', 'switch', 'tab', 'textbox', 'searchbox']);

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser?.close(); });

/** The accessible name and role of the focused element, from Chromium's accessibility tree. */
async function focusedName(page, cdp) {
  const tag = await page.evaluate(() => {
    const el = document.activeElement;
    if (!el || el === document.body) return null;
    document.querySelectorAll('[data-a11y-focus]').forEach((e) => e.removeAttribute('data-a11y-focus'));
    el.setAttribute('data-a11y-focus', '');
    return `${el.tagName.toLowerCase()}${el.type ? `[type=${el.type}]` : ''} ${el.dataset.pointer ?? el.dataset.action ?? el.dataset.control ?? el.dataset.view ?? el.textContent.trim().slice(0, 30)}`;
  });
  if (!tag) return null;
  const { root } = await cdp.send('DOM.getDocument', { depth: 0 });
  const { nodeId } = await cdp.send('DOM.querySelector', { nodeId: root.nodeId, selector: '[data-a11y-focus]' });
  const { nodes } = await cdp.send('Accessibility.getPartialAXTree', { nodeId, fetchRelatives: false });
  const node = nodes.find((n) => !n.ignored) ?? nodes[0];
  return { tag, role: node?.role?.value ?? '', name: (node?.name?.value ?? '').trim() };
}

/** Tabs through the page from the top until the focus comes back around; returns what took the focus. */
async function walkTabOrder(page, cdp, limit = 400) {
  await page.evaluate(() => { document.activeElement?.blur(); window.scrollTo(0, 0); });
  const seen = [];
  const keys = new Set();
  for (let i = 0; i < limit; i += 1) {
    await page.keyboard.press('Tab');
    const f = await focusedName(page, cdp);
    if (!f) continue;
    const key = await page.evaluate(() => {
      const el = document.activeElement;
      if (!el.dataset.a11yIndex) el.dataset.a11yIndex = String(document.querySelectorAll('[data-a11y-index]').length);
      return el.dataset.a11yIndex;
    });
    if (keys.has(key)) break;
    keys.add(key);
    seen.push(f);
  }
  return seen;
}

/** Controls anywhere in the accessibility tree (shown ones: hidden views are not in it) without a name. */
async function unnamedControls(cdp) {
  const { nodes } = await cdp.send('Accessibility.getFullAXTree');
  return nodes.filter((n) => !n.ignored && CONTROL_ROLES.has(n.role?.value) && !(n.name?.value ?? '').trim())
    .map((n) => `${n.role.value} (${n.properties?.map((p) => `${p.name}=${p.value?.value}`).join(' ') ?? ''})`);
}

test('every control in every view has an accessible name, in tab order and in the tree', async () => {
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(URL_WITH_TOKEN);
  await page.locator(`${EXPLORER} [data-metric="ttft_p50_ms"]`).first().waitFor({ timeout: 30000 });
  await page.locator('[data-status="connected"]').first().waitFor({ timeout: 20000 });
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Accessibility.enable');
  await cdp.send('DOM.enable');

  const views = {
    explorer: async () => {
      await openAdvanced(page);
      const json = page.locator('details.json-box');
      if (!(await json.evaluate((d) => d.open))) await json.locator('summary').click();
      await page.locator('[data-action="pin"]').click();
      await page.locator('[data-action="copy-link"]').click();
    },
    compare: async () => {
      await page.locator('[data-view="compare"]').click();
      await page.locator('[data-compare="ttft_p50_ms"]').waitFor({ timeout: 20000 });
    },
    ladder: async () => {
      await page.locator('[data-view="ladder"]').click();
    },
    live: async () => {
      await page.locator('[data-view="live"]').click();
      await page.locator('[data-control="target"]').waitFor({ timeout: 20000 });
    },
  };
  const counts = {};
  for (const [view, open] of Object.entries(views)) {
    if (view === 'explorer') await page.locator('[data-view="explorer"]').click();
    await open();
    const walked = await walkTabOrder(page, cdp);
    counts[view] = walked.length;
    const unnamed = walked.filter((f) => !f.name);
    assert.deepEqual(unnamed, [], `${view}: controls in the tab order without an accessible name`);
    assert.deepEqual(await unnamedControls(cdp), [], `${view}: controls in the accessibility tree without a name`);
  }
  // The walk reached the controls (a broken walk would pass vacuously): the explorer's sliders, number boxes and
  // actions, and each other view's own controls besides the header's four tabs.
  assert.ok(counts.explorer >= 60, `explorer: ${counts.explorer} controls in the tab order`);
  for (const view of ['compare', 'ladder', 'live']) assert.ok(counts[view] >= 6, `${view}: ${counts[view]}`);
  assert.deepEqual(errors, []);
  await page.close();
});

// The dashboard in a real headless Chromium (Debian's, driven by
// playwright-core) against the real service: `wrangler dev` with the Worker's
// own bundle and static assets, local Queues, over this file's own database.
// Screenshots of each view go to test-output/dashboard/ (gitignored).
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { buildDashboard } from '../../scripts/dashboard.ts';
import { startWorkerDev, type RunningWorkerDev } from '../../scripts/worker-dev.ts';
import { createClient, type Client } from '../../packages/client/src/index.ts';
import { useTestDatabase } from '../helpers/db.ts';
import { TEST_SIGNING_SECRET } from '../helpers/secrets.ts';
import { ADMIN_TOKEN } from '../helpers/http.ts';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const shots = fileURLToPath(new URL('../../test-output/dashboard/', import.meta.url));

const tdb = useTestDatabase();
let dev: RunningWorkerDev;
let browser: Browser;
let admin: Client;
let acme: Client;
let rival: Client;
let acmeKey: string;
let rivalKey: string;

/** A page signed in with `key` through the sign-in form. */
async function signedIn(key: string): Promise<Page> {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.goto(`${dev.url}/dashboard/`);
  await page.getByLabel('Tenant key or admin token').fill(key);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Queues', level: 1 }).waitFor();
  return page;
}

const shot = (page: Page, name: string) => page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
const row = (page: Page, id: string) => page.locator(`tr[data-task-id="${id}"]`);

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}: apt-get install -y chromium (.ci/run does)`);
  mkdirSync(shots, { recursive: true });
  // Always from the current source (pretest builds it too; this keeps a lone run honest).
  await buildDashboard();
  dev = await startWorkerDev({
    databaseUrl: tdb.url,
    wsProxy: inject('wsProxy'),
    adminToken: ADMIN_TOKEN,
    signingSecret: TEST_SIGNING_SECRET,
    vars: { ALLOW_PRIVATE_TARGETS: 'true' },
    testScheduled: true,
  });
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
  admin = createClient({ baseUrl: dev.url, key: ADMIN_TOKEN });
  acmeKey = (await admin.admin.createKey('acme')).key;
  rivalKey = (await admin.admin.createKey('rival')).key;
  acme = createClient({ baseUrl: dev.url, key: acmeKey });
  rival = createClient({ baseUrl: dev.url, key: rivalKey });
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await dev?.stop();
});

describe('the dashboard in Chromium', () => {
  it('is served by the Worker at /dashboard with its assets, nothing from elsewhere', async () => {
    const page = await browser.newPage();
    const hosts = new Set<string>();
    page.on('request', (r) => hosts.add(new URL(r.url()).host));
    const res = await page.goto(`${dev.url}/dashboard`);
    expect(res?.status()).toBe(200);
    await page.getByLabel('Tenant key or admin token').waitFor();
    expect([...hosts]).toEqual([new URL(dev.url).host]);
    await shot(page, '01-sign-in');
    await page.close();
  });

  it('a wrong key shows an error, not a blank page', async () => {
    const page = await browser.newPage();
    await page.goto(`${dev.url}/dashboard/`);
    await page.getByLabel('Tenant key or admin token').fill('edsk_not_a_real_key');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toContain('not accepted');
    await shot(page, '02-wrong-key');
    await page.close();
    // The same through #token=: an error, and the token is gone from the address bar at once.
    const page2 = await browser.newPage();
    await page2.goto(`${dev.url}/dashboard/#token=edsk_also_wrong`);
    expect(new URL(page2.url()).hash).toBe('');
    await expect.poll(() => page2.getByRole('alert').textContent()).toContain('not accepted');
    expect(await page2.evaluate(() => sessionStorage.length)).toBe(0);
    await page2.close();
  });

  it('signs in with a tenant key, watches an enqueued task appear and succeed without a reload, and opens it', async () => {
    const page = await signedIn(acmeKey);
    await shot(page, '03-queues-empty');
    await page.getByRole('link', { name: 'Tasks', exact: true }).click();
    await page.getByRole('heading', { name: 'Tasks', level: 1 }).waitFor();
    await page.evaluate(() => ((globalThis as unknown as { notReloaded: boolean }).notReloaded = true));

    // Paused, the task waits as queued; resumed and swept, it runs.
    await admin.admin.setQueuePaused('default', true);
    const task = await acme.tasks.enqueue({ task: 'noop', payload: { order: 42, note: '<b>not html</b>' } });
    await row(page, task.id).getByText('queued').waitFor({ timeout: 20_000 });
    await shot(page, '04-tasks-queued');
    await admin.admin.setQueuePaused('default', false);
    await fetch(`${dev.url}/__scheduled?cron=${encodeURIComponent('* * * * *')}`);
    await row(page, task.id).getByText('succeeded').waitFor({ timeout: 30_000 });
    expect(await page.evaluate(() => (globalThis as unknown as { notReloaded?: boolean }).notReloaded)).toBe(true);
    await shot(page, '05-tasks-succeeded');

    await page.getByRole('link', { name: `Open task ${task.id}` }).click();
    await page.getByRole('heading', { name: `Task ${task.id}` }).waitFor();
    const payload = await page.locator('[data-field=payload]').textContent();
    expect(JSON.parse(payload!)).toEqual({ order: 42, note: '<b>not html</b>' });
    expect(await page.locator('[data-field=payload] b').count()).toBe(0);
    expect(await page.locator('[data-field=lastError]').textContent()).toBe('None.');
    await shot(page, '06-task-detail');
    await page.close();
  });

  it('cancels a delayed task from its row', async () => {
    const task = await acme.tasks.enqueue({ task: 'noop', delay: 3600 });
    const page = await signedIn(acmeKey);
    await page.getByRole('link', { name: 'Tasks', exact: true }).click();
    await row(page, task.id).getByText('scheduled').waitFor();
    await page.getByRole('button', { name: `Cancel ${task.id}` }).click();
    await row(page, task.id).getByText('cancelled').waitFor({ timeout: 20_000 });
    expect((await acme.tasks.get(task.id)).status).toBe('cancelled');
    await shot(page, '07-task-cancelled');
    await page.close();
  });

  it('shows a dead task with its last error', async () => {
    const task = await acme.tasks.enqueue({ task: 'http', payload: { url: `${inject('receiverUrl')}/hook/gone/${crypto.randomUUID()}` } });
    const page = await signedIn(acmeKey);
    await page.getByRole('link', { name: 'Dead tasks' }).click();
    await row(page, task.id).waitFor({ timeout: 30_000 });
    expect(await row(page, task.id).textContent()).toContain('404');
    await shot(page, '08-dead-tasks');
    await page.close();
  });

  it('replays a dead task from its detail; the replay opens, links its original and succeeds', async () => {
    // An http task whose only attempt times out on a held hook: dead. Released, the hook answers 200.
    const hold = `/hook/hold/${crypto.randomUUID()}`;
    const task = await acme.tasks.enqueue({ task: 'http', payload: { url: `${inject('receiverUrl')}${hold}` }, maxAttempts: 1, timeout: 0.5 });
    const waiting = await acme.tasks.enqueue({ task: 'noop', delay: 3600 });
    const page = await signedIn(acmeKey);
    // Not finished: no Replay (the API would answer 409).
    await page.goto(`${dev.url}/dashboard/#/task/${waiting.id}`);
    await page.getByRole('button', { name: 'Cancel this task' }).waitFor();
    expect(await page.getByRole('button', { name: 'Replay this task' }).count()).toBe(0);

    await page.getByRole('link', { name: 'Dead tasks' }).click();
    await row(page, task.id).waitFor({ timeout: 30_000 });
    await fetch(`${inject('receiverUrl')}/_release?path=${encodeURIComponent(hold)}`, { method: 'POST' });
    await page.getByRole('link', { name: `Open task ${task.id}` }).click();
    await page.getByRole('heading', { name: `Task ${task.id}` }).waitFor();
    // Keyboard: focus the button and press Enter.
    await page.getByRole('button', { name: 'Replay this task' }).focus();
    await page.keyboard.press('Enter');
    await page.locator('[data-field=replayOf]').getByText(`task ${task.id}`).waitFor({ timeout: 20_000 });
    const replayId = decodeURIComponent(new URL(page.url()).hash.replace('#/task/', ''));
    expect(replayId).not.toBe(task.id);
    await page.getByRole('heading', { name: `Task ${replayId}` }).waitFor();
    expect(await page.locator('p.action-result').textContent()).toContain(`Replay of task ${task.id}`);
    await page.locator('[data-region=task] .badge').getByText('succeeded').waitFor({ timeout: 30_000 });
    // Its result and its attempts (issue 15).
    await page.locator('[data-field=attempts]').getByText('succeeded').waitFor();
    expect(await page.locator('[data-field=result]').textContent()).toContain('"status": 200');
    expect(await acme.tasks.get(replayId)).toMatchObject({ status: 'succeeded', replayOf: task.id });
    expect((await acme.tasks.get(task.id)).status).toBe('dead');
    await shot(page, '15-replayed-task');
    // The link leads back to the original.
    await page.locator('[data-field=replayOf]').click();
    await page.getByRole('heading', { name: `Task ${task.id}` }).waitFor();
    await page.locator('[data-field=attempts]').getByText('timed_out').waitFor();
    expect(await page.locator('[data-field=attempts]').textContent()).toContain('TimeoutError');
    await page.close();
  });

  it('runs a paused schedule now, and shows the error when that fails', async () => {
    await acme.schedules.put('paused-report', { cron: '0 3 * * *', timezone: 'UTC', task: 'noop' });
    await acme.schedules.pause('paused-report');
    const page = await signedIn(acmeKey);
    await page.getByRole('link', { name: 'Schedules' }).click();
    await page.getByRole('link', { name: 'paused-report' }).click();
    await page.getByRole('heading', { name: 'Next fire times' }).waitFor();
    await page.getByRole('button', { name: 'Run now' }).focus();
    await page.keyboard.press('Enter');
    const said = page.locator('p.action-result');
    await said.getByText(/Schedule paused-report ran now as task \d+/).waitFor({ timeout: 20_000 });
    const runs = (await acme.schedules.runs('paused-report')).items;
    expect(runs).toHaveLength(1);
    expect(await said.getByRole('link').textContent()).toBe(`task ${runs[0]!.id}`);
    await fetch(`${dev.url}/__scheduled?cron=${encodeURIComponent('* * * * *')}`);
    await row(page, runs[0]!.id).getByText('succeeded').waitFor({ timeout: 30_000 });
    expect((await acme.schedules.get('paused-report')).enabled).toBe(false);
    await shot(page, '16-schedule-run-now');

    // Gone behind the page's back: Run now fails with a message, not a blank.
    await acme.schedules.delete('paused-report');
    await page.getByRole('button', { name: 'Run now' }).click();
    await said.getByText(/Run schedule paused-report now failed: .*404/).waitFor({ timeout: 20_000 });
    expect(await said.getAttribute('class')).toContain('error');
    await shot(page, '17-run-now-failed');
    await page.close();
  });

  it('pauses and resumes a schedule', async () => {
    await acme.schedules.put('nightly-report', { cron: '0 3 * * *', timezone: 'Europe/Paris', task: 'noop' });
    const page = await signedIn(acmeKey);
    await page.getByRole('link', { name: 'Schedules' }).click();
    const r = page.locator('tr[data-schedule="nightly-report"]');
    await r.getByText('active').waitFor();
    await shot(page, '09-schedules');
    await page.getByRole('button', { name: 'Pause nightly-report' }).click();
    await r.getByText('paused').waitFor({ timeout: 20_000 });
    expect((await acme.schedules.get('nightly-report')).enabled).toBe(false);
    await page.getByRole('button', { name: 'Resume nightly-report' }).click();
    await r.getByText('active').waitFor({ timeout: 20_000 });
    expect((await acme.schedules.get('nightly-report')).enabled).toBe(true);
    await page.getByRole('link', { name: 'nightly-report' }).click();
    await page.getByRole('heading', { name: 'Next fire times' }).waitFor();
    expect(await page.locator('ol li').count()).toBe(5);
    await shot(page, '10-schedule-detail');
    await page.close();
  });

  it('a tenant sees none of another tenant’s data', async () => {
    const theirs = await rival.tasks.enqueue({ task: 'noop', queue: 'rival-only', delay: 3600 });
    await rival.schedules.put('rival-schedule', { interval: 3600, task: 'noop' });
    const mine = await acme.tasks.list();
    expect(mine.items.length).toBeGreaterThan(0);

    const page = await signedIn(rivalKey);
    await page.locator('[data-queue="rival-only"]').waitFor();
    expect(await page.locator('[data-queue="default"]').count()).toBe(0);
    await page.getByRole('link', { name: 'Tasks', exact: true }).click();
    await row(page, theirs.id).waitFor();
    for (const t of mine.items) expect(await row(page, t.id).count()).toBe(0);
    await page.getByRole('link', { name: 'Schedules' }).click();
    await page.locator('tr[data-schedule="rival-schedule"]').waitFor();
    expect(await page.locator('tr[data-schedule="nightly-report"]').count()).toBe(0);
    // Another tenant's task by address: not found, and nothing of it shown.
    await page.goto(`${dev.url}/dashboard/#/task/${mine.items[0]!.id}`);
    await page.getByText('No such task for this tenant.').waitFor();
    await shot(page, '11-isolation');
    await page.close();
  });

  it('the admin signs in, picks a tenant, sees the charts, pauses a queue and lists keys', async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    // #token= for scripts: taken, then removed from the address bar at once.
    await page.goto(`${dev.url}/dashboard/#token=${encodeURIComponent(ADMIN_TOKEN)}`);
    expect(new URL(page.url()).hash).toBe('');
    await page.getByLabel('Tenant to view').selectOption('acme');
    await shot(page, '12-tenant-picker');
    await page.getByRole('button', { name: 'Open' }).click();
    await page.getByTestId('who').getByText('admin, viewing tenant acme').waitFor();
    await page.getByRole('img', { name: /Tasks finished per minute in queue default/ }).waitFor({ timeout: 20_000 });
    expect(await page.getByRole('img', { name: /Tasks finished per minute in queue default/ }).getAttribute('aria-label')).toMatch(/[1-9]\d* (succeeded|dead)/);
    await page.getByRole('img', { name: /Due-to-start latency in queue default/ }).waitFor();
    await shot(page, '13-queues-charts');

    await page.getByRole('button', { name: 'Pause default' }).click();
    await page.getByRole('button', { name: 'Resume default' }).waitFor({ timeout: 20_000 });
    expect((await acme.queues.list()).find((q) => q.name === 'default')?.paused).toBe(true);
    await page.getByRole('button', { name: 'Resume default' }).click();
    await page.getByRole('button', { name: 'Pause default' }).waitFor({ timeout: 20_000 });

    await page.getByRole('link', { name: 'Keys and tenants' }).click();
    await page.getByRole('button', { name: 'View as rival' }).waitFor();
    expect(await page.locator('table code').allTextContents()).toHaveLength(2);
    // Keyboard only: tab to the tenant field, type, press Enter; the new key is shown once.
    await page.getByLabel('Tenant', { exact: true }).focus();
    await page.keyboard.type('newcomer');
    await page.keyboard.press('Enter');
    await page.locator('output.secret code').waitFor({ timeout: 20_000 });
    expect(await page.locator('output.secret code').textContent()).toMatch(/^edsk_/);
    await shot(page, '14-keys-and-tenants');
    // The token is in sessionStorage, never in localStorage or a cookie.
    expect(await page.evaluate(() => [localStorage.length, (globalThis as unknown as { document: { cookie: string } }).document.cookie])).toEqual([0, '']);
    await page.close();
  });

  it('a tenant key cannot reach the admin views or routes', async () => {
    const page = await signedIn(acmeKey);
    expect(await page.getByRole('link', { name: 'Keys and tenants' }).count()).toBe(0);
    await expect(acme.admin.listKeys()).rejects.toMatchObject({ status: 401 });
    await page.close();
  });

  // Last: its tenant's key would change the admin test's key count.
  it('replays every dead task created before the view was loaded, and says how many', async () => {
    const bulkKey = (await admin.admin.createKey('bulk')).key;
    const bulk = createClient({ baseUrl: dev.url, key: bulkKey });
    const gone = () => bulk.tasks.enqueue({ task: 'http', payload: { url: `${inject('receiverUrl')}/hook/gone/${crypto.randomUUID()}` } });
    const deadIds = async () => (await bulk.tasks.list({ status: 'dead', limit: 100 })).items.map((t) => t.id);
    const before = [await gone(), await gone(), await gone()].map((t) => t.id);
    await expect.poll(deadIds, { timeout: 30_000 }).toHaveLength(3);

    const page = await signedIn(bulkKey);
    await page.getByRole('link', { name: 'Dead tasks' }).click();
    for (const id of before) await row(page, id).waitFor();
    // Dead after the view was loaded: not matched by this view's bulk replay.
    const late = await gone();
    await expect.poll(deadIds, { timeout: 30_000 }).toContain(late.id);

    await page.getByRole('button', { name: 'Replay all dead' }).click();
    await page.getByText(/Replay every dead task created before/).waitFor();
    await shot(page, '18-bulk-replay-confirm');
    // The confirmation has the focus: Enter confirms.
    // Runs in the page (no DOM types in this project's Node tsconfig).
    const focusedText = () => (globalThis as unknown as { document: { activeElement: { textContent: string | null } | null } }).document.activeElement?.textContent;
    expect(await page.evaluate(focusedText)).toBe('Replay them');
    await page.keyboard.press('Enter');
    await page.getByText('Replayed 3 dead tasks.').waitFor({ timeout: 20_000 });
    const all = (await bulk.tasks.list({ limit: 100 })).items;
    expect(all.filter((t) => t.replayOf !== null).map((t) => t.replayOf).sort()).toEqual([...before].sort());
    await shot(page, '19-bulk-replayed');
    await page.close();
  });
});

// The dashboard: a single page over the public JSON API, through the typed
// client. The key lives in sessionStorage only (gone when the tab closes);
// `#token=<key>` is accepted for scripts and removed from the address bar
// before anything else runs. Views refresh themselves every few seconds; a
// slow call never blocks the page (each region loads on its own, at most one
// call per region in flight, each call with a timeout).
import './style.css';
import { ApiError, createClient, type Attempt, type Client, type Schedule, type Task, type TaskStatus } from './api.ts';
import { finishedChart, latencyChart } from './charts.ts';
import { append, fmtSeconds, fmtTime, h, patch, statusBadge } from './dom.ts';

const STATUSES: TaskStatus[] = ['scheduled', 'queued', 'running', 'succeeded', 'dead', 'cancelled', 'missed'];
/** The statuses a task can be replayed from (the API answers 409 for the others). */
const TERMINAL: TaskStatus[] = ['succeeded', 'dead', 'cancelled', 'missed'];
const BULK_LIMIT = 1000;
/** Bulk replay calls per click at most (BULK_LIMIT each): a runaway loop is bounded. */
const BULK_ROUNDS = 100;
const SESSION_KEY = 'edge-scheduler.session';
const REFRESH_MS = 2000;
const CALL_TIMEOUT_MS = 10_000;

interface Session {
  token: string;
  admin: boolean;
  /** The tenant the admin acts as; null for a tenant key (the key decides). */
  tenant: string | null;
}

// --- 1. A token in the address bar is taken and removed at once. ----------
const fromHash = /^#token=([^&]+)/.exec(location.hash);
if (fromHash) {
  const token = decodeURIComponent(fromHash[1]!);
  history.replaceState(null, '', `${location.pathname}${location.search}`);
  sessionStorage.setItem(SESSION_KEY, JSON.stringify({ token, admin: false, tenant: null, unchecked: true }));
}

const app = document.getElementById('app')!;

function loadSession(): (Session & { unchecked?: boolean }) | null {
  try {
    const raw = sessionStorage.getItem(SESSION_KEY);
    return raw ? (JSON.parse(raw) as Session) : null;
  } catch {
    return null;
  }
}
const saveSession = (s: Session) => sessionStorage.setItem(SESSION_KEY, JSON.stringify(s));

function clientFor(token: string, tenant?: string | null): Client {
  return createClient({
    baseUrl: location.origin,
    key: token,
    tenant: tenant ?? undefined,
    fetch: (req) => fetch(req, { signal: AbortSignal.timeout(CALL_TIMEOUT_MS) }),
  });
}

function describeError(e: unknown): string {
  if (e instanceof ApiError) {
    if (e.status === 401) return 'This key was not accepted (401). Check it and try again.';
    return `${e.message} (${e.status} ${e.code})`;
  }
  if (e instanceof DOMException && (e.name === 'TimeoutError' || e.name === 'AbortError')) return 'The service did not answer in time.';
  return e instanceof Error ? e.message : String(e);
}

// --- 2. Sign-in. ----------------------------------------------------------
/** Admin token or tenant key? The admin token lists tenants; a tenant key gets 401 there. */
async function identify(token: string): Promise<{ admin: boolean; tenants: string[] }> {
  try {
    return { admin: true, tenants: await clientFor(token).admin.listTenants() };
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 401)) throw e;
  }
  await clientFor(token).queues.list(); // throws 401 for a wrong key
  return { admin: false, tenants: [] };
}

function signInView(message?: string): void {
  stopRefresh();
  const error = h('p', { class: 'error', role: 'alert', id: 'signin-error' }, message ?? '');
  const input = h('input', {
    id: 'token',
    name: 'token',
    type: 'password',
    autocomplete: 'off',
    required: true,
    'aria-describedby': 'token-help signin-error',
  });
  const form = h(
    'form',
    { class: 'signin', 'aria-labelledby': 'signin-title' },
    h('h1', { id: 'signin-title' }, 'Edge scheduler'),
    h('label', { for: 'token' }, 'Tenant key or admin token'),
    input,
    h('p', { id: 'token-help', class: 'help' }, 'Kept in this tab only (sessionStorage) and sent as a bearer token to this service.'),
    h('button', { type: 'submit' }, 'Sign in'),
    error,
  );
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    error.textContent = 'Checking…';
    await signIn(input.value.trim(), error);
  });
  app.replaceChildren(h('main', { id: 'main', tabindex: '-1' }, form));
  input.focus();
}

async function signIn(token: string, error: HTMLElement): Promise<void> {
  if (!token) {
    error.textContent = 'Enter a key.';
    return;
  }
  try {
    const who = await identify(token);
    if (who.admin) tenantPicker(token, who.tenants);
    else {
      saveSession({ token, admin: false, tenant: null });
      start();
    }
  } catch (e) {
    sessionStorage.removeItem(SESSION_KEY);
    error.textContent = describeError(e);
  }
}

function tenantPicker(token: string, tenants: string[]): void {
  const select = h('select', { id: 'tenant-pick', name: 'tenant' }, ...tenants.map((t) => h('option', { value: t }, t)));
  const other = h('input', { id: 'tenant-other', name: 'other', autocomplete: 'off', placeholder: tenants.length ? 'or another tenant' : 'default' });
  const form = h(
    'form',
    { class: 'signin', 'aria-labelledby': 'pick-title' },
    h('h1', { id: 'pick-title' }, 'Signed in as admin'),
    tenants.length ? h('label', { for: 'tenant-pick' }, 'Tenant to view') : null,
    tenants.length ? select : null,
    h('label', { for: 'tenant-other' }, tenants.length ? 'Or type a tenant name' : 'Tenant to view'),
    other,
    h('button', { type: 'submit' }, 'Open'),
  );
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const tenant = other.value.trim() || select.value || 'default';
    saveSession({ token, admin: true, tenant });
    start();
  });
  app.replaceChildren(h('main', { id: 'main', tabindex: '-1' }, form));
  (tenants.length ? select : other).focus();
}

// --- 3. The shell: header, navigation, the current view, the refresh loop. -
interface View {
  title: string;
  /** Builds the view's regions once. */
  mount(main: HTMLElement): void;
  /** Reloads its data; called on mount and every REFRESH_MS. */
  refresh(): Promise<void>;
}

let session: Session;
let api: Client;
let adminApi: Client | null = null;
let timer: ReturnType<typeof setInterval> | undefined;
let current: View | undefined;
let refreshing = false;
let statusLine: HTMLElement;
/** Said by an action that opened another view (e.g. Replay opens the replay): shown there once. */
let flash: string | null = null;

function takeFlash(out: HTMLElement): void {
  if (flash) out.textContent = flash;
  flash = null;
}

function stopRefresh(): void {
  if (timer) clearInterval(timer);
  timer = undefined;
}

function tick(): void {
  const view = current;
  if (!view || refreshing) return; // at most one refresh in flight: a slow query never piles up
  refreshing = true;
  view
    .refresh()
    .then(() => {
      statusLine.textContent = `Updated ${new Date().toISOString().slice(11, 19)}Z`;
      statusLine.classList.remove('stale');
    })
    .catch((e) => {
      if (e instanceof ApiError && e.status === 401) {
        sessionStorage.removeItem(SESSION_KEY);
        signInView('Your key is no longer accepted (401). Sign in again.');
        return;
      }
      statusLine.textContent = `Refresh failed: ${describeError(e)}; retrying`;
      statusLine.classList.add('stale');
    })
    .finally(() => {
      refreshing = false;
    });
}

const NAV: { id: string; label: string; admin?: boolean }[] = [
  { id: 'queues', label: 'Queues' },
  { id: 'tasks', label: 'Tasks' },
  { id: 'dead', label: 'Dead tasks' },
  { id: 'schedules', label: 'Schedules' },
  { id: 'admin', label: 'Keys and tenants', admin: true },
];

function start(): void {
  const s = loadSession();
  if (!s) return signInView();
  if ((s as { unchecked?: boolean }).unchecked) {
    // From #token=: find out whether it is the admin token or a tenant key.
    const err = h('p', { class: 'error', role: 'alert' }, 'Checking…');
    app.replaceChildren(h('main', { id: 'main', tabindex: '-1' }, err));
    void signIn(s.token, err).then(() => {
      if (!loadSession()) signInView(err.textContent ?? undefined);
    });
    return;
  }
  session = s;
  api = clientFor(s.token, s.admin ? s.tenant : null);
  adminApi = s.admin ? clientFor(s.token) : null;
  statusLine = h('p', { class: 'refresh', role: 'status', 'aria-live': 'polite' }, 'Loading…');
  const who = s.admin ? `admin, viewing tenant ${s.tenant}` : 'tenant key';
  const header = h(
    'header',
    {},
    h('span', { class: 'brand' }, 'Edge scheduler'),
    h('span', { class: 'who', 'data-testid': 'who' }, who),
    statusLine,
    s.admin ? h('button', { type: 'button', onclick: () => tenantPickerFromShell() }, 'Switch tenant') : null,
    h('button', { type: 'button', onclick: signOut }, 'Sign out'),
  );
  const nav = h(
    'nav',
    { 'aria-label': 'Views' },
    ...NAV.filter((n) => !n.admin || s.admin).map((n) => h('a', { href: `#/${n.id}`, 'data-nav': n.id }, n.label)),
  );
  const main = h('main', { id: 'main', tabindex: '-1' });
  app.replaceChildren(header, nav, main);
  window.onhashchange = () => route(main);
  route(main);
  stopRefresh();
  timer = setInterval(tick, REFRESH_MS);
}

async function tenantPickerFromShell(): Promise<void> {
  stopRefresh();
  try {
    tenantPicker(session.token, await adminApi!.admin.listTenants());
  } catch (e) {
    signInView(describeError(e));
  }
}

function signOut(): void {
  sessionStorage.removeItem(SESSION_KEY);
  window.onhashchange = null;
  current = undefined;
  signInView();
}

function route(main: HTMLElement): void {
  const [, name = 'queues', arg] = /^#\/([a-z]+)(?:\/(.+))?$/.exec(location.hash) ?? [];
  let view: View;
  if (name === 'task' && arg) view = taskDetailView(decodeURIComponent(arg));
  else if (name === 'schedule' && arg) view = scheduleDetailView(decodeURIComponent(arg));
  else if (name === 'tasks') view = tasksView(false);
  else if (name === 'dead') view = tasksView(true);
  else if (name === 'schedules') view = schedulesView();
  else if (name === 'admin' && session.admin) view = adminView();
  else view = queuesView();
  for (const a of document.querySelectorAll<HTMLAnchorElement>('nav a')) {
    const on = a.dataset.nav === name || (name === 'task' && a.dataset.nav === 'tasks') || (name === 'schedule' && a.dataset.nav === 'schedules');
    if (on) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  current = view;
  main.replaceChildren();
  view.mount(main);
  document.title = `${view.title} · Edge scheduler`;
  refreshing = false;
  tick();
}

/**
 * Runs a user action; reports its error beside it and refreshes the view.
 * `fn` may return what to say on success (text or nodes, e.g. a link to the
 * task it made) in place of "done".
 */
async function act<T>(out: HTMLElement, what: string, fn: () => Promise<T>, said?: (r: T) => (Node | string)[]): Promise<void> {
  out.textContent = `${what}…`;
  out.classList.remove('error');
  try {
    const r = await fn();
    if (said) out.replaceChildren(...said(r));
    else out.textContent = `${what}: done.`;
  } catch (e) {
    out.textContent = `${what} failed: ${describeError(e)}`;
    out.classList.add('error');
  }
  refreshing = false;
  tick();
}

// --- 4. Views. --------------------------------------------------------------
function queuesView(): View {
  const table = h('div', { 'data-region': 'queues' });
  const charts = h('div', { 'data-region': 'charts', class: 'charts' });
  const out = h('p', { class: 'action-result', role: 'status' });
  let chartsBusy = false;
  return {
    title: 'Queues',
    mount(main) {
      main.append(h('h1', {}, 'Queues'), out, table, h('h2', {}, 'The last hour'), charts);
    },
    async refresh() {
      // The charts' query has its own pace: it never holds up the table.
      if (!chartsBusy) {
        chartsBusy = true;
        api.stats
          .finished(60)
          .then((rows) => {
            const now = Date.now();
            const queues = [...new Set(rows.map((r) => r.queue))].sort();
            patch(charts, JSON.stringify([rows, Math.floor(now / 60_000)]), () =>
              queues.length === 0
                ? [h('p', {}, 'No task finished in the last hour.')]
                : queues.map((q) => {
                    const mine = rows.filter((r) => r.queue === q);
                    return h('section', { class: 'chart-row' }, h('h3', {}, `Queue ${q}`), finishedChart(q, mine, now), latencyChart(q, mine, now));
                  }),
            );
          })
          .catch((e) => patch(charts, `error:${describeError(e)}`, () => [h('p', { class: 'error' }, `Charts: ${describeError(e)}`)]))
          .finally(() => (chartsBusy = false));
      }
      const queues = await api.queues.list();
      patch(table, JSON.stringify(queues), () => [
        queues.length === 0
          ? h('p', {}, 'No tasks yet.')
          : h(
              'table',
              {},
              h('caption', {}, 'Tasks by status per queue (finished: in the last hour); lag is how long the oldest due task has waited'),
              h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Queue'), h('th', { scope: 'col' }, 'State'), ...STATUSES.map((st) => h('th', { scope: 'col', class: 'num' }, st)), h('th', { scope: 'col', class: 'num' }, 'Lag'), session.admin ? h('th', { scope: 'col' }, 'Actions') : null)),
              h(
                'tbody',
                {},
                ...queues.map((q) =>
                  h(
                    'tr',
                    { 'data-queue': q.name },
                    h('th', { scope: 'row' }, q.name),
                    h('td', {}, q.paused ? h('span', { class: 'badge st-paused' }, 'paused') : 'running'),
                    ...STATUSES.map((st) => h('td', { class: 'num', 'data-status': st }, q.counts[st] ?? 0)),
                    h('td', { class: 'num' }, fmtSeconds(q.lagSeconds)),
                    session.admin
                      ? h(
                          'td',
                          {},
                          h(
                            'button',
                            {
                              type: 'button',
                              'data-focus': `queue-${q.name}`,
                              onclick: () => act(out, `${q.paused ? 'Resume' : 'Pause'} queue ${q.name}`, () => adminApi!.admin.setQueuePaused(q.name, !q.paused)),
                            },
                            q.paused ? `Resume ${q.name}` : `Pause ${q.name}`,
                          ),
                        )
                      : null,
                  ),
                ),
              ),
            ),
      ]);
    },
  };
}

function taskTable(tasks: Task[], out: HTMLElement, opts: { showError: boolean }): HTMLElement {
  return h(
    'table',
    { class: 'tasks' },
    h('thead', {}, h('tr', {}, ...['Id', 'Task', 'Queue', 'Status', 'Run at', 'Attempts', 'Finished', opts.showError ? 'Last error' : 'Actions'].map((c) => h('th', { scope: 'col' }, c)))),
    h(
      'tbody',
      {},
      ...tasks.map((t) =>
        h(
          'tr',
          { 'data-task-id': t.id },
          h('td', {}, h('a', { href: `#/task/${encodeURIComponent(t.id)}`, 'data-focus': `open-${t.id}`, 'aria-label': `Open task ${t.id}` }, t.id)),
          h('td', { class: 'clip' }, t.task),
          h('td', {}, t.queue),
          h('td', { 'data-field': 'status' }, statusBadge(t.status)),
          h('td', {}, fmtTime(t.runAt)),
          h('td', { class: 'num' }, `${t.attempts}/${t.maxAttempts}`),
          h('td', {}, fmtTime(t.finishedAt)),
          opts.showError
            ? h('td', { class: 'clip' }, t.lastError ?? '')
            : h(
                'td',
                {},
                t.status === 'scheduled' || t.status === 'queued'
                  ? h('button', { type: 'button', 'data-focus': `cancel-${t.id}`, onclick: () => act(out, `Cancel task ${t.id}`, () => api.tasks.cancel(t.id)) }, `Cancel ${t.id}`)
                  : null,
              ),
        ),
      ),
    ),
  );
}

function tasksView(dead: boolean): View {
  const list = h('div', { 'data-region': 'tasks' });
  const out = h('p', { class: 'action-result', role: 'status' });
  const pager = h('div', { class: 'pager' });
  const filter = { queue: '', task: '', statuses: dead ? (['dead'] as TaskStatus[]) : ([] as TaskStatus[]), limit: 50 };
  // Keyset paging: the cursors of the pages before this one, and this one's.
  const cursors: (string | undefined)[] = [undefined];
  let next: string | null = null;

  const form = h('form', { class: 'filters', 'aria-label': 'Filter tasks' });
  if (!dead) {
    const queue = h('input', { id: 'f-queue', name: 'queue', autocomplete: 'off' });
    const task = h('input', { id: 'f-task', name: 'task', autocomplete: 'off' });
    const limit = h('select', { id: 'f-limit', name: 'limit' }, ...[20, 50, 100, 200].map((n) => h('option', { value: n, selected: n === 50 }, String(n))));
    const boxes = STATUSES.map((st) => h('input', { type: 'checkbox', name: 'status', value: st, id: `f-st-${st}` }));
    form.append(
      h('label', { for: 'f-queue' }, 'Queue'),
      queue,
      h('label', { for: 'f-task' }, 'Task type'),
      task,
      h('fieldset', {}, h('legend', {}, 'Status'), ...boxes.flatMap((b) => [b, h('label', { for: b.id }, b.value)])),
      h('label', { for: 'f-limit' }, 'Per page'),
      limit,
      h('button', { type: 'submit' }, 'Apply filters'),
    );
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      filter.queue = queue.value.trim();
      filter.task = task.value.trim();
      filter.statuses = boxes.filter((b) => b.checked).map((b) => b.value as TaskStatus);
      filter.limit = Number(limit.value);
      cursors.splice(0, cursors.length, undefined);
      delete list.dataset.signature;
      refreshing = false;
      tick();
    });
  }
  // Bulk replay matches the dead tasks created before this view was loaded, so
  // replays that die in turn are not replayed again by the same click.
  const loadedAt = new Date().toISOString();
  const bulkReplay = h('div', { 'data-slot': 'bulk-replay' });
  function askBulk(): void {
    const go = h('button', { type: 'button', onclick: () => void runBulk() }, 'Replay them');
    bulkReplay.replaceChildren(
      h('p', {}, `Replay every dead task created before ${fmtTime(loadedAt)} that has no replay yet?`),
      go,
      ' ',
      h('button', { type: 'button', onclick: () => offerBulk(true) }, 'Keep them'),
    );
    go.focus();
  }
  function offerBulk(focus = false): void {
    const b = h('button', { type: 'button', onclick: askBulk }, 'Replay all dead');
    bulkReplay.replaceChildren(b);
    if (focus) b.focus();
  }
  async function runBulk(): Promise<void> {
    offerBulk(true);
    let total = 0;
    await act(
      out,
      'Replay all dead tasks',
      async () => {
        try {
          for (let round = 0; round < BULK_ROUNDS; round++) {
            const r = await api.tasks.bulkReplay({
              status: ['dead'],
              queue: filter.queue || undefined,
              task: filter.task || undefined,
              createdBefore: loadedAt,
              limit: BULK_LIMIT,
            });
            total += r.affected;
            if (r.affected < BULK_LIMIT) break;
          }
        } catch (e) {
          throw new Error(`${describeError(e)}; ${total} replayed before that`);
        }
      },
      () => [total === 1 ? 'Replayed 1 dead task.' : `Replayed ${total} dead tasks.`, total ? ' Their replays are in Tasks.' : ' (Tasks replayed before are skipped.)'],
    );
  }
  if (dead) offerBulk();
  const older = h('button', { type: 'button', onclick: () => move(1) }, 'Older');
  const newer = h('button', { type: 'button', onclick: () => move(-1) }, 'Newer');
  const pageNo = h('span', {});
  pager.append(newer, pageNo, older);
  function move(dir: 1 | -1) {
    if (dir === 1 && next) cursors.push(next);
    if (dir === -1 && cursors.length > 1) cursors.pop();
    refreshing = false;
    tick();
  }
  return {
    title: dead ? 'Dead tasks' : 'Tasks',
    mount(main) {
      append(main, [
        h('h1', {}, dead ? 'Dead tasks' : 'Tasks'),
        dead ? h('p', { class: 'help' }, 'Tasks that used every attempt or failed permanently, newest first.') : form,
        dead ? bulkReplay : null,
        out,
        list,
        pager,
      ]);
    },
    async refresh() {
      const page = await api.tasks.list({
        queue: filter.queue || undefined,
        task: filter.task || undefined,
        status: filter.statuses.length ? filter.statuses : undefined,
        limit: filter.limit,
        cursor: cursors.at(-1),
      });
      next = page.nextCursor;
      older.disabled = !next;
      newer.disabled = cursors.length <= 1;
      pageNo.textContent = ` Page ${cursors.length} `;
      patch(list, JSON.stringify(page.items), () => [
        page.items.length === 0 ? h('p', {}, dead ? 'No dead tasks.' : 'No tasks match.') : taskTable(page.items, out, { showError: dead }),
      ]);
    },
  };
}

function field(label: string, value: Node | string): HTMLElement[] {
  return [h('dt', {}, label), h('dd', {}, value)];
}

function taskDetailView(id: string): View {
  const body = h('div', { 'data-region': 'task' });
  const out = h('p', { class: 'action-result', role: 'status' });
  return {
    title: `Task ${id}`,
    mount(main) {
      main.append(h('p', {}, h('a', { href: '#/tasks' }, '← All tasks')), h('h1', {}, `Task ${id}`), out, body);
      takeFlash(out);
    },
    async refresh() {
      let t: Task;
      let attempts: Attempt[];
      try {
        [t, attempts] = await Promise.all([api.tasks.get(id), api.tasks.attempts(id)]);
      } catch (e) {
        if (e instanceof ApiError && e.status === 404) {
          patch(body, '404', () => [h('p', { class: 'error', role: 'alert' }, 'No such task for this tenant.')]);
          return;
        }
        throw e;
      }
      patch(body, JSON.stringify([t, attempts]), () => [
        h(
          'dl',
          { class: 'fields' },
          ...field('Status', statusBadge(t.status)),
          ...field('Task', t.task),
          ...field('Queue', t.queue),
          ...field('Run at', fmtTime(t.runAt)),
          ...field('Created', fmtTime(t.createdAt)),
          ...field('Started', fmtTime(t.startedAt)),
          ...field('Finished', fmtTime(t.finishedAt)),
          ...field('Attempts', `${t.attempts} of ${t.maxAttempts}`),
          ...field('Idempotency key', t.idempotencyKey ?? '—'),
          ...field('Delivery', t.delivery),
          ...(t.replayOf ? field('Replay of', h('a', { href: `#/task/${encodeURIComponent(t.replayOf)}`, 'data-field': 'replayOf' }, `task ${t.replayOf}`)) : []),
        ),
        t.status === 'scheduled' || t.status === 'queued'
          ? h('button', { type: 'button', 'data-focus': 'cancel', onclick: () => act(out, `Cancel task ${t.id}`, () => api.tasks.cancel(t.id)) }, 'Cancel this task')
          : null,
        TERMINAL.includes(t.status)
          ? h(
              'div',
              { 'data-slot': 'replay' },
              h('button', { type: 'button', 'data-focus': 'replay', onclick: () => void replay(t.id, out) }, 'Replay this task'),
              h('span', { class: 'help' }, ' Runs it again as a new task (same type, payload, queue and options) and opens it.'),
            )
          : null,
        h('h2', {}, 'Payload'),
        h('pre', { 'data-field': 'payload', tabindex: 0 }, JSON.stringify(t.payload, null, 2)),
        h('h2', {}, 'Last error'),
        h('pre', { 'data-field': 'lastError', tabindex: 0 }, t.lastError ?? 'None.'),
        h(
          'section',
          { 'data-slot': 'result' },
          h('h2', {}, 'Result'),
          h('pre', { 'data-field': 'result', tabindex: 0 }, t.result === null ? 'None.' : JSON.stringify(t.result, null, 2)),
        ),
        h(
          'section',
          { 'data-slot': 'attempts' },
          h('h2', {}, 'Attempts'),
          attempts.length === 0
            ? h('p', {}, 'No attempt has ended yet.')
            : h(
                'table',
                { 'data-field': 'attempts' },
                h('thead', {}, h('tr', {}, ...['#', 'Outcome', 'Started', 'Finished', 'Duration', 'Status', 'Error'].map((c) => h('th', { scope: 'col' }, c)))),
                h(
                  'tbody',
                  {},
                  ...attempts.map((a) =>
                    h(
                      'tr',
                      {},
                      h('td', { class: 'num' }, String(a.attempt)),
                      h('td', {}, a.outcome),
                      h('td', {}, fmtTime(a.startedAt)),
                      h('td', {}, fmtTime(a.finishedAt)),
                      h('td', { class: 'num' }, a.durationMs === null ? '—' : `${a.durationMs} ms`),
                      h('td', { class: 'num' }, a.status == null ? '—' : String(a.status)),
                      h('td', {}, a.error ? `${a.error.name}: ${a.error.message}` : '—'),
                    ),
                  ),
                ),
              ),
        ),
      ]);
    },
  };
}

/** Replays a task and opens the replay (the existing one if it was replayed already). */
async function replay(id: string, out: HTMLElement): Promise<void> {
  await act(
    out,
    `Replay task ${id}`,
    async () => {
      const r = await api.tasks.replay(id);
      flash = r.created ? `Replay of task ${id}: this is the new task.` : `Task ${id} had been replayed already: this is its replay.`;
      location.hash = `#/task/${encodeURIComponent(r.task.id)}`;
      return r;
    },
    () => [flash ?? ''],
  );
}

function scheduleSpec(s: Schedule): string {
  if (s.kind === 'cron') return `cron ${s.cron} (${s.timezone})`;
  if (s.kind === 'interval') return `every ${s.interval} s`;
  if (s.kind === 'recurrence' && s.recurrence) return `every ${s.recurrence.every} ${s.recurrence.unit} from ${fmtTime(s.recurrence.start)}`;
  return `once at ${fmtTime(s.at)}`;
}

function schedulesView(): View {
  const list = h('div', { 'data-region': 'schedules' });
  const out = h('p', { class: 'action-result', role: 'status' });
  return {
    title: 'Schedules',
    mount(main) {
      main.append(h('h1', {}, 'Schedules'), out, list);
    },
    async refresh() {
      const page = await api.schedules.list({ limit: 200 });
      patch(list, JSON.stringify(page.items), () => [
        page.items.length === 0
          ? h('p', {}, 'No schedules.')
          : h(
              'table',
              {},
              h('thead', {}, h('tr', {}, ...['Name', 'When', 'Task', 'Queue', 'State', 'Next run', 'Last fired', 'Actions'].map((c) => h('th', { scope: 'col' }, c)))),
              h(
                'tbody',
                {},
                ...page.items.map((s) =>
                  h(
                    'tr',
                    { 'data-schedule': s.name },
                    h('th', { scope: 'row' }, h('a', { href: `#/schedule/${encodeURIComponent(s.name)}`, 'data-focus': `open-${s.name}` }, s.name)),
                    h('td', {}, scheduleSpec(s)),
                    h('td', { class: 'clip' }, s.task),
                    h('td', {}, s.queue),
                    h('td', { 'data-field': 'state' }, s.enabled ? 'active' : h('span', { class: 'badge st-paused' }, 'paused')),
                    h('td', {}, fmtTime(s.nextRunAt)),
                    h('td', {}, fmtTime(s.lastFiredAt)),
                    h(
                      'td',
                      {},
                      h(
                        'button',
                        {
                          type: 'button',
                          'data-focus': `toggle-${s.name}`,
                          onclick: () => act(out, `${s.enabled ? 'Pause' : 'Resume'} schedule ${s.name}`, () => (s.enabled ? api.schedules.pause(s.name) : api.schedules.resume(s.name))),
                        },
                        s.enabled ? `Pause ${s.name}` : `Resume ${s.name}`,
                      ),
                    ),
                  ),
                ),
              ),
            ),
      ]);
    },
  };
}

function scheduleDetailView(name: string): View {
  const body = h('div', { 'data-region': 'schedule' });
  const runs = h('div', { 'data-region': 'runs' });
  const out = h('p', { class: 'action-result', role: 'status' });
  return {
    title: `Schedule ${name}`,
    mount(main) {
      main.append(h('p', {}, h('a', { href: '#/schedules' }, '← All schedules')), h('h1', {}, `Schedule ${name}`), out, body, h('h2', {}, 'Recent runs'), runs);
    },
    async refresh() {
      const [s, next, recent] = await Promise.all([api.schedules.get(name), api.schedules.next(name, 5), api.schedules.runs(name, { limit: 10 })]);
      patch(body, JSON.stringify([s, next]), () => [
        h('dl', { class: 'fields' }, ...field('When', scheduleSpec(s)), ...field('Task', s.task), ...field('Queue', s.queue), ...field('State', s.enabled ? 'active' : 'paused'), ...field('Misfire', s.misfire)),
        h(
          'button',
          {
            type: 'button',
            'data-focus': 'toggle',
            onclick: () => act(out, `${s.enabled ? 'Pause' : 'Resume'} schedule ${s.name}`, () => (s.enabled ? api.schedules.pause(s.name) : api.schedules.resume(s.name))),
          },
          s.enabled ? 'Pause' : 'Resume',
        ),
        ' ',
        h(
          'button',
          {
            type: 'button',
            'data-focus': 'trigger',
            'data-slot': 'trigger',
            onclick: () =>
              act(
                out,
                `Run schedule ${s.name} now`,
                () => api.schedules.trigger(s.name),
                (t: Task) => [`Schedule ${s.name} ran now as `, h('a', { href: `#/task/${encodeURIComponent(t.id)}` }, `task ${t.id}`), '.'],
              ),
          },
          'Run now',
        ),
        h('h2', {}, 'Next fire times'),
        next.length ? h('ol', {}, ...next.map((t) => h('li', {}, fmtTime(t)))) : h('p', {}, 'None (paused or finished).'),
      ]);
      patch(runs, JSON.stringify(recent.items), () => [recent.items.length ? taskTable(recent.items, out, { showError: false }) : h('p', {}, 'No runs yet.')]);
    },
  };
}

function adminView(): View {
  const tenants = h('div', { 'data-region': 'tenants' });
  const keys = h('div', { 'data-region': 'keys' });
  const out = h('p', { class: 'action-result', role: 'status' });
  const created = h('output', { class: 'secret', 'aria-live': 'polite' });
  const tenantInput = h('input', { id: 'new-key-tenant', name: 'tenant', autocomplete: 'off', required: true });
  const form = h('form', { class: 'filters', 'aria-label': 'Create a key' }, h('label', { for: 'new-key-tenant' }, 'Tenant'), tenantInput, h('button', { type: 'submit' }, 'Create key'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    void act(out, `Create a key for ${tenantInput.value}`, async () => {
      const k = await adminApi!.admin.createKey(tenantInput.value.trim());
      created.replaceChildren('New key for ', k.tenant, ' (shown once): ', h('code', {}, k.key));
    });
  });
  return {
    title: 'Keys and tenants',
    mount(main) {
      main.append(h('h1', {}, 'Keys and tenants'), out, h('h2', {}, 'Tenants'), tenants, h('h2', {}, 'Keys'), form, created, keys);
    },
    async refresh() {
      const [ts, ks] = await Promise.all([adminApi!.admin.listTenants(), adminApi!.admin.listKeys()]);
      patch(tenants, JSON.stringify(ts), () => [
        ts.length
          ? h(
              'ul',
              { class: 'tenants' },
              ...ts.map((t) =>
                h(
                  'li',
                  {},
                  h(
                    'button',
                    {
                      type: 'button',
                      'data-focus': `view-${t}`,
                      onclick: () => {
                        saveSession({ ...session, tenant: t });
                        location.hash = '#/queues';
                        start();
                      },
                    },
                    `View as ${t}`,
                  ),
                ),
              ),
            )
          : h('p', {}, 'No tenants yet.'),
      ]);
      patch(keys, JSON.stringify(ks), () => [
        h(
          'table',
          {},
          h('thead', {}, h('tr', {}, ...['Id', 'Tenant', 'Prefix', 'Created', 'Revoked', 'Actions'].map((c) => h('th', { scope: 'col' }, c)))),
          h(
            'tbody',
            {},
            ...ks.map((k) =>
              h(
                'tr',
                {},
                h('td', {}, k.id),
                h('td', {}, k.tenant),
                h('td', {}, h('code', {}, k.prefix)),
                h('td', {}, fmtTime(k.createdAt)),
                h('td', {}, fmtTime(k.revokedAt)),
                h('td', {}, k.revokedAt ? null : h('button', { type: 'button', 'data-focus': `revoke-${k.id}`, onclick: () => act(out, `Revoke key ${k.id}`, () => adminApi!.admin.revokeKey(k.id)) }, `Revoke ${k.prefix}`)),
              ),
            ),
          ),
        ),
      ]);
    },
  };
}

start();

// A CPU profile of the Worker inside `wrangler dev`, taken through wrangler's
// inspector port with the Chrome DevTools protocol's Profiler domain (the
// same profiler DevTools' Performance panel drives): start, run a workload,
// stop. The profile is workerd's V8 isolate only; native work it calls into
// (socket writes, TLS, the KV of the local Queue) shows as the JS function
// that called it. Used by the transport phase (BENCH_TRANSPORT_PROFILE);
// the .cpuprofile it writes opens in Chrome DevTools or speedscope.
import ws from 'ws';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number };
  children?: number[];
}

export interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

export interface Profiler {
  stop(): Promise<CpuProfile>;
}

/** The inspector's first target (wrangler lists the Worker under /json). */
async function debuggerUrl(port: number): Promise<string> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      const list = (await (await fetch(`http://127.0.0.1:${port}/json`)).json()) as { webSocketDebuggerUrl?: string }[];
      const url = list.find((t) => t.webSocketDebuggerUrl)?.webSocketDebuggerUrl;
      if (url) return url;
    } catch {
      /* not up yet */
    }
    if (Date.now() > deadline) throw new Error(`no inspector target on port ${port}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

export async function startProfiler(inspectorPort: number, samplingIntervalUs = 200): Promise<Profiler> {
  const socket = new ws(await debuggerUrl(inspectorPort));
  await new Promise<void>((resolve, reject) => {
    socket.once('open', () => resolve());
    socket.once('error', reject);
  });
  let nextId = 1;
  const waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  socket.on('message', (raw) => {
    const msg = JSON.parse(String(raw)) as { id?: number; result?: unknown; error?: { message: string } };
    const w = msg.id === undefined ? undefined : waiting.get(msg.id);
    if (!w) return;
    waiting.delete(msg.id!);
    if (msg.error) w.reject(new Error(msg.error.message));
    else w.resolve(msg.result);
  });
  const send = (method: string, params: object = {}) =>
    new Promise<unknown>((resolve, reject) => {
      const id = nextId++;
      waiting.set(id, { resolve, reject });
      socket.send(JSON.stringify({ id, method, params }));
    });
  await send('Profiler.enable');
  await send('Profiler.setSamplingInterval', { interval: samplingIntervalUs });
  await send('Profiler.start');
  return {
    async stop() {
      const { profile } = (await send('Profiler.stop')) as { profile: CpuProfile };
      await send('Profiler.disable').catch(() => {});
      socket.close();
      return profile;
    },
  };
}

export interface ProfileLine {
  name: string;
  /** Percent of the sampled time. */
  self: number;
  total: number;
}

const short = (url: string) => url.replace(/^.*\/(node_modules\/)?/, '').replace(/\?.*$/, '');
const label = (f: ProfileNode['callFrame']) =>
  `${f.functionName || '(anonymous)'} ${f.url ? `${short(f.url)}:${f.lineNumber + 1}:${f.columnNumber + 1}` : ''}`.trim();

/** Self and inclusive time per function (inclusive counted once per sample, however deep the recursion). */
export function summarizeProfile(profile: CpuProfile, top = 30): { lines: ProfileLine[]; sampledMs: number; idle: number } {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<string, number>();
  const total = new Map<string, number>();
  let all = 0;
  let idle = 0;
  profile.samples.forEach((id, i) => {
    const dt = profile.timeDeltas[i] ?? 0;
    all += dt;
    const node = byId.get(id)!;
    const name = label(node.callFrame);
    if (node.callFrame.functionName === '(idle)') idle += dt;
    self.set(name, (self.get(name) ?? 0) + dt);
    const seen = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const n = label(byId.get(cur)!.callFrame);
      if (seen.has(n)) continue;
      seen.add(n);
      total.set(n, (total.get(n) ?? 0) + dt);
    }
  });
  const pct = (v: number) => (100 * v) / (all || 1);
  const lines = [...total.keys()]
    .map((name) => ({ name, self: pct(self.get(name) ?? 0), total: pct(total.get(name)!) }))
    .sort((a, b) => b.self - a.self)
    .slice(0, top);
  return { lines, sampledMs: all / 1000, idle: pct(idle) };
}

/** Inclusive percent for the functions whose label matches (e.g. /connect/): for the questions a profile is taken to answer. */
export function inclusive(profile: CpuProfile, match: RegExp, top = 30): ProfileLine[] {
  const { lines } = summarizeProfile(profile, Number.MAX_SAFE_INTEGER);
  return lines
    .filter((l) => match.test(l.name))
    .sort((a, b) => b.total - a.total)
    .slice(0, top);
}

// CPU seconds spent by each part of a run, read from /proc (Linux only;
// elsewhere every figure is NaN): this bench process (the system under test's
// Node side), the WebSocket proxy, and the Postgres server (postmaster and
// every backend it forked: the postmaster found as a backend's parent, or by
// the port on its command line). Backends that exit take their counters with
// them, so read before closing connections.
import { readdirSync, readFileSync } from 'node:fs';

const TICKS = 100; // USER_HZ on Linux

function procStat(pid: number): { ppid: number; cpu: number } | null {
  try {
    const raw = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = raw.slice(raw.lastIndexOf(')') + 2).split(' ');
    // fields[0] is state (field 3); ppid is field 4, utime 14, stime 15.
    return { ppid: Number(fields[1]), cpu: (Number(fields[11]) + Number(fields[12])) / TICKS };
  } catch {
    return null;
  }
}

function postmasterPid(port: number): number | null {
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const args = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0');
      const i = args.indexOf('-p');
      if (args[0]?.endsWith('/postgres') && i >= 0 && Number(args[i + 1]) === port) return Number(name);
    } catch {
      /* gone */
    }
  }
  return null;
}

export interface CpuSnapshot {
  bench: number;
  proxy: number;
  postgres: number;
  /** Every process on the machine (/proc/stat: all but idle and iowait), CPU seconds. */
  machine: number;
  at: number;
}

function machineBusySeconds(): number {
  try {
    const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal (guest time is inside user)
    const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = cpu;
    return (user + nice + system + irq + softirq + steal) / TICKS;
  } catch {
    return NaN;
  }
}

/**
 * The postmaster of a local server, from one of its backends' pids (`select
 * pg_backend_pid()`): a server whose command line does not name its port, as
 * a distribution's service does not, is still found. Null where that pid is
 * not a local postgres process.
 */
export function postmasterOf(backendPid: number): number | null {
  try {
    if (readFileSync(`/proc/${backendPid}/comm`, 'utf8').trim() !== 'postgres') return null;
  } catch {
    return null;
  }
  return procStat(backendPid)?.ppid ?? null;
}

/** `postmaster`: the server's pid where known (postmasterOf); else it is looked up by the port on its command line. */
export function createCpuMeter(serverUrl: string, proxyPid: number | undefined, postmaster: number | null = null): () => CpuSnapshot {
  const port = Number(new URL(serverUrl).port || 5432);
  let master: number | null | undefined = postmaster ?? undefined;
  return () => {
    const at = performance.now();
    const bench = (process.cpuUsage().user + process.cpuUsage().system) / 1e6;
    if (process.platform !== 'linux') return { bench, proxy: NaN, postgres: NaN, machine: NaN, at };
    master ??= postmasterPid(port);
    let postgres = NaN;
    if (master !== null) {
      postgres = procStat(master)?.cpu ?? 0;
      for (const name of readdirSync('/proc')) {
        if (!/^\d+$/.test(name)) continue;
        const st = procStat(Number(name));
        if (st && st.ppid === master) postgres += st.cpu;
      }
    }
    const proxy = proxyPid === undefined ? NaN : (procStat(proxyPid)?.cpu ?? NaN);
    return { bench, proxy, postgres, machine: machineBusySeconds(), at };
  };
}

export interface CpuUse {
  wallSeconds: number;
  bench: number;
  proxy: number;
  postgres: number;
  machine: number;
}

export function cpuBetween(a: CpuSnapshot, b: CpuSnapshot): CpuUse {
  return {
    wallSeconds: (b.at - a.at) / 1000,
    bench: b.bench - a.bench,
    proxy: b.proxy - a.proxy,
    postgres: b.postgres - a.postgres,
    machine: b.machine - a.machine,
  };
}

/** CPU nanoseconds a local process has run (/proc/<pid>/schedstat, finer than /proc/<pid>/stat); NaN where unreadable. */
export function processRunNs(pid: number): number {
  try {
    return Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);
  } catch {
    return NaN;
  }
}

/**
 * CPU seconds of a process and all its descendants, by process name (e.g.
 * wrangler's node and its workerd). Processes that have exited are not counted.
 */
export function processTreeCpu(rootPid: number | undefined): Record<string, number> {
  const out: Record<string, number> = {};
  if (rootPid === undefined || process.platform !== 'linux') return out;
  const children = new Map<number, number[]>();
  const names = new Map<number, string>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const st = procStat(Number(name));
    if (!st) continue;
    const list = children.get(st.ppid) ?? [];
    list.push(Number(name));
    children.set(st.ppid, list);
    try {
      names.set(Number(name), readFileSync(`/proc/${name}/comm`, 'utf8').trim());
    } catch {
      /* gone */
    }
  }
  const stack = [rootPid];
  while (stack.length > 0) {
    const pid = stack.pop()!;
    const st = procStat(pid);
    if (st) {
      const name = names.get(pid) ?? 'unknown';
      out[name] = (out[name] ?? 0) + st.cpu;
    }
    stack.push(...(children.get(pid) ?? []));
  }
  return out;
}

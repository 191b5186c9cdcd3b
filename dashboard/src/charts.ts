// Hand-written SVG charts: finished tasks per minute by outcome (stacked
// bars) and due-to-start p50/p99 (two lines), over the last hour of one queue.
import type { MinuteStats } from './api.ts';
import { h, s } from './dom.ts';

export const OUTCOMES = ['succeeded', 'dead', 'cancelled', 'missed'] as const;
const COLOURS: Record<string, string> = { succeeded: '#1a7f37', dead: '#b42318', cancelled: '#57606a', missed: '#9a6700' };

const W = 600;
const H = 140;
const PAD = { left: 44, right: 8, top: 8, bottom: 20 };

/** The `minutes` minute starts ending at the current minute, oldest first. */
function minuteSlots(nowMs: number, minutes: number): string[] {
  const last = Math.floor(nowMs / 60_000) * 60_000;
  return Array.from({ length: minutes }, (_, i) => new Date(last - (minutes - 1 - i) * 60_000).toISOString());
}

function axis(maxY: number, unit: string): SVGElement[] {
  const plotH = H - PAD.top - PAD.bottom;
  return [
    s('line', { x1: PAD.left, y1: H - PAD.bottom, x2: W - PAD.right, y2: H - PAD.bottom, stroke: '#57606a' }),
    s('line', { x1: PAD.left, y1: PAD.top, x2: PAD.left, y2: H - PAD.bottom, stroke: '#57606a' }),
    s('text', { x: PAD.left - 4, y: PAD.top + 10, 'text-anchor': 'end', 'font-size': 11, fill: '#24292f' }, `${fmtNum(maxY)}${unit}`),
    s('text', { x: PAD.left - 4, y: PAD.top + plotH, 'text-anchor': 'end', 'font-size': 11, fill: '#24292f' }, `0`),
    s('text', { x: PAD.left, y: H - 4, 'font-size': 11, fill: '#24292f' }, '-60 min'),
    s('text', { x: W - PAD.right, y: H - 4, 'text-anchor': 'end', 'font-size': 11, fill: '#24292f' }, 'now'),
  ];
}

const fmtNum = (n: number) => (n >= 100 ? String(Math.round(n)) : String(Number(n.toPrecision(2))));

export function finishedChart(queue: string, rows: MinuteStats[], nowMs: number, minutes = 60): HTMLElement {
  const byMinute = new Map(rows.map((r) => [r.minute, r]));
  const slots = minuteSlots(nowMs, minutes);
  const totals = slots.map((m) => OUTCOMES.reduce((a, o) => a + (byMinute.get(m)?.finished[o] ?? 0), 0));
  const maxY = Math.max(1, ...totals);
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const bw = plotW / minutes;
  const bars: SVGElement[] = [];
  slots.forEach((m, i) => {
    let y = H - PAD.bottom;
    for (const o of OUTCOMES) {
      const n = byMinute.get(m)?.finished[o] ?? 0;
      if (!n) continue;
      const hgt = (n / maxY) * plotH;
      y -= hgt;
      bars.push(s('rect', { x: PAD.left + i * bw + 0.5, y, width: Math.max(1, bw - 1), height: hgt, fill: COLOURS[o]! }, s('title', {}, `${m.slice(11, 16)}Z ${o}: ${n}`)));
    }
  });
  const sum = Object.fromEntries(OUTCOMES.map((o) => [o, rows.reduce((a, r) => a + (r.finished[o] ?? 0), 0)]));
  const label = `Tasks finished per minute in queue ${queue} over the last hour: ${OUTCOMES.map((o) => `${sum[o]} ${o}`).join(', ')}`;
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': label, class: 'chart' }, ...axis(maxY, ''), ...bars);
  return h(
    'figure',
    { class: 'chart-box' },
    svg,
    h('figcaption', {}, `Finished per minute · `, ...OUTCOMES.flatMap((o) => [h('span', { class: 'key', style: `background:${COLOURS[o]}` }), `${o} ${sum[o]} `])),
  );
}

export function latencyChart(queue: string, rows: MinuteStats[], nowMs: number, minutes = 60): HTMLElement {
  const byMinute = new Map(rows.map((r) => [r.minute, r]));
  const slots = minuteSlots(nowMs, minutes);
  const p50 = slots.map((m) => byMinute.get(m)?.dueToStartP50 ?? null);
  const p99 = slots.map((m) => byMinute.get(m)?.dueToStartP99 ?? null);
  const maxY = Math.max(0.001, ...p99.map((v) => v ?? 0), ...p50.map((v) => v ?? 0));
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const x = (i: number) => PAD.left + (i + 0.5) * (plotW / minutes);
  const y = (v: number) => H - PAD.bottom - (v / maxY) * plotH;
  const line = (vals: (number | null)[], colour: string, name: string) => {
    let d = '';
    let pen = false;
    const dots: SVGElement[] = [];
    vals.forEach((v, i) => {
      if (v === null) {
        pen = false;
        return;
      }
      d += `${pen ? 'L' : 'M'}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
      pen = true;
      dots.push(s('circle', { cx: x(i), cy: y(v), r: 2, fill: colour }, s('title', {}, `${slots[i]!.slice(11, 16)}Z ${name}: ${v.toFixed(3)} s`)));
    });
    return [s('path', { d, fill: 'none', stroke: colour, 'stroke-width': 2 }), ...dots];
  };
  const last = (vals: (number | null)[]) => [...vals].reverse().find((v) => v !== null) ?? null;
  const label = `Due-to-start latency in queue ${queue} over the last hour: latest p50 ${last(p50)?.toFixed(3) ?? 'none'} s, p99 ${last(p99)?.toFixed(3) ?? 'none'} s`;
  const svg = s(
    'svg',
    { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': label, class: 'chart' },
    ...axis(maxY, ' s'),
    ...line(p99, '#8250df', 'p99'),
    ...line(p50, '#0550ae', 'p50'),
  );
  return h(
    'figure',
    { class: 'chart-box' },
    svg,
    h('figcaption', {}, 'Due to start · ', h('span', { class: 'key', style: 'background:#0550ae' }), 'p50 ', h('span', { class: 'key', style: 'background:#8250df' }), 'p99'),
  );
}

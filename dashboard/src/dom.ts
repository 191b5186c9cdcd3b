// Tiny DOM helpers. Every string from the API goes in as text (never HTML):
// task names, payloads and errors are the tenant's own, possibly hostile.

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | null | undefined | ((e: Event) => void)>;

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (typeof v === 'function') el.addEventListener(k.replace(/^on/, ''), v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

export function append(el: Element, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(typeof c === 'number' ? String(c) : c);
  }
}

const SVG_NS = 'http://www.w3.org/2000/svg';
export function s(tag: string, attrs: Record<string, string | number> = {}, ...children: (Node | string)[]): SVGElement {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.append(c);
  return el;
}

/**
 * Replaces a region's content only when its data changed, and keeps keyboard
 * focus on the element with the same data-focus key, so a refresh every few
 * seconds never yanks focus from someone tabbing through a table.
 */
export function patch(region: HTMLElement, signature: string, build: () => Child[]): void {
  if (region.dataset.signature === signature) return;
  const active = document.activeElement as HTMLElement | null;
  const focusKey = active && region.contains(active) ? active.dataset.focus : undefined;
  region.replaceChildren();
  append(region, build());
  region.dataset.signature = signature;
  if (focusKey) {
    const again = [...region.querySelectorAll<HTMLElement>('[data-focus]')].find((e) => e.dataset.focus === focusKey);
    again?.focus();
  }
}

export function fmtTime(iso: string | null | undefined): string {
  if (!iso) return '—';
  return `${iso.replace('T', ' ').slice(0, 19)}Z`;
}

export function fmtSeconds(sec: number): string {
  if (sec < 1) return `${Math.round(sec * 1000)} ms`;
  if (sec < 120) return `${sec.toFixed(1)} s`;
  if (sec < 7200) return `${(sec / 60).toFixed(1)} min`;
  return `${(sec / 3600).toFixed(1)} h`;
}

export function statusBadge(status: string): HTMLElement {
  return h('span', { class: `badge st-${status}` }, status);
}

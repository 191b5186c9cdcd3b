// Fault injection for the core's named fault points.
import type { FaultPoint, Faults } from '../../src/faults.ts';

/** The isolate died at this line. */
export class Crash extends Error {
  constructor(point: string) {
    super(`crash injected at ${point}`);
    this.name = 'Crash';
  }
}

/** Throws at `point` (the first `times` times it is reached; default always). */
export function crashAt(point: FaultPoint, times = Infinity): Faults {
  let left = times;
  return (p) => {
    if (p === point && left > 0) {
      left -= 1;
      throw new Crash(p);
    }
  };
}

/** A promise that a test opens when it chooses. */
export function latch(): { wait: Promise<void>; open(): void } {
  let open!: () => void;
  const wait = new Promise<void>((resolve) => (open = resolve));
  return { wait, open };
}

/** A deterministic PRNG (mulberry32) so a failing seed reproduces the run. */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

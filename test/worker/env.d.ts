// Types for `cloudflare:workers` inside the workerd tests.
declare namespace Cloudflare {
  interface GlobalProps {
    mainModule: typeof import('../../functions/index.ts');
  }
  interface Env extends Omit<import('../../functions/env.ts').Env, never> {
    DATABASE_URL: string;
    ADMIN_TOKEN: string;
    DATABASE_WS_PROXY: string;
    SIGNING_SECRET: string;
    RECEIVER_URL: string;
    /** `host:port` of a server that accepts connections and never answers. */
    HUNG_ADDRESS: string;
    /** The transport this project runs over: `neon` or `hyperdrive`. */
    EXPECTED_TRANSPORT: 'neon' | 'hyperdrive';
  }
}

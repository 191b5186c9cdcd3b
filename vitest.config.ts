// Three projects over one real Postgres (embedded, or DATABASE_URL's server):
//   node    - the core in Node, through the same Neon driver and WebSocket
//             proxy as the Worker; each test file gets its own database.
//   workers, workers-hyperdrive - the Worker's three handlers inside workerd
//             (Cloudflare's vitest plugin, real local Queues), one database
//             each: the first without a HYPERDRIVE binding (the Neon driver
//             over the WebSocket proxy), the second with one (`pg` over
//             workerd's TCP sockets, through Hyperdrive's local mode).
// The root global setup starts Postgres and the proxy once and provides their
// addresses to both projects.
import { cloudflareTest } from '@cloudflare/vitest-plugin';
import { defineConfig } from 'vitest/config';
import { TEST_ADMIN_TOKEN, TEST_SIGNING_SECRET } from './test/helpers/secrets.ts';


/** Hyperdrive's local mode needs a password in the string, even under trust auth. */
function withPassword(url: string): string {
  const u = new URL(url);
  if (!u.password) u.password = 'unused';
  return u.toString();
}

function workersProject(name: string, transport: 'neon' | 'hyperdrive') {
  const databaseKey = transport === 'hyperdrive' ? 'hyperdriveDatabaseUrl' : 'workerDatabaseUrl';
  return {
    plugins: [
      cloudflareTest(({ inject }) => ({
        wrangler: { configPath: './wrangler.toml' },
        miniflare: {
          bindings: {
            DATABASE_URL: inject<string>(databaseKey),
            DATABASE_WS_PROXY: inject<string>('wsProxy'),
            ADMIN_TOKEN: TEST_ADMIN_TOKEN,
            SIGNING_SECRET: TEST_SIGNING_SECRET,
            RECEIVER_URL: inject<string>('receiverUrl'),
            HUNG_ADDRESS: inject<string>('hungAddress'),
            EXPECTED_TRANSPORT: transport,
            ALLOW_PRIVATE_TARGETS: 'true',
            // Quiet tests: the sweep's info lines are for production logs.
            LOG_LEVEL: 'warn',
          },
          ...(transport === 'hyperdrive' ? { hyperdrives: { HYPERDRIVE: withPassword(inject<string>(databaseKey)) } } : {}),
        },
      })),
    ],
    test: {
      name,
      include: ['test/worker/**/*.test.ts'],
      testTimeout: 60_000,
      hookTimeout: 60_000,
    },
  };
}

export default defineConfig({
  test: {
    globalSetup: ['./test/setup/global.ts'],
    // Quiet when green: what a test logs (the Worker's error lines in the
    // fault tests) is printed only when that test fails.
    silent: 'passed-only',
    projects: [
      {
        test: {
          name: 'node',
          environment: 'node',
          include: ['test/**/*.test.ts'],
          exclude: ['test/worker/**'],
          testTimeout: 60_000,
          hookTimeout: 60_000,
        },
      },
      workersProject('workers', 'neon'),
      workersProject('workers-hyperdrive', 'hyperdrive'),
    ],
  },
});

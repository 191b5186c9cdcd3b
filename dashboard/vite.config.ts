// Builds the dashboard into dashboard/dist/dashboard, which wrangler.toml's
// [assets] serves at /dashboard/ from the same Worker as the API. Everything
// is bundled: no CDN, nothing fetched at run time but the API.
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

const here = fileURLToPath(new URL('.', import.meta.url));

export default defineConfig({
  root: here,
  base: '/dashboard/',
  logLevel: 'warn',
  build: {
    outDir: `${here}dist/dashboard`,
    emptyOutDir: true,
    target: 'es2022',
    modulePreload: { polyfill: false },
    reportCompressedSize: false,
  },
});

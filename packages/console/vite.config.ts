import { fileURLToPath } from 'node:url';
import react from '@vitejs/plugin-react';
import { defineConfig } from 'vite';

export default defineConfig({
  plugins: [react()],
  resolve: {
    // The console is built from the SDK's source, so a change to the SDK shows in the next build.
    alias: { '@ai-suite/sdk': fileURLToPath(new URL('../sdk/src/index.ts', import.meta.url)) },
  },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    // No inline script in index.html: the server's CSP allows scripts from this origin only.
    modulePreload: { polyfill: false },
    sourcemap: false,
    reportCompressedSize: false,
  },
  server: {
    // `pnpm --filter @ai-suite/console dev` next to `pnpm start` on :8080.
    proxy: { '/console-api': 'http://localhost:8080' },
  },
});

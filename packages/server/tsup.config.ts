import { defineConfig } from 'tsup';

export default defineConfig({
  entry: {
    main: 'src/main.ts',
    cli: 'src/cli/main.ts',
    index: 'src/index.ts',
    // Run as a child process by db/embedded.ts, next to the chunk that holds it.
    'embedded-initdb': 'src/db/embedded-initdb.ts',
    // Run as a worker thread by db/embedded.ts (the embedded database's engine, decision 0039).
    'embedded-worker': 'src/db/embedded-worker.ts',
    // Run by piscina as the document pool's worker thread (domains/rag/document-pool.ts, decision 0040).
    'document-worker': 'src/domains/rag/document-worker.ts',
  },
  format: ['esm'],
  platform: 'node',
  target: 'node20',
  outDir: 'dist',
  clean: true,
  sourcemap: true,
  splitting: true,
  // Dependencies stay in node_modules; only our code is bundled.
  skipNodeModulesBundle: true,
});

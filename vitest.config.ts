import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'server',
          root: './packages/server',
          include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
          globalSetup: ['./src/test/global-setup.ts'],
          testTimeout: 60_000,
          hookTimeout: 180_000,
          pool: 'forks',
          // A fork runs its files one after another in one module graph instead of importing the
          // server afresh for each (~3 s of CPU a file on a slow host): the project's run took
          // 319 s instead of 581 on PGlite. The files share no state but what each server or
          // database they create holds (ids are random, process-wide caches keyed by them).
          isolate: false,
        },
      },
      {
        test: {
          name: 'sdk',
          root: './packages/sdk',
          include: ['test/**/*.test.ts', 'src/**/*.test.ts'],
          globalSetup: ['../server/src/test/global-setup.ts', './test/ensure-built.ts'],
          testTimeout: 60_000,
          hookTimeout: 180_000,
          pool: 'forks',
          // As the server's project: one module graph per fork.
          isolate: false,
        },
      },
      {
        test: {
          name: 'testkit',
          root: './packages/testkit',
          include: ['src/**/*.test.ts'],
          testTimeout: 30_000,
        },
      },
      {
        test: {
          name: 'examples',
          root: './examples',
          // Examples run against the SDK source (the published package resolves to its build).
          alias: {
            '@ai-suite/sdk': new URL('./packages/sdk/src/index.ts', import.meta.url).pathname,
            // For readme-commands.test.ts, which belongs to no example package.
            '@ai-suite/server/test-harness': new URL('./packages/server/src/test/harness.ts', import.meta.url)
              .pathname,
            '@ai-suite/server': new URL('./packages/server/src/index.ts', import.meta.url).pathname,
          },
          include: ['**/*.test.ts'],
          exclude: ['**/node_modules/**'],
          globalSetup: [
            './chat-widget/browser-setup.ts',
            '../packages/server/src/test/global-setup.ts',
            '../packages/sdk/test/ensure-built.ts',
          ],
          testTimeout: 60_000,
          hookTimeout: 180_000,
          pool: 'forks',
        },
      },
      {
        test: {
          name: 'console',
          root: './packages/console',
          include: ['test/**/*.test.ts'],
          // Chromium (scripts/ensure-chromium.sh), the test databases, then the console's build.
          globalSetup: ['./test/global-setup.ts', '../server/src/test/global-setup.ts'],
          testTimeout: 90_000,
          hookTimeout: 180_000,
          pool: 'forks',
          // One browser and one server for the whole file.
          fileParallelism: false,
          // What a page shows after a request may take seconds on a loaded machine: expect.poll
          // waits up to 20 s (vitest's default is 1 s) before failing.
          expect: { poll: { timeout: 20_000, interval: 100 } },
        },
      },
    ],
    // Generous limits: they end a hung test, they are not speed assertions (speed lives in bench/).
    // CI on a loaded 2-core machine starts a server in tens of seconds.
    maxWorkers: 2,
  },
});

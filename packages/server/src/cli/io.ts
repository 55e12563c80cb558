/** Where the CLI writes; tests and `main.ts` pass the process streams. */
export interface CliIo {
  stdout: (s: string) => void;
  stderr: (s: string) => void;
  env: Record<string, string | undefined>;
}

import type { EntityManager } from '@mikro-orm/postgresql';
import { type Command, InvalidArgumentError, Option } from 'commander';
import { loadConfig } from '../config.js';
import { appError } from '../errors/index.js';
import type { CliIo } from './io.js';

/** What a command hands back to the CLI's runner (program.ts). */
export interface CommandResult {
  human: string;
  json: unknown;
  /** Set when the command did its work but some of it failed: printed, then exit code 1. */
  failure?: string;
}

export interface CommandKit {
  io: CliIo;
  json: boolean;
  jsonOption: () => Option;
  run: <A extends unknown[]>(
    fn: (ctx: { em: EntityManager }, ...args: A) => Promise<CommandResult>,
  ) => (...args: A) => Promise<void>;
}

const parseConcurrency = (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1 || n > 32)
    throw new InvalidArgumentError('must be an integer from 1 to 32');
  return n;
};

const mb = (bytes: number) => `${(bytes / (1024 * 1024)).toFixed(1)} MB`;

/** Every object key the database refers to, with the type its file was stored with. */
async function objectKeys(em: EntityManager): Promise<{ key: string; contentType?: string }[]> {
  const rows = await em.execute<{ key: string; mime_type: string | null }[]>(
    `select key, max(mime_type) as mime_type from (
       select storage_key as key, mime_type from storage_files where storage_key is not null
       union all
       select storage_key as key, mime_type from rag_documents where storage_key is not null
     ) k group by key order by key`,
  );
  return rows.map((r) => ({ key: r.key, contentType: r.mime_type ?? undefined }));
}

/** `storage migrate`: moves the objects between the local files and S3 (docs/storage.md). */
export function registerStorageCommands(program: Command, kit: CommandKit): void {
  const storage = program.command('storage').description('object storage: move files between stores');
  storage
    .command('migrate')
    .description(
      'copy every stored object from the other store to the one given, verifying each byte for byte; ' +
        'run it again to resume. The S3_* variables describe the bucket, DATA_DIR the local files',
    )
    .addOption(
      new Option('--to <store>', 'where the objects go').choices(['s3', 'local']).makeOptionMandatory(),
    )
    .option('--dry-run', 'count the objects and bytes to move; write nothing')
    .option('--concurrency <n>', 'objects moved at the same time (default 4)', parseConcurrency)
    .addOption(kit.jsonOption())
    .action(
      kit.run(async ({ em }, opts: { to: 's3' | 'local'; dryRun?: boolean; concurrency?: number }) => {
        const config = loadConfig(kit.io.env);
        const storageModule = await import('../storage/index.js');
        const s3Options = storageModule.s3StoreOptions(config.env);
        if (!s3Options) {
          throw appError('S3_NOT_CONFIGURED', { p0: opts.to === 's3' ? 'to' : 'from' });
        }
        const { S3ObjectStore } = await import('../storage/s3-store.js');
        const s3 = new S3ObjectStore(s3Options);
        try {
          // The move presigns nothing, so the local store's link-signing key is never used.
          const local = new storageModule.LocalObjectStore(
            storageModule.localObjectsDir(config),
            'unused: no links are signed',
            () => '',
          );
          const [from, to] = opts.to === 's3' ? [local, s3] : [s3, local];
          await from.check();
          if (!opts.dryRun) await to.check();
          const { migrateObjects } = await import('../storage/migrate.js');
          const items = await objectKeys(em);
          const every = Math.max(1, Math.ceil(items.length / 20));
          const report = await migrateObjects(items, from, to, {
            dryRun: opts.dryRun,
            concurrency: opts.concurrency,
            onProgress: (p) => {
              if (!kit.json && (p.done % every === 0 || p.done === p.total || p.outcome === 'failed')) {
                kit.io.stderr(`${p.done}/${p.total} ${p.outcome === 'failed' ? `failed: ${p.key}` : ''}\n`);
              }
            },
          });
          const where = `${from.kind} → ${to.kind}`;
          const lines = opts.dryRun
            ? [
                `Dry run, ${where}: ${report.objects} object(s) in the database, ${mb(report.bytes)} in the source.`,
                `${report.copied} to copy (${mb(report.copiedBytes)}); ${report.present} already in the target with the same size (compared byte for byte on the real run).`,
              ]
            : [
                `${where}: ${report.objects} object(s); ${report.copied} copied and verified (${mb(report.copiedBytes)}), ${report.present} already there with the same bytes.`,
              ];
          if (report.missing.length > 0) {
            lines.push(
              `${report.missing.length} object(s) in neither store (their files already answer 404): ${report.missing.slice(0, 10).join(', ')}${report.missing.length > 10 ? ', …' : ''}`,
            );
          }
          for (const f of report.failed.slice(0, 10)) lines.push(`failed: ${f.key}: ${f.error}`);
          if (!opts.dryRun && report.failed.length === 0) {
            lines.push(
              opts.to === 's3'
                ? 'Every object is in the bucket: start the server with these S3_* variables. The local files are left as they were.'
                : 'Every object is under DATA_DIR/objects: start the server without S3_BUCKET. The bucket is left as it was.',
            );
          }
          return {
            human: lines.join('\n'),
            json: { from: from.kind, to: to.kind, ...report },
            failure:
              report.failed.length > 0
                ? `${report.failed.length} object(s) could not be moved: run the command again to retry them`
                : undefined,
          };
        } finally {
          s3.client.destroy(); // its sockets: the command may run inside a longer process (tests)
        }
      }),
    );
}

import { Migration } from './base.js';

/**
 * Storage files indexed in the background (docs/rag.md, decision 0024): runs of kind
 * `rag_index` on the run engine, and where a document came from (`upload` through
 * `POST /rag/upload`, or `storage` when an existing storage file was indexed).
 */
export class Migration202611250300_rag_index_runs extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      alter table runs drop constraint if exists runs_kind_check;
      alter table runs add constraint runs_kind_check check (kind in ('turn', 'autonomous', 'rag_index'));
      alter table rag_documents add column origin text not null default 'upload'
        check (origin in ('upload', 'storage'));
    `);
  }

  override async down(): Promise<void> {
    this.addSql(`
      delete from runs where kind = 'rag_index';
      alter table runs drop constraint if exists runs_kind_check;
      alter table runs add constraint runs_kind_check check (kind in ('turn', 'autonomous'));
      alter table rag_documents drop column if exists origin;
    `);
  }
}

import { Migration } from './base.js';

/**
 * Document question answering (docs/rag.md, decision 0024). Embeddings are `real[]` on every
 * database; where pgvector exists, HNSW indexes over `embedding::vector(<dims>)` are created
 * per dimension when an index is provisioned (the dimension is known only then).
 */
export class Migration20261124060000_rag extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      alter table workspaces add column rag_monthly_query_quota integer
        check (rag_monthly_query_quota is null or rag_monthly_query_quota >= 0);

      create table rag_indexes (
        workspace_id uuid primary key references workspaces (id) on delete cascade,
        created_at timestamptz not null default now()
      );

      create table rag_documents (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        storage_file_id uuid references storage_files (id) on delete cascade,
        name text not null,
        mime_type text not null,
        size_bytes bigint,
        storage_key text,
        status text not null check (status in ('queued', 'processing', 'ready', 'failed')),
        error text,
        chunk_count integer not null default 0,
        embedding_model text,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      );
      create index rag_documents_ws_idx on rag_documents (workspace_id, created_at);
      create unique index rag_documents_file_uq on rag_documents (storage_file_id) where storage_file_id is not null;

      create table rag_chunks (
        id bigserial primary key,
        document_id uuid not null references rag_documents (id) on delete cascade,
        workspace_id uuid not null,
        chunk_index integer not null,
        page integer not null,
        content text not null,
        tsv tsvector generated always as (to_tsvector('english'::regconfig, content)) stored,
        -- unit-length embedding (cosine = dot product), null when indexed without a model
        embedding real[],
        dims integer
      );
      create index rag_chunks_tsv_idx on rag_chunks using gin (tsv);
      create index rag_chunks_ws_idx on rag_chunks (workspace_id, dims);
      create index rag_chunks_doc_idx on rag_chunks (document_id, chunk_index);

      create table rag_queries (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        user_id uuid,
        session_id text,
        query text not null,
        answer text not null,
        created_at timestamptz not null default now()
      );
      create index rag_queries_ws_idx on rag_queries (workspace_id, created_at);
      create index rag_queries_session_idx on rag_queries (workspace_id, session_id, created_at) where session_id is not null;
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists rag_queries, rag_chunks, rag_documents, rag_indexes cascade;');
    this.addSql('alter table workspaces drop column if exists rag_monthly_query_quota;');
  }
}

import { Migration } from './base.js';

/** Workspace storage: files (metadata; bodies live in the object store), folders, git-host token. */
export class Migration20261121020000_storage extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table storage_files (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        type text not null check (type in ('image', 'deliverable', 'document', 'file')),
        filename text not null,
        mime_type text not null,
        size_bytes bigint,
        folder_path text,
        storage_key text,
        source text,
        source_id text,
        is_indexed boolean not null default false,
        index_status text not null default 'none'
          check (index_status in ('none', 'queued', 'processing', 'ready', 'failed')),
        is_git_host_mirror boolean not null default false,
        external_ref jsonb,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      );
      create index storage_files_ws_created_idx on storage_files (workspace_id, created_at desc, id desc);
      create index storage_files_ws_type_idx on storage_files (workspace_id, type);
      create unique index storage_files_path_uq on storage_files (workspace_id, folder_path, filename)
        where folder_path is not null;

      create table storage_folders (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        path text not null,
        name text not null,
        created_at timestamptz not null default now()
      );
      create unique index storage_folders_path_uq on storage_folders (workspace_id, path);

      alter table workspaces add column git_host_token text;
    `);
  }
}

import { Migration } from './base.js';

/**
 * The in-process vector index (decision 0034): a compact float32 copy of each embedding
 * (`embedding_f32`, big-endian as `float4send` writes it) so a node loads 100k vectors in one
 * fast read, and per workspace a generation (bumped by chunk inserts, stamped on the inserted
 * rows) and an epoch (bumped by chunk deletes and embedding updates) that every query checks.
 *
 * Triggers keep both in the same transaction as the change, whatever statement makes it
 * (ingest, the run engine, cascades from documents, storage files and workspaces, the bench's
 * SQL loader). An insert takes the workspace's `rag_indexes` row lock once per transaction and
 * holds it to commit, so generations are handed out in commit order: a node that sees a chunk of
 * generation g has seen every chunk of a lower generation.
 */
export class Migration202611260200_rag_vector_index extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      alter table rag_indexes
        add column vector_generation bigint not null default 0,
        add column vector_epoch bigint not null default 0;
      alter table rag_chunks
        add column embedding_f32 bytea,
        add column vector_gen bigint not null default 0;

      create function rag_embedding_f32(v real[]) returns bytea language sql immutable parallel safe as $f$
        select string_agg(float4send(x), ''::bytea order by i) from unnest(v) with ordinality as t(x, i)
      $f$;

      update rag_chunks set embedding_f32 = rag_embedding_f32(embedding) where embedding is not null;
      create index rag_chunks_ws_gen_idx on rag_chunks (workspace_id, vector_gen, id);

      create function rag_chunks_before_insert() returns trigger language plpgsql as $f$
      declare
        k text := 'rag.gen_' || replace(new.workspace_id::text, '-', '');
        g text := current_setting(k, true);
      begin
        if new.embedding is not null then
          new.embedding_f32 := rag_embedding_f32(new.embedding);
        else
          new.embedding_f32 := null;
        end if;
        if g is null or g = '' then
          update rag_indexes set vector_generation = vector_generation + 1
            where workspace_id = new.workspace_id returning vector_generation::text into g;
          g := coalesce(g, '0');
          perform set_config(k, g, true);
        end if;
        new.vector_gen := g::bigint;
        return new;
      end
      $f$;
      create trigger rag_chunks_stamp before insert on rag_chunks
        for each row execute function rag_chunks_before_insert();

      create function rag_chunks_before_update() returns trigger language plpgsql as $f$
      declare
        k text := 'rag.epoch_' || replace(old.workspace_id::text, '-', '');
      begin
        if new.embedding is not null then
          new.embedding_f32 := rag_embedding_f32(new.embedding);
        else
          new.embedding_f32 := null;
        end if;
        if coalesce(current_setting(k, true), '') = '' then
          update rag_indexes set vector_epoch = vector_epoch + 1
            where workspace_id in (old.workspace_id, new.workspace_id);
          perform set_config(k, '1', true);
        end if;
        return new;
      end
      $f$;
      create trigger rag_chunks_restamp before update of embedding, dims, workspace_id on rag_chunks
        for each row execute function rag_chunks_before_update();

      create function rag_chunks_after_delete() returns trigger language plpgsql as $f$
      begin
        update rag_indexes set vector_epoch = vector_epoch + 1
          where workspace_id in (select distinct workspace_id from removed);
        return null;
      end
      $f$;
      create trigger rag_chunks_removed after delete on rag_chunks
        referencing old table as removed for each statement execute function rag_chunks_after_delete();
    `);
  }

  override async down(): Promise<void> {
    this.addSql(`
      drop trigger if exists rag_chunks_removed on rag_chunks;
      drop trigger if exists rag_chunks_restamp on rag_chunks;
      drop trigger if exists rag_chunks_stamp on rag_chunks;
      drop function if exists rag_chunks_after_delete(), rag_chunks_before_update(), rag_chunks_before_insert(), rag_embedding_f32(real[]);
      drop index if exists rag_chunks_ws_gen_idx;
      alter table rag_chunks drop column if exists embedding_f32, drop column if exists vector_gen;
      alter table rag_indexes drop column if exists vector_generation, drop column if exists vector_epoch;
    `);
  }
}

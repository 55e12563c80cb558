import { Migration } from './base.js';

/**
 * Per workspace, in how many chunks each lexeme occurs (document frequency), for the full-text
 * stage's rarity weights and its bounded candidate set (decision 0033). The row with the empty
 * lexeme `''` (never a real lexeme: `to_tsvector` produces none) counts the workspace's chunks.
 *
 * Statement-level triggers keep it in the same transaction as the chunks, whatever statement
 * changes them (ingest, re-index, cascades from documents, storage files and workspaces, the
 * bench's SQL loader). Every change is an upsert adding (or, for removed chunks, subtracting)
 * counts, in (workspace, lexeme) order so concurrent statements lock rows in the same order;
 * rows that reach 0 are deleted. No foreign key: a workspace deleted takes its chunks, whose
 * delete trigger takes the counts to 0.
 */
export class Migration202611260100_rag_lexeme_df extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table rag_lexeme_df (
        workspace_id uuid not null,
        lexeme text not null,
        df integer not null,
        primary key (workspace_id, lexeme)
      );

      insert into rag_lexeme_df (workspace_id, lexeme, df)
        select workspace_id, l, count(*)::int
        from rag_chunks, unnest(array_append(tsvector_to_array(tsv), ''::text)) as l
        group by workspace_id, l;

      create function rag_lexeme_df_apply() returns trigger language plpgsql as $f$
      begin
        if tg_op = 'UPDATE' then
          -- Only rows whose text or workspace changed (an embedding update changes no count).
          if not exists (select 1 from rag_terms_old o join rag_terms_new n on n.id = o.id
                         where o.tsv is distinct from n.tsv or o.workspace_id <> n.workspace_id) then
            return null;
          end if;
        end if;
        if tg_op in ('INSERT', 'UPDATE') then
          insert into rag_lexeme_df as d (workspace_id, lexeme, df)
            select workspace_id, l, count(*)::int
            from rag_terms_new, unnest(array_append(tsvector_to_array(tsv), ''::text)) as l
            group by workspace_id, l
            order by workspace_id, l
          on conflict (workspace_id, lexeme) do update set df = d.df + excluded.df;
        end if;
        if tg_op in ('DELETE', 'UPDATE') then
          insert into rag_lexeme_df as d (workspace_id, lexeme, df)
            select workspace_id, l, -count(*)::int
            from rag_terms_old, unnest(array_append(tsvector_to_array(tsv), ''::text)) as l
            group by workspace_id, l
            order by workspace_id, l
          on conflict (workspace_id, lexeme) do update set df = d.df + excluded.df;
          -- A second statement: the rows the upsert changed are visible to it.
          delete from rag_lexeme_df d
            using (select distinct workspace_id, l
                   from rag_terms_old, unnest(array_append(tsvector_to_array(tsv), ''::text)) as l) g
            where d.workspace_id = g.workspace_id and d.lexeme = g.l and d.df <= 0;
        end if;
        return null;
      end
      $f$;
      create trigger rag_chunks_terms_added after insert on rag_chunks
        referencing new table as rag_terms_new
        for each statement execute function rag_lexeme_df_apply();
      create trigger rag_chunks_terms_removed after delete on rag_chunks
        referencing old table as rag_terms_old
        for each statement execute function rag_lexeme_df_apply();
      create trigger rag_chunks_terms_changed after update on rag_chunks
        referencing old table as rag_terms_old new table as rag_terms_new
        for each statement execute function rag_lexeme_df_apply();
    `);
  }

  override async down(): Promise<void> {
    this.addSql(`
      drop trigger if exists rag_chunks_terms_changed on rag_chunks;
      drop trigger if exists rag_chunks_terms_removed on rag_chunks;
      drop trigger if exists rag_chunks_terms_added on rag_chunks;
      drop function if exists rag_lexeme_df_apply();
      drop table if exists rag_lexeme_df;
    `);
  }
}

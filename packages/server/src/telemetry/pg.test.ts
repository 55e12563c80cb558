import { describe, expect, it } from 'vitest';
import { statementOf, summarise } from './pg.js';

describe('db.query.summary of a statement', () => {
  it('names the operations and tables in order of appearance, each once', () => {
    expect(summarise('select id, name from workspaces where id = $1')).toBe('SELECT workspaces');
    expect(summarise('SELECT a.x FROM api_keys a JOIN workspaces w ON w.id = a.workspace_id')).toBe(
      'SELECT api_keys workspaces',
    );
    expect(summarise('insert into runs (id, kind) values ($1, $2)')).toBe('INSERT runs');
    expect(summarise('update runs set status = $1 where id = $2')).toBe('UPDATE runs');
    expect(summarise('delete from sessions where expires_at < now()')).toBe('DELETE sessions');
    expect(summarise('insert into usage_records (id) select id from runs where id = $1')).toBe(
      'INSERT usage_records SELECT runs',
    );
  });

  it('reads common table expressions, upserts and locking clauses', () => {
    const cte = `with k as (select id from api_keys where hash = $1),
      w as (update quota set used = used + $2 from k where quota.key_id = k.id returning quota.*)
      insert into rate_limit_windows as r (key, hits) select k.id, 1 from k
      on conflict (key) do update set hits = r.hits + 1 returning r.hits`;
    expect(summarise(cte)).toBe('SELECT api_keys UPDATE quota k INSERT rate_limit_windows SELECT');
    expect(summarise('select id from runs where status = $1 for update skip locked')).toBe('SELECT runs');
    expect(summarise('select * from runs r where r.x is distinct from $1 for no key update')).toBe(
      'SELECT runs',
    );
  });

  it('skips literals, comments, functions and subqueries', () => {
    expect(summarise("select 'from secrets' as x -- from hidden\n from /* from gone */ public.runs")).toBe(
      'SELECT public.runs',
    );
    expect(summarise('select * from unnest($1::text[]) as u(x)')).toBe('SELECT');
    expect(summarise('select n from (select count(*) as n from runs) s')).toBe('SELECT runs');
    expect(summarise('select * from "Quoted Table"')).toBe('SELECT "Quoted Table"');
  });

  it('stays within 255 characters', () => {
    const tables = Array.from({ length: 60 }, (_, i) => `table_number_${i}`);
    const s = summarise(`select * from ${tables.join(' join ')}`);
    expect(s.length).toBeLessThanOrEqual(255);
    expect(s.startsWith('SELECT table_number_0 table_number_1')).toBe(true);
  });

  it('computes a statement once and answers its span name and operation', () => {
    const text = 'select id from workspaces where id = $1';
    const a = statementOf(text);
    expect(a).toEqual({ name: 'pg.query:SELECT', operation: 'SELECT', summary: 'SELECT workspaces' });
    expect(statementOf(text)).toBe(a);
    expect(statementOf('-- a comment\nBEGIN')).toMatchObject({ name: 'pg.query:BEGIN', summary: 'BEGIN' });
  });

  it('describes EXECUTE by the statement its name was prepared as, never by its values', () => {
    expect(statementOf('EXECUTE q_unknown(1)')).toEqual({
      name: 'pg.query:EXECUTE',
      operation: 'EXECUTE',
      summary: 'EXECUTE q_unknown',
    });
    expect(statementOf('PREPARE q_0123abcd AS update runs set status = $1 where id = $2')).toEqual({
      name: 'pg.query:PREPARE',
      operation: 'PREPARE',
      summary: 'PREPARE UPDATE runs',
    });
    const run = statementOf("EXECUTE q_0123abcd('secret value', (42))");
    expect(run).toEqual({ name: 'pg.query:UPDATE', operation: 'UPDATE', summary: 'UPDATE runs' });
    expect(statementOf("EXECUTE q_0123abcd('another', (43))")).toBe(run);
  });
});

// The rate limit's windows shared by every gateway replica of a cluster (DESIGN §5: no client IP
// gets more than the limit in any 60-second window, whichever replica its requests reach). One
// row per client key: the seconds in which it was let through and how many requests in each, so
// a row stays small (about 61 entries) whatever the limit. The row lock of the upsert makes a
// take exact across replicas. Unlogged: the counts are worth nothing after a database crash, and
// every request writes them. No index beyond the key, so those writes stay heap-only updates; the
// once-a-minute sweep of quiet clients scans a table of one minute's clients. `asked` and `taken`
// belong to the last statement: how many requests it brought for the client and how many of them
// it let through (the upsert reads them back).
//
// A second is kept while a request in it could still be inside the window (its last millisecond
// is), so the count errs on the strict side by under a second; Retry-After says when it frees.
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create unlogged table rate_limit_windows (
      client text primary key,
      seconds bigint[] not null,
      counts integer[] not null,
      asked integer not null,
      taken integer not null,
      touched_at timestamptz not null
    )`);
  await knex.raw(`
    create function rate_limit_take(
      seconds bigint[], counts integer[], now_ms bigint, asked integer, max_requests integer, window_ms bigint,
      out kept_seconds bigint[], out kept_counts integer[], out taken integer
    ) language plpgsql immutable as $$
    declare
      used integer := 0;
      now_second bigint := now_ms / 1000;
      last integer;
    begin
      kept_seconds := '{}';
      kept_counts := '{}';
      for i in 1 .. coalesce(array_length(seconds, 1), 0) loop
        if (seconds[i] + 1) * 1000 > now_ms - window_ms then
          kept_seconds := kept_seconds || seconds[i];
          kept_counts := kept_counts || counts[i];
          used := used + counts[i];
        end if;
      end loop;
      taken := least(asked, greatest(0, max_requests - used));
      if taken = 0 then
        return;
      end if;
      last := array_length(kept_seconds, 1);
      if last is not null and kept_seconds[last] = now_second then
        kept_counts[last] := kept_counts[last] + taken;
      else
        kept_seconds := kept_seconds || now_second;
        kept_counts := kept_counts || taken;
      end if;
    end $$`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('drop table if exists rate_limit_windows');
  await knex.raw('drop function if exists rate_limit_take');
}

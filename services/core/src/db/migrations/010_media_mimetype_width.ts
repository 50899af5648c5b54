// A send's mimetype may be 255 characters (the API's limit), but the media column held 128, so a
// longer one was cut and its download's Content-Type could end inside a quoted parameter.
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  // Widening rewrites no row but needs a moment's exclusive lock: fail (and let the start retry)
  // rather than queue every media statement behind a long reader.
  await knex.raw(`set local lock_timeout = '5s'`);
  await knex.raw('alter table media alter column mimetype type varchar(255)');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('alter table media alter column mimetype type varchar(128) using left(mimetype, 128)');
}

// The embedded server's vacuum: PGlite reclaims nothing by itself, so without it the outbox (a
// row written and deleted per message) grows for good.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { migrate, openDatabase, type Db } from '@switchboard/core';
import { startDatabaseVacuum } from '../src/database-vacuum.ts';

describe('database vacuum (embedded storage)', function () {
  this.timeout(60_000);
  let dir: string;
  let db: Db;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sb-vacuum-'));
    db = openDatabase({ dataDir: dir });
    await migrate(db);
  });
  after(async () => {
    await db?.destroy();
    rmSync(dir, { recursive: true, force: true });
  });

  const outboxBytes = async () => Number((await db.raw(`select pg_total_relation_size('outbox') as n`)).rows[0].n);

  it('gives back the space of the rows the outbox published, soon after the start', async () => {
    for (let round = 0; round < 20; round++) {
      await db.raw(`insert into outbox (subject, msg_id, payload, headers) select 'evt.x', 'm' || g, repeat('p', 400), '{}' from generate_series(1, 500) g`);
      await db('outbox').delete();
    }
    const bloated = await outboxBytes();
    assert.ok(bloated > 2_000_000, `the churn left ${bloated} bytes`);
    const vacuum = startDatabaseVacuum({ db, log: { error() {} }, firstRunAfterMs: 10, intervalMs: 600_000 });
    try {
      const deadline = Date.now() + 20_000;
      while ((await outboxBytes()) > bloated / 10 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    } finally {
      vacuum.stop();
    }
    assert.ok((await outboxBytes()) < bloated / 10, `${await outboxBytes()} of ${bloated} bytes left`);
  });
});

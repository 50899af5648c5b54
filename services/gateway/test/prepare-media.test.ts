// A media send that loses to a delete of its instance — deleted while its file was decoded,
// converted or stored — answers 404 as if it came after the delete, and leaves no file behind.
import assert from 'node:assert/strict';
import { Problem } from '@switchboard/core';
import { startTestServer, type TestServer } from '../../../test/support/server.ts';
import type { GatewayDeps } from '../src/deps.ts';
import { checkMedia, storeSendMedia } from '../src/sending/media.ts';

describe('media of a send whose instance was deleted meanwhile', () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer({ storage: 'postgres' });
  });
  after(async () => t?.stop());

  it('is a 404 of the instance, and its stored file is removed', async () => {
    const { db, media } = t.server.platform;
    const deps = { db, media } as unknown as GatewayDeps;
    const gone = (await t.admin.post('/api/instances', { name: 'Deleted meanwhile' })).body.id;
    assert.equal((await t.admin.delete(`/api/instances/${gone}`)).status, 200);
    const stored: string[] = [];
    const put = media.put.bind(media);
    media.put = async (id, bytes) => {
      stored.push(id);
      return put(id, bytes);
    };
    try {
      const send = { phone: '5511922221111', type: 'document' as const, base64: Buffer.from('a file').toString('base64'), mimetype: 'text/plain' };
      await assert.rejects(storeSendMedia(deps, gone, send, checkMedia(send)!), (err: unknown) => err instanceof Problem && err.status === 404 && err.detail.startsWith('The instance'));
    } finally {
      media.put = put;
    }
    assert.equal(stored.length, 1, 'the file was stored before the record was refused');
    await assert.rejects(media.get(stored[0]), /not found/);
  });
});

// Credentials a client put where they do not belong (a path) never travel further in a span:
// scrubPath recognises them however the client escaped them.
import assert from 'node:assert/strict';
import { scrubPath } from '../src/logger.ts';

const token = 'sbi_aia8BGiIBalqsv_KedEyWng_lv5MQHlZ';

describe('scrubPath', () => {
  it('replaces a token as sent, percent-encoded once or twice, after a word character, or beside a malformed escape', () => {
    const paths = [
      `/api/instances/${token}`,
      `/api/instances/${token.replace('_', '%5F')}`,
      `/api/instances/%73bi_${token.slice(4)}`,
      `/api/instances/${token.replace('_', '%255F')}`,
      `/api/instances/msg_${token}`,
      `/api/instances/${token.replace('_', '%5F')}/100%`,
      `/api/instances/${token.replace('_', '%5F')}/%E0%A4`,
    ];
    for (const path of paths) {
      const scrubbed = scrubPath(path);
      assert.ok(!scrubbed.includes(token.slice(4)), `${path} → ${scrubbed}`);
      assert.match(scrubbed, /sbi_\[redacted\]/);
    }
  });

  it('leaves a path without credentials as the client sent it', () => {
    assert.equal(scrubPath('/api/instances/support%20line/messages'), '/api/instances/support%20line/messages');
    assert.equal(scrubPath('/api/100%'), '/api/100%');
  });

  it('replaces a secret without a shape by its value, encoded or not', () => {
    const key = 'operator chosen key!';
    assert.equal(scrubPath(`/api/${encodeURIComponent(key)}`, [key, encodeURIComponent(key)]), '/api/[redacted]');
  });
});

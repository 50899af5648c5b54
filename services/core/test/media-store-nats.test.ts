import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { jetstreamManager } from '@nats-io/jetstream';
import { getSha256Backend, Objm } from '@nats-io/obj';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { NATS_URL, testNamespace } from '../../../test/support/services.ts';
import { Crypto } from '../src/crypto.ts';
import { NatsMediaStore, natsMediaBucketName } from '../src/media/nats-store.ts';
import { openMediaStore } from '../src/media/open.ts';
import { describeMediaStoreContract } from './media-store-contract.ts';

describeMediaStoreContract('NatsMediaStore', async () => {
  const namespace = testNamespace();
  const nc = await connect({ servers: NATS_URL });
  const store = await NatsMediaStore.open({ natsUrl: NATS_URL, namespace, crypto: new Crypto(randomBytes(32)) });
  // A second handle on the same bucket, to read and rewrite stored objects behind the store's back.
  const raw = await new Objm(nc).open(natsMediaBucketName(namespace));
  return {
    store,
    readRaw: async (id) => Buffer.from((await raw.getBlob(id)) ?? Buffer.alloc(0)),
    writeRaw: async (id, bytes) => {
      await raw.putBlob({ name: id }, bytes);
    },
    cleanup: async () => {
      await store.destroy();
      await store.close();
      await nc.close();
    },
  };
});

describe('NatsMediaStore specifics', function () {
  this.timeout(20_000);
  let nc: NatsConnection;
  const namespace = testNamespace();

  before(async () => {
    nc = await connect({ servers: NATS_URL });
  });
  after(async () => {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.delete(`OBJ_${natsMediaBucketName(namespace)}`).catch(() => undefined);
    await nc.close();
  });

  it('openMediaStore with a NATS URL creates the namespace bucket with a 30-day TTL', async () => {
    const store = await openMediaStore({ natsUrl: NATS_URL, namespace, dataDir: '/nonexistent', crypto: new Crypto(randomBytes(32)) });
    assert.ok(store instanceof NatsMediaStore);
    const jsm = await jetstreamManager(nc);
    const info = await jsm.streams.info(`OBJ_${natsMediaBucketName(namespace)}`);
    assert.equal(info.config.max_age, 30 * 86_400 * 1_000_000_000);
    await store.put('med_x', Buffer.from('x'));
    assert.equal(Buffer.from(await store.get('med_x')).toString(), 'x');
    await store.close();
  });

  it("digests objects with Node's SHA-256, not the library's pure-JS default that blocks the event loop for seconds on a large file", async () => {
    const store = await NatsMediaStore.open({ natsUrl: NATS_URL, namespace, crypto: new Crypto(randomBytes(32)) });
    assert.equal(getSha256Backend(), 'native');
    const big = randomBytes(4 * 1024 * 1024);
    await store.put('med_big', big);
    assert.ok(Buffer.from(await store.get('med_big')).equals(big), 'the digest written is the one checked on reading');
    await store.close();
  });

  it('opens with a NATS_URL that lists several servers, as the bus does', async () => {
    const store = await openMediaStore({ natsUrl: `${NATS_URL}, nats://127.0.0.1:1`, namespace, dataDir: '/nonexistent', crypto: new Crypto(randomBytes(32)) });
    await store.put('med_seeds', Buffer.from('y'));
    assert.equal(Buffer.from(await store.get('med_seeds')).toString(), 'y');
    await store.close();
  });

  it('raises an existing bucket to the TTL it is opened with, never lowers it, and keeps its objects (MEDIA_RETENTION_MS raised)', async () => {
    const own = testNamespace();
    const crypto = new Crypto(randomBytes(32));
    const stream = `OBJ_${natsMediaBucketName(own)}`;
    const jsm = await jetstreamManager(nc);
    try {
      const first = await NatsMediaStore.open({ nc, namespace: own, crypto, ttlMs: 3_600_000 });
      await first.put('med_kept', Buffer.from('kept'));
      await first.close();
      const untouched = await NatsMediaStore.open({ nc, namespace: own, crypto });
      await untouched.close();
      assert.equal((await jsm.streams.info(stream)).config.max_age, 3_600 * 1_000_000_000, 'opened without a TTL: the bucket keeps its own');
      const raised = await NatsMediaStore.open({ nc, namespace: own, crypto, ttlMs: 90 * 86_400_000 });
      assert.equal((await jsm.streams.info(stream)).config.max_age, 90 * 86_400 * 1_000_000_000);
      assert.equal(Buffer.from(await raised.get('med_kept')).toString(), 'kept');
      await raised.close();
      const shorter = await NatsMediaStore.open({ nc, namespace: own, crypto, ttlMs: 30 * 86_400_000 });
      await shorter.close();
      assert.equal((await jsm.streams.info(stream)).config.max_age, 90 * 86_400 * 1_000_000_000, 'a process with a shorter TTL (a session on the default) never lowers it');
    } finally {
      await jsm.streams.delete(stream).catch(() => undefined);
    }
  });

  it('reports a chunk altered in the stream itself (digest mismatch) as MediaIntegrityError', async () => {
    const store = await NatsMediaStore.open({ nc, namespace, crypto: new Crypto(randomBytes(32)) });
    await store.put('med_chunk', randomBytes(1000));
    const bucket = await new Objm(nc).open(natsMediaBucketName(namespace));
    const info = await bucket.info('med_chunk');
    assert.ok(info);
    // Replace the chunk message: remove it and publish altered bytes on the same chunk subject.
    const jsm = await jetstreamManager(nc);
    const stream = `OBJ_${natsMediaBucketName(namespace)}`;
    const subject = `$O.${natsMediaBucketName(namespace)}.C.${info.nuid}`;
    const chunk = await jsm.streams.getMessage(stream, { last_by_subj: subject });
    assert.ok(chunk);
    const altered = Buffer.from(chunk.data);
    altered[100] ^= 0xff;
    await jsm.streams.deleteMessage(stream, chunk.seq);
    const js = jsm.jetstream();
    await js.publish(subject, altered);
    await assert.rejects(store.get('med_chunk'), { name: 'MediaIntegrityError' });
    await store.close(); // does not close a connection it was given
    assert.equal(nc.isClosed(), false);
  });
});
